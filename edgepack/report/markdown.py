"""A Markdown summary of one or more runs, for pasting into a pull request."""

from __future__ import annotations

from .compare import fmt_ratio, fmt_time, pairs, run_labels
from .schema import Run

NOISY = 0.5  # spread (p90 - p10) / median above this: the median is not to be trusted to a few percent


def describe(run: Run) -> str:
    p, m = run.package, run.machine
    dims = ", ".join(f"{d['name']} {d['min']}..{d['max']}" for d in p["dims"]) or "no dynamic dims"
    clock = f", {m['clock_mhz']:.0f} MHz" if m.get("clock_mhz") else ""
    tuned = "tuned" + (f" (database {p['database_id']})" if p.get("database_id") else "") if p["tuned"] else "untuned"
    return (f"{p['model']['name']} ({dims}) on board {m['board']}: {m['cpu']}, {m.get('cores') or '?'} cores{clock}, "
            f"{m['os']}; edgepack {p['edgepack_version']}, TVM {p['tvm_version']}, {tuned}; measured {run.created}"
            + (f"; ticks: {m['timer']}" if m.get("timer") else ""))


def size_rows(run: Run) -> tuple[list[str], list[list[str]]]:
    """The figures table of one run (shared with the HTML report)."""
    base = list(dict.fromkeys(k for s in run.sizes for k in s.baselines))
    head = ["size", "median", "p10-p90", "min", "max", "spread", "n", "threads"]
    head += [h for k in base for h in (k, f"vs {k}")]
    rows = []
    for s in run.sizes:
        st, u = s.stats, s.unit
        row = [s.label(), fmt_time(st.median, u), f"{fmt_time(st.p10, u)} - {fmt_time(st.p90, u)}",
               fmt_time(st.min, u), fmt_time(st.max, u), f"{st.spread:.1%}" + (" (noisy)" if st.spread > NOISY else ""),
               str(st.n), str(s.threads or "")]
        for k in base:
            b = s.baselines.get(k)
            row += [fmt_time(b.stats.median), fmt_ratio(b.speedup)] if b else ["", ""]
        rows.append(row)
    return head, rows


def tuning_rows(run: Run) -> tuple[list[str], list[list[str]]] | None:
    """The cost model against the board per tuned kernel (shared with the HTML report); None when the package
    carries no tuning verification."""
    tuning = run.package.get("tuning")
    if not tuning:
        return None
    head = ["kernel", "cost model", "samples", "predicted (weighted)", "measured (weighted)", "predicted/measured",
            "model off by", "verdict"]
    rows = []
    for t in tuning:
        pm = [(p, m) for p, m in zip(t["predicted_s"], t["measured_s"]) if p and m]
        geo, off = t.get("predicted_over_measured"), t.get("model_off_by")
        said = []
        if (t.get("search_off_by") or 0) > 2:
            said.append(f"off in search (x{t['search_off_by']:.1f}): samples re-weighted x{t.get('reweighted') or 1:.0f}, "
                        f"{t.get('measured_trials', 0)} trial(s) from measurements")
        if t["model_off"]:
            said.append(f"off (> 2x): {t.get('measured_picks', 0)} kernel(s) chosen from measurements")
        verdict = "; ".join(said) or "ok"
        rows.append([t["kernel"], t.get("cost_model") or "", str(len(t["samples"])),
                     fmt_time(sum(p for p, _ in pm) * 1e9) if pm else "", fmt_time(sum(m for _, m in pm) * 1e9) if pm else "",
                     f"{geo:.2f}" if geo else "", f"x{off:.2f}" if off else "", verdict])
    return head, rows


def comparison_rows(new: Run, old: Run, new_label: str, old_label: str) -> tuple[list[str], list[list[str]]]:
    head = ["size", new_label, old_label, f"{new_label} vs {old_label}"]
    rows = [[p.new.label(), fmt_time(p.new.stats.median, p.new.unit), fmt_time(p.old.stats.median, p.old.unit),
             fmt_ratio(p.speedup)] for p in pairs(new, old)]
    return head, rows


def memory_line(run: Run) -> str:
    m = run.memory
    line = (f"arena {m['arena_bytes']:,} B (tensors {m.get('tensor_bytes', 0):,} B + workspace), "
            f"weights {m['weights_bytes']:,} B, code {m['code_bytes']:,} B")
    return line + ("; " + float_saving(m) if m.get("float_build") else "")


def float_saving(memory: dict) -> str:
    """A quantised package's tensors and weights against the float build of the same model."""
    f = memory["float_build"]
    part = lambda what, q, fl: f"{what} {q:,} B vs {fl:,} B (x{fl / max(q, 1):.2f} smaller)"  # noqa: E731
    return ("against the float build: " + part("tensors", memory["tensor_bytes"], f["tensor_bytes"]) + ", "
            + part("weights", memory["weights_bytes"], f["weights_bytes"]))


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(runs: list[Run]) -> str:
    labels = run_labels(runs)
    out = ["## edgepack bench report", ""]
    for run, label in zip(runs, labels):
        out += [f"### {label}", "", describe(run) + ".", "", f"Memory: {memory_line(run)}.", ""]
        if run.baseline:
            b = run.baseline
            out += [f"Baseline: onnxruntime {b['version']} ({b.get('provider', 'CPU')}, threads "
                    f"{', '.join(map(str, b['threads']))}), interleaved with edgepack in the same run; "
                    "\"vs\" = onnxruntime median / edgepack median.", ""]
        out += _table(*size_rows(run)) + [""]
        if (tr := tuning_rows(run)) is not None:
            out += ["Tuning: the cost model's predictions against the latencies measured at verification "
                    "(summed over the samples, each on its chosen kernel).", ""] + _table(*tr) + [""]
    for other, label in zip(runs[1:], labels[1:]):
        out += [f"### {labels[0]} vs {label}", ""] + _table(*comparison_rows(runs[0], other, labels[0], label)) + [""]
    return "\n".join(out)
