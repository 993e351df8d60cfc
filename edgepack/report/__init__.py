"""Benchmark results and reports: `edgepack bench` writes a versioned JSON run, `edgepack report` reads runs.

  schema.py    the result format (dataclasses, JSON Schema, validate, load/save; versioned)
  grid.py      which sizes to measure (--sizes, default grid)
  runner.py    measure a package size by size through a Device, interleaved with baselines
  baseline.py  onnxruntime timing (CPU EP, call cost), shared with benchmarks/encoder_vs_onnxruntime.py
  compare.py   speed-ups between runs and the CI regression check
  plots.py, html.py, markdown.py   the report (matplotlib Agg, inline SVG, no network)
"""
