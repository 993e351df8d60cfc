"""Apply a tuning database to a build: per tuned kernel, its main micro-kernels, edge kernel and dispatcher."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..board import Board
from ..errors import EdgepackError
from ..model.plan import DimRange
from ..schedule.variants import DenseChoice, Schedules
from .db import TuningDB, kernel_variant
from .dispatch_tree import TreeDispatcher
from .search import tiles_of
from .tasks import extract_tasks

log = logging.getLogger("edgepack")


@dataclass
class Applied:
    schedules: Schedules
    tuned: dict[str, int]  # kernel -> number of main micro-kernels
    untuned: list[str]  # tunable kernels the database has no selection for
    verification: dict[str, dict] = field(default_factory=dict)  # kernel -> predicted against measured (below)


def verification_json(sel: dict) -> dict:
    """What a selection says of its cost model, for the manifest and `bench`: per sample, the latency the
    model predicted for the chosen kernel and the latency measured at verification; `model_off_by`: how far
    off the model was over the whole verified shortlist (> OFF_BY: off, and the measurements chose too)."""
    from .search import OFF_BY

    pred, meas = sel.get("predicted_s") or [], sel.get("measured_s") or []
    ok = [(p, m) for p, m in zip(pred, meas) if p and m and math.isfinite(p) and math.isfinite(m)]
    geo = math.exp(sum(math.log(p / m) for p, m in ok) / len(ok)) if ok else None
    off_by = sel.get("model_off_by")
    return {"samples": list(sel.get("samples", {}).get("values", [])), "predicted_s": pred, "measured_s": meas,
            "predicted_over_measured": geo, "model_off_by": off_by,
            "model_off": bool(off_by is not None and off_by > OFF_BY), "off_threshold": OFF_BY,
            "measured_picks": sel.get("measured_picks", 0), "cost_model": sel.get("cost_model"),
            "search_off_by": sel.get("search_off_by"), "reweighted": sel.get("reweighted", 1.0),
            "measured_trials": sel.get("measured_trials", 0)}


def dispatcher_of(sel: dict, dim: DimRange) -> TreeDispatcher:
    """A selection's dispatcher over `dim` (the tuned range: it contains the package's): the samples' measured
    choices, and the estimated ones between them."""
    return TreeDispatcher.fit([dim], [{dim.name: v} for v in sel["samples"]["values"]], sel["assign"],
                              sel["samples"]["weights"], between=[({dim.name: r}, k) for r, k in sel.get("between", [])])


def tuned_schedules(db_path: str | Path, lowered, dims: list[DimRange], board: Board, base: Schedules) -> Applied:
    if not Path(db_path).exists():
        raise EdgepackError(f"tuning database {db_path} does not exist; run `edgepack tune` first or drop --db")
    dense, conv, dispatchers = dict(base.dense), dict(base.conv), dict(base.dispatchers)
    attention = dict(base.attention)
    tuned, untuned, verification = {}, [], {}
    variant = kernel_variant(base)  # only what was measured on the kernels this build makes
    stale = []
    with TuningDB(db_path) as db:
        for t in extract_tasks(lowered, dims, base.vectorize):
            wl = db.find_workload(t.kind, t.static_dims, t.dtype, board.name, variant)
            sel = db.selection(wl, {"m": [t.op.lo, t.op.hi]}) if wl else None
            if sel is None:
                untuned.append(t.kernel)
                stale.append((t.kind, t.static_dims, t.dtype, board.name))
                continue
            mains = tuple(tiles_of(c) for c in sel["mains"])
            tuned[t.kernel] = len(mains)
            verification[t.kernel] = verification_json(sel)
            if t.kind != "dense":  # one micro-kernel for every batch (conv2d) or seq (attention): no dispatcher
                (conv if t.kind == "conv2d" else attention)[t.kernel] = mains[0]
                continue
            dense[t.kernel] = DenseChoice(mains, tiles_of(sel["edge"]))
            lo, hi = wl.dynamic_dims["m"]
            dispatchers[t.kernel] = dispatcher_of(sel, DimRange(t.dim.name, t.dim.c_name, lo, hi))
        note = db.stale_note(stale, variant)
    if note:  # one line for both: why there is no result, and what to do
        log.warning("%s; %s use the default schedule: run `edgepack tune` again", note, ", ".join(untuned))
    elif untuned:
        log.warning("no tuning result on board '%s' for %s (range %s): they use the default schedule; run "
                    "`edgepack tune` over this range", board.name, ", ".join(untuned),
                    ", ".join(f"{d.name}={d.lo}:{d.hi}" for d in dims))
    return Applied(replace(base, dense=dense, conv=conv, attention=attention, dispatchers=dispatchers), tuned, untuned,
                   verification)
