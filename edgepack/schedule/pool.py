"""Pooling windows (MaxPool, AveragePool: [n, c, h, w] outputs, each a reduction over a window of a padded
input) one image plane at a time.

Legalized, such a kernel pads the whole input into workspace first, then reduces one output element at a
time, on one thread. For ResNet-18's 3x3 stride-2 max pool, that padded copy is 26.6 MB of workspace at
batch 8. Here the planes (n, c) run in parallel, each pads only its own plane (workspace: one plane per
thread, 51 KB), and each output's window is unrolled. A consumer (an average's divide) is computed per plane
after it. Measured on that pool alone (batch 2, 2 threads, 5 alternating runs): 0.34-0.61 ms, against
0.70-0.74 ms before. Vectorizing the output row with the window loops outside it was slower, 1.8 ms: a
stride-2 row is a gather for TVM's vector code.

C-source kernels keep a max or min window rolled: TVM's C codegen prints each max/min operand into a
temporary it reuses for the same text in the same scope, so in an unrolled window every `max(out[i], x)`
read `out[i]` from before the first store, and the pool returned its last element (docs/tvm-facts.md#c-min-max).
"""

from __future__ import annotations

import math

import tvm
from tvm import s_tir, tirx

from .conv import kernel_blocks


def pool_kernel(func: tirx.PrimFunc, parallel: bool, c_source: bool) -> tirx.PrimFunc | None:
    """The scheduled kernel when `func` is a pooling window over [n, c, h, w], else None. `c_source`: the
    kernel is built by TVM's C codegen (a max/min window stays rolled there, see above, and a large one too)."""
    window = _window_block(func)
    if window is None:
        return None
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    block = sch.get(sch.get_sblock(window))
    unroll = not c_source or (not isinstance(block.body.value, (tirx.Max, tirx.Min))
                              and _window_size(block) <= C_UNROLL_MAX)
    try:
        return _schedule(sch, window, parallel, vectorize=not c_source, unroll=unroll)
    except Exception:  # ScheduleError or a TVM internal error: the caller keeps the generic schedule
        return None


C_UNROLL_MAX = 9  # C source (microcontrollers): a 3x3 window unrolled, a global pool's rolled (flash)


def _window_size(block) -> int:
    return math.prod(int(iv.dom.extent) for iv in block.iter_vars[4:])


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


def _schedule(sch: s_tir.Schedule, window: str, parallel: bool, vectorize: bool, unroll: bool) -> tirx.PrimFunc:
    blk = sch.get_sblock(window)
    producers, consumers = sch.get_producers(blk), sch.get_consumers(blk)
    n, c, _h, _w, *window_loops = sch.get_loops(blk)
    plane = sch.fuse(n, c)
    for prod in producers:
        sch.compute_at(prod, plane)  # the padding of this plane only
    for cons in consumers:
        sch.reverse_compute_at(cons, plane)
        inner = sch.get_loops(cons)[-1]
        if vectorize and isinstance(sch.get(inner).extent, tirx.IntImm):  # C source cannot vectorize
            sch.vectorize(inner)
    if parallel:
        sch.parallel(plane)
    for r in window_loops if unroll else ():  # each output's window in registers
        sch.unroll(r)
    return sch.mod["main"]
