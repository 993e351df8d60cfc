"""Untuned dense row tile on this host: the board default (4 rows where there are 16 vector registers) vs 6
rows (MLAS's AVX2 block), on the MiniLM-L6 export of transformer_zoo.py. Two packages, one per row tile;
their `ep bench` runs interleave, and each size's figure is the median of the pair ratios (this machine is
shared: ratios, not absolute times).

    python benchmarks/dense_row_tile.py [--rows 6] [--rounds 5] [--threads 1]

Writes benchmarks/results/dense_row_tile.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformer_zoo import RESULTS, cpu_facts, export_minilm  # noqa: E402

SEQS = (1, 8, 32, 77, 128, 256)


def build(model: Path, out: Path, rows: int | None) -> Path:
    from edgepack.pipeline import build_package
    from edgepack.schedule.dense import DenseTiles

    board_default = DenseTiles.for_width
    if rows is not None:  # the same default with another row tile
        DenseTiles.for_width = staticmethod(lambda n, lanes, regs: replace(board_default(n, lanes, regs), rows=rows))
    try:
        return build_package(model, "host", {"batch": (1, 4), "seq": (1, 256)}, out, name="minilm").bundle.path
    finally:
        DenseTiles.for_width = staticmethod(board_default)


def median_ns(pkg: Path, seq: int, threads: int) -> float:
    out = subprocess.run([str(pkg / "ep"), "bench", "--threads", str(threads), "--warmup", "2", "--repeat", "10",
                          "1", str(seq)], capture_output=True, text=True, check=True).stdout
    return statistics.median(json.loads(out)["samples_ns"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        export_minilm(tmp / "minilm.onnx", 6)
        default = build(tmp / "minilm.onnx", tmp / "default", None)
        other = build(tmp / "minilm.onnx", tmp / "other", a.rows)
        rows = []
        for seq in SEQS:
            pairs = [(median_ns(default, seq, a.threads), median_ns(other, seq, a.threads)) for _ in range(a.rounds)]
            ratio = statistics.median(d / o for d, o in pairs)
            rows.append({"seq": seq, "default_us": statistics.median(d for d, _ in pairs) / 1e3,
                         f"rows{a.rows}_us": statistics.median(o for _, o in pairs) / 1e3,
                         f"default_time_over_rows{a.rows}_time": ratio})
            print(f"seq {seq}: default / {a.rows}-row time x{ratio:.3f}", flush=True)
    out = {"benchmark": "dense_row_tile", "cpu": cpu_facts(), "threads": a.threads, "rounds": a.rounds,
           "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dense_row_tile.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
