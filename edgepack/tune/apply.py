"""Apply a tuning database to a build: per tuned kernel, its main micro-kernels, edge kernel and dispatcher."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
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


def tuned_schedules(db_path: str | Path, lowered, dims: list[DimRange], board: Board, base: Schedules) -> Applied:
    if not Path(db_path).exists():
        raise EdgepackError(f"tuning database {db_path} does not exist; run `edgepack tune` first or drop --db")
    dense, conv, dispatchers = dict(base.dense), dict(base.conv), dict(base.dispatchers)
    tuned, untuned = {}, []
    variant = kernel_variant(base)  # only what was measured on the kernels this build makes
    stale = []
    with TuningDB(db_path) as db:
        for t in extract_tasks(lowered, dims):
            wl = db.find_workload(t.kind, t.static_dims, t.dtype, board.name, variant)
            sel = db.selection(wl, {"m": [t.op.lo, t.op.hi]}) if wl else None
            if sel is None:
                untuned.append(t.kernel)
                stale.append((t.kind, t.static_dims, t.dtype, board.name))
                continue
            mains = tuple(tiles_of(c) for c in sel["mains"])
            tuned[t.kernel] = len(mains)
            if t.kind == "conv2d":  # one micro-kernel for every batch: no dispatcher
                conv[t.kernel] = mains[0]
                continue
            dense[t.kernel] = DenseChoice(mains, tiles_of(sel["edge"]))
            lo, hi = wl.dynamic_dims["m"]
            dim = DimRange(t.dim.name, t.dim.c_name, lo, hi)  # the tuned range: contains the package's
            dispatchers[t.kernel] = TreeDispatcher.fit([dim], [{dim.name: v} for v in sel["samples"]["values"]],
                                                       sel["assign"], sel["samples"]["weights"])
        note = db.stale_note(stale, variant)
    if note:  # one line for both: why there is no result, and what to do
        log.warning("%s; %s use the default schedule: run `edgepack tune` again", note, ", ".join(untuned))
    elif untuned:
        log.warning("no tuning result on board '%s' for %s (range %s): they use the default schedule; run "
                    "`edgepack tune` over this range", board.name, ", ".join(untuned),
                    ", ".join(f"{d.name}={d.lo}:{d.hi}" for d in dims))
    return Applied(replace(base, dense=dense, conv=conv, dispatchers=dispatchers), tuned, untuned)
