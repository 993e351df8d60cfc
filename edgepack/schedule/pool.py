"""Pooling windows (MaxPool, AveragePool: [n, c, h, w] outputs, each a reduction over a window of a padded
input) one image plane at a time.

Legalized, such a kernel pads the whole input into workspace first, then reduces one output element at a
time, on one thread: ResNet-18's 3x3 stride-2 max pool took 5.0 ms at batch 2 (6.4% of the model) and its
padded copy 26.6 MB of arena at batch 8. Here the planes (n, c) run in parallel, each pads only its own plane
(workspace: one plane), and within a plane the window loops go outside the output row, which is vectorized:
each window offset is one vector max (or add) over a row of outputs. A consumer (an average's divide) is
computed per plane after it. Dynamic image sizes keep the row scalar (no static extent to vectorize).
"""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .conv import kernel_blocks


def pool_kernel(func: tirx.PrimFunc, parallel: bool, vectorize: bool) -> tirx.PrimFunc | None:
    """The scheduled kernel when `func` is a pooling window over [n, c, h, w], else None."""
    window = _window_block(func)
    if window is None:
        return None
    try:
        return _schedule(s_tir.Schedule(tvm.IRModule({"main": func})), window, parallel, vectorize)
    except Exception:  # ScheduleError or a TVM internal error: the caller keeps the generic schedule
        return None


def _window_block(func: tirx.PrimFunc) -> str | None:
    """The window reduction's block name: the kernel's one reduction, 4 spatial iterators then 1-2 window
    iterators, with only element-wise blocks (padding before, a divide after) around it."""
    blocks = kernel_blocks(func)
    reductions = [b for b in blocks if any(iv.iter_type == 2 for iv in b.iter_vars)]
    if len(reductions) != 1:
        return None
    kinds = [iv.iter_type for iv in reductions[0].iter_vars]
    if kinds[:4] != [0, 0, 0, 0] or not 1 <= len(kinds) - 4 <= 2 or any(k != 2 for k in kinds[4:]):
        return None
    if any(iv.iter_type != 0 for b in blocks if b is not reductions[0] for iv in b.iter_vars):
        return None
    return reductions[0].name_hint


def _schedule(sch: s_tir.Schedule, window: str, parallel: bool, vectorize: bool) -> tirx.PrimFunc:
    blk = sch.get_sblock(window)
    producers, consumers = sch.get_producers(blk), sch.get_consumers(blk)
    n, c, h, w, *rs = sch.get_loops(blk)
    plane = sch.fuse(n, c)
    for prod in producers:
        sch.compute_at(prod, plane)  # the padding of this plane only
    for cons in consumers:
        sch.reverse_compute_at(cons, plane)
    if parallel:  # before the window loops move outside the row: the check needs the plain reduction
        sch.parallel(plane)
    sch.reorder(h, *rs, w)  # each window offset: one pass over the output row
    static = vectorize and isinstance(sch.get(w).extent, tirx.IntImm)
    if static:  # before decompose_reduction: the check wants the reduction with its init
        sch.vectorize(w)
    init = sch.decompose_reduction(blk, rs[0])
    if static:
        sch.vectorize(sch.get_loops(init)[-1])
    for cons in consumers if vectorize else []:
        if isinstance(sch.get(loop := sch.get_loops(cons)[-1]).extent, tirx.IntImm):
            sch.vectorize(loop)
    return sch.mod["main"]
