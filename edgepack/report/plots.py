"""The report's figures as inline SVG strings (matplotlib; text drawn as paths, so no fonts or network).

Figures are made with matplotlib.figure.Figure, not pyplot, and styled inside rc_context: no backend switch and
no global state left behind in the caller's process.

Each figure's ids get a prefix: several SVGs in one HTML page share one id space, and matplotlib's ids (glyphs,
clip paths) repeat across figures.
"""

from __future__ import annotations

import io
import itertools
import re

from functools import wraps

from matplotlib import rc_context, rcParams
from matplotlib.figure import Figure

from .compare import pairs
from .schema import Run, SizeResult

_ids = itertools.count()
_STYLE = {"svg.fonttype": "path", "svg.hashsalt": "edgepack", "font.size": 9, "axes.spines.top": False,
          "axes.spines.right": False}


def _styled(fn):
    @wraps(fn)
    def wrapper(*args, **kw):
        with rc_context(_STYLE):
            return fn(*args, **kw)
    return wrapper


def _axes(w: float, h: float):
    fig = Figure(figsize=(w, h))
    return fig, fig.subplots()


def to_svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)  # inline SVG in HTML needs no namespaces (no URLs left)
    n = next(_ids)
    svg = svg.replace('id="', f'id="f{n}-').replace('href="#', f'href="#f{n}-').replace("url(#", f"url(#f{n}-")
    return '<svg class="plot"' + svg.removeprefix("<svg")


def x_dim(runs: list[Run]) -> str:
    """The dim the latency plot runs along: the one with the most distinct measured values."""
    values: dict[str, set] = {}
    for r in runs:
        for s in r.sizes:
            for k, v in s.dims.items():
                values.setdefault(k, set()).add(v)
    return max(values, key=lambda k: len(values[k])) if values else "(static shapes)"


def _scale(unit: str) -> tuple[float, str]:
    return (1e3, "us") if unit == "ns" else (1.0, unit)


def _series(run: Run, label: str, xd: str):
    """(name, xs, stats, dashed) per curve: edgepack and each baseline, per value of the other dims."""
    groups: dict[tuple, list[SizeResult]] = {}
    for s in run.sizes:
        groups.setdefault(tuple((k, v) for k, v in s.dims.items() if k != xd), []).append(s)
    for rest, sizes in groups.items():
        sizes.sort(key=lambda s: s.dims.get(xd, 1))
        tag = label + (" " + ", ".join(f"{k}={v}" for k, v in rest) if rest else "")
        xs = [s.dims.get(xd, 1) for s in sizes]
        yield f"{tag} edgepack", xs, [s.stats for s in sizes], False
        for b in sizes[0].baselines:
            if all(b in s.baselines for s in sizes):
                yield f"{tag} {b}", xs, [s.baselines[b].stats for s in sizes], True


@_styled
def latency_figure(runs: list[Run], labels: list[str]) -> str:
    xd = x_dim(runs)
    div, unit = _scale(runs[0].sizes[0].unit)
    fig, ax = _axes(7.5, 4.2)
    for color, (name, xs, stats, dashed) in zip(itertools.cycle(rcParams["axes.prop_cycle"].by_key()["color"]),
                                              (s for r, lb in zip(runs, labels) for s in _series(r, lb, xd))):
        ax.fill_between(xs, [s.p10 / div for s in stats], [s.p90 / div for s in stats], color=color, alpha=0.2, lw=0)
        ax.plot(xs, [s.median / div for s in stats], "--" if dashed else "-", marker="o", ms=4, color=color,
                label=name)
    allx = [s.dims.get(xd, 1) for r in runs for s in r.sizes]
    if max(allx) >= 8 * max(min(allx), 1):
        ax.set_xscale("log", base=2)
    meds = [s.stats.median for r in runs for s in r.sizes]
    if max(meds) > 20 * min(meds):
        ax.set_yscale("log")
    ax.set_xticks(sorted(set(allx)), [str(v) for v in sorted(set(allx))])
    ax.set_xlabel(xd)
    ax.set_ylabel(f"latency ({unit}), median and p10-p90")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("Latency vs " + xd)
    return to_svg(fig)


@_styled
def speedup_figure(runs: list[Run], labels: list[str]) -> str | None:
    """Speed-up of the first run per size: vs each other run and vs its baselines (> 1: first run faster)."""
    bars: dict[str, dict[str, float]] = {}
    for other, lb in zip(runs[1:], labels[1:]):
        for p in pairs(runs[0], other):
            bars.setdefault(f"vs {lb}", {})[p.new.label()] = p.speedup
    for s in runs[0].sizes:
        for k, b in s.baselines.items():
            bars.setdefault(f"vs {k}", {})[s.label()] = b.speedup
    if not bars:
        return None
    sizes = [s.label() for s in runs[0].sizes]
    fig, ax = _axes(7.5, 3.2)
    w = 0.8 / len(bars)
    for i, (name, vals) in enumerate(bars.items()):
        xs = [j + i * w for j, sz in enumerate(sizes) if sz in vals]
        bars_i = ax.bar(xs, [vals[sz] for sz in sizes if sz in vals], w, label=name)
        ax.bar_label(bars_i, fmt="{:.2g}", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    crowded = sum(len(s) for s in sizes) > 60
    ax.set_xticks([j + w * (len(bars) - 1) / 2 for j in range(len(sizes))], sizes,
                  rotation=30 if crowded else 0, ha="right" if crowded else "center")
    ax.set_ylabel(f"speed-up of {labels[0]} (x)")
    ax.set_title(f"Speed-up of edgepack ({labels[0]}) per size (> 1: {labels[0]} faster)")
    ax.legend(fontsize=8, frameon=False)
    return to_svg(fig)


@_styled
def operators_figure(found: list[tuple[str, SizeResult]], top: int = 12) -> str:
    """Per-kernel time at one size, one bar group per run that was profiled there."""
    names = []
    for _, s in found:
        names += [o["name"] for o in s.operators[:top] if o["name"] not in names]
    names = names[:top]
    fig, ax = _axes(7.5, 0.6 + 0.32 * len(names) * max(1, len(found)))
    h = 0.8 / len(found)
    for i, (label, s) in enumerate(found):
        by = {o["name"]: o for o in s.operators}
        ax.barh([j + i * h for j in range(len(names))], [by[n]["ns"] / 1e3 if n in by else 0 for n in names], h,
                label=f"{label} ({s.label()})")
    ax.set_yticks([j + h * (len(found) - 1) / 2 for j in range(len(names))],
                  [n if len(n) <= 40 else n[:37] + "..." for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("time per run (us), summed over the kernel's calls")
    ax.set_title("Where the time goes, by kernel (fused operators)")
    ax.legend(fontsize=8, frameon=False)
    return to_svg(fig)


@_styled
def memory_figure(runs: list[Run], labels: list[str]) -> str:
    parts = [("arena", "arena_bytes"), ("weights", "weights_bytes"), ("code", "code_bytes")]
    fig, ax = _axes(7.5, 0.9 + 0.3 * len(runs))
    left = [0.0] * len(runs)
    for name, key in parts:
        vals = [r.memory.get(key, 0) / 1024 for r in runs]
        ax.barh(labels, vals, left=left, label=name)
        left = [a + b for a, b in zip(left, vals)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:,.0f} KiB", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.18)
    ax.set_xlabel("KiB (arena: tensors + kernel workspace; weights and code: read-only)")
    ax.legend(fontsize=8, frameon=False, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return to_svg(fig)
