"""Softmax over a dynamic last axis (attention's scores, [batch, heads, seq, seq]) with vectorized reductions.

The legalized kernel keeps its max and sum as scalar chains: a float reduction may not be reassociated, so
LLVM leaves them one element per add or max, about 3 cycles of latency each, and the kernel ran at ~2.4 ns
per element on the host (13% of MiniLM-L6 at seq 256). This kernel is rebuilt from the same parts with the
reassociation written out: each reduction is `PARTIALS` vectors of partial results over the row's whole
vectors, then the partials, then the row's last `seq % (PARTIALS * lanes)` elements. The whole-vector loop
has a static inner extent (vectorized, no predicate); the tail is a short scalar loop. The exponentials and
the scaling run over the exact row, which LLVM vectorizes as before. Rows run in parallel, each with its
intermediates in a row of workspace.

Only the plain pattern is taken (the blocks Relax's softmax legalizes to, with `fast_exp` or `exp`); any
other kernel keeps its generic schedule. The result differs from the legalized kernel by rounding only
(sums in another order, a multiply by the reciprocal of the sum instead of a division).
"""

from __future__ import annotations

import tvm
from tvm import s_tir, te, tirx, topi

from .conv import kernel_blocks

PARTIALS = 2  # vectors of partial results per reduction: two hide most of vmaxps/vaddps' latency
_BLOCKS = {"T_softmax_maxelem", "T_softmax_delta", "T_softmax_expsum", "T_softmax_norm"}


def softmax_kernel(func: tirx.PrimFunc, lanes: int, parallel: bool) -> tirx.PrimFunc | None:
    """The rebuilt, scheduled kernel for `func` when it is a plain softmax over a dynamic last axis, else None."""
    exp = _softmax_exp(func)
    if exp is None:
        return None
    x_param = func.params[0]
    x = te.placeholder(list(x_param.shape), str(x_param.dtype), "x")
    y = _compute(x, lanes * PARTIALS, exp)
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    try:
        return _schedule(s_tir.Schedule(mod), lanes * PARTIALS, parallel).with_attr("tirx.noalias", True)
    except Exception:  # ScheduleError or a TVM internal error: the caller keeps the generic schedule
        return None


def _softmax_exp(func: tirx.PrimFunc):
    """topi.fast_exp or te.exp when `func` is softmax's legalized blocks over a dynamic last axis, else None."""
    if len(func.params) != 2 or any(getattr(p, "shape", None) is None for p in func.params):
        return None
    x, y = func.params
    if len(x.shape) < 2 or str(x.dtype) != "float32" or isinstance(x.shape[-1], tirx.IntImm) or \
            [str(s) for s in x.shape] != [str(s) for s in y.shape]:
        return None
    names = {b.name_hint for b in kernel_blocks(func)}
    if names == _BLOCKS | {"T_fast_exp"}:
        return topi.fast_exp
    if names == _BLOCKS | {"T_softmax_exp"}:
        return topi.exp
    return None


def _compute(x: te.Tensor, width: int, exp) -> te.Tensor:
    *lead, n = x.shape
    whole = tirx.floordiv(n, width) * width  # the row's elements in whole partial-vectors

    def reduce(src, combine, name):
        ko = te.reduce_axis((0, whole // width), f"{name}_ko")
        part = te.compute([*lead, width], lambda *i: combine(src[(*i[:-1], ko * width + i[-1])], axis=ko),
                          f"{name}_part")
        t = te.reduce_axis((whole, n), f"{name}_t")
        tail = te.compute(lead, lambda *i: combine(src[(*i, t)], axis=t), f"{name}_tail")
        p = te.reduce_axis((0, width), f"{name}_p")
        parts = te.compute(lead, lambda *i: combine(part[(*i, p)], axis=p), f"{name}_parts")
        both = tirx.max if combine is te.max else (lambda a, b: a + b)
        return te.compute(lead, lambda *i: both(parts[i], tail[i]), name)

    row_max = reduce(x, te.max, "row_max")
    e = exp(te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]], "delta"))
    row_sum = reduce(e, te.sum, "row_sum")
    inv = te.compute(lead, lambda *i: tirx.const(1.0, "float32") / row_sum[i], "inv")
    return te.compute(x.shape, lambda *i: e[i] * inv[i[:-1]], "y")


def _schedule(sch: s_tir.Schedule, width: int, parallel: bool) -> tirx.PrimFunc:
    out = sch.get_sblock("y")
    sch.compute_inline(sch.get_sblock("delta"))
    rows = sch.get_loops(out)[:-1]
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    for b in reversed(sch.get_child_blocks(sch.get_sblock("root"))[:-1]):
        sch.compute_at(b, row, preserve_unit_loops=True)
    if parallel:  # before the reductions are split into init and update: it checks their dataflow
        sch.parallel(row)
    for name in ("row_max_part", "row_sum_part"):
        blk = sch.get_sblock(name)
        *_, lane, ko = sch.get_loops(blk)
        sch.reorder(ko, lane)
        sch.set_scope(blk, 0, "local")  # the partials stay in registers
        sch.vectorize(lane)
        sch.decompose_reduction(blk, ko)
        tail = sch.get_sblock(name.replace("_part", "_tail"))
        sch.decompose_reduction(tail, sch.get_loops(tail)[-1])  # its loop may run 0 times: init before it
    return sch.mod["main"]
