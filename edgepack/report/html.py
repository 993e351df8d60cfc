"""The HTML report: one self-contained file (inline CSS and SVG; no scripts, fonts or links to fetch)."""

from __future__ import annotations

import html
import math
import time

from . import plots
from .compare import fmt_time, run_labels
from .markdown import comparison_rows, describe, memory_line, size_rows, tuning_rows
from .schema import SCHEMA_VERSION, Run, SizeResult

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; } .wide { overflow-x: auto; }
td:first-child, th:first-child { text-align: left; }
.figure { margin: 12px 0; } .figure svg { width: 100%; max-width: 900px; height: auto; }
.note { color: #666; font-size: 13px; }
"""


def pick_size(runs: list[Run], at: dict[str, int] | None) -> tuple[dict, list[tuple[str, SizeResult]]]:
    """The size for the per-operator breakdown: `at` (dims named there must match), else the largest profiled
    size of the first profiled run; with each run's profiled result at that size."""
    labels = run_labels(runs)
    profiled = [(lb, s) for r, lb in zip(runs, labels) for s in r.sizes if s.operators]
    if at:
        profiled = [(lb, s) for lb, s in profiled if all(s.dims.get(k) == v for k, v in at.items())]
    if not profiled:
        return at or {}, []
    _, s0 = max((p for p in profiled if p[0] == profiled[0][0]),
                key=lambda p: (math.prod(p[1].dims.values()), p[1].stats.median))
    return s0.dims, [(lb, s) for lb, s in profiled if s.key == s0.key]


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<div class='wide'><table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table></div>"


def _figure(svg: str, name: str) -> str:
    return f'<div class="figure" id="{name}">{svg}</div>'


def _operators_section(runs: list[Run], at: dict | None) -> str:
    dims, found = pick_size(runs, at)
    want = ", ".join(f"{k}={v}" for k, v in dims.items())
    if not found:
        return (f"<h2>Per-operator breakdown</h2><p class='note'>No per-call profile{' at ' + want if want else ''}: "
                "run <code>edgepack bench --profile</code> (and pick a measured size with <code>--at</code>).</p>")
    return (f"<h2>Per-operator breakdown at {html.escape(want)}</h2>"
            + _figure(plots.operators_figure(found), "plot-operators")
            + "<p class='note'>From a run of its own of <code>ep bench --profile</code> (every kernel call timed on the "
              "device's clock, mean per run); the latency figures come from the unprofiled run.</p>")


def _call_cost(run: Run) -> str:
    costs = [b.call_cost_ns for s in run.sizes for b in s.baselines.values()]
    return f"{fmt_time(min(costs))} to {fmt_time(max(costs))}" if costs else "not measured"


def _run_section(run: Run, label: str) -> str:
    base = ""
    if run.baseline:
        b = run.baseline
        base = (f"<p>Baseline: onnxruntime {html.escape(b['version'])} ({html.escape(b.get('provider', 'CPU'))}, "
                f"threads {', '.join(map(str, b['threads']))}), interleaved with edgepack size by size; "
                "\"vs\" = onnxruntime median / edgepack median. onnxruntime's figures include its Python call cost "
                f"({html.escape(_call_cost(run))}, measured on an Identity model with the same inputs; per size in "
                "<code>call_cost_ns</code>).</p>")
    return (f"<h2>{html.escape(label)}: figures</h2><p>{html.escape(describe(run))}<br>"
            f"Memory: {html.escape(memory_line(run))}<br><span class='note'>{html.escape(run.source)}: "
            f"{html.escape(' '.join(run.command))}</span></p>{base}" + _table(*size_rows(run)) + _tuning(run))


def _tuning(run: Run) -> str:
    rows = tuning_rows(run)
    if rows is None:
        return ""
    return ("<p>Tuning: the cost model's predictions against the latencies measured at verification (summed "
            "over the samples, each on its chosen kernel; a model more than 2x off lets the measurements choose "
            "kernels too).</p>" + _table(*rows))


def render(runs: list[Run], at: dict[str, int] | None = None) -> str:
    labels = run_labels(runs)
    title = f"edgepack: {runs[0].package['model']['name']} on {runs[0].machine['board']}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class='note'>{len(runs)} run(s): {html.escape(', '.join(labels))}. Generated "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from bench results (schema version "
             f"{SCHEMA_VERSION}).</p>",
             "<h2>Latency vs size</h2>", _figure(plots.latency_figure(runs, labels), "plot-latency")]
    speed = plots.speedup_figure(runs, labels)
    if speed:
        parts += ["<h2>Speed-up</h2>", _figure(speed, "plot-speedup")]
    for other, lb in zip(runs[1:], labels[1:]):
        parts.append(_table(*comparison_rows(runs[0], other, labels[0], lb)))
    parts += [_operators_section(runs, at), "<h2>Memory</h2>",
              _figure(plots.memory_figure(runs, labels), "plot-memory")]
    parts += [_run_section(r, lb) for r, lb in zip(runs, labels)]
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
