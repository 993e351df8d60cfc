"""Micro-kernels for batch matmuls whose rows and columns are both dynamic: attention's Q.K^T and A.V.

In `scores[b, h, i, j] = sum_k Q[b, h, i, k] Kt[b, h, k, j]` the rows i and the columns j are both `seq`
(and in `A.V` the reduction is), so the dense kernels' way of peeling the remainder rows into an edge
variant through row views does not apply: the rows are the middle axis of each head, and the columns are
dynamic too. Here the kernel pads instead, inside itself (`pad_einsum`):
  - the iteration space is rounded up to whole rows x cols tiles on every dynamic axis (rows always; the
    columns when they are dynamic, else `cols` divides them), so the register tile has no bounds-check
    predicate: rows unrolled, columns vectorized, the reduction outside both;
  - the operand read along the rows (Q, A) is copied zero-padded one row tile at a time inside the tile
    loop; the operand read along the columns (Kt, V) once per head;
  - the epilogue (the 1/sqrt(d) scale, the mask add, or the copy out of the padded tile when there is
    none) runs on each row tile right after it (`merge` of the two row-tile loops), over the exact columns:
    its one predicate is on the row, outside the column loop, which LLVM vectorizes.
Heads x batch run in parallel. One compiled kernel serves every seq; the tuner picks rows x cols
(tune/space.py `AttentionTask`).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx

from ..model.tir import region_tensor
from .dense import DenseTiles


# Attention's kernels hold a few blocks (the matmul, a scale, a mask chain); a kernel of dozens is a
# quantised layer's requantize chain, whose inlining into one expression grows without bound (each
# `where` repeats its operands), so it keeps the row-wise schedule.
MAX_BLOCKS = 16


@dataclass(frozen=True)
class AttentionTiles:
    rows: int  # tile on the (dynamic) rows, unrolled
    cols: int  # tile on the columns, vectorized: padded to when dynamic, divides them when static
    serial: bool = False  # one thread (no parallel loop over heads)

    @staticmethod
    def default(n: int | None, lanes: int, registers: int) -> AttentionTiles:
        """Untuned: the dense kernels' register block (4 rows x 2 vectors in 16 registers, 8 x 2 in 32);
        `n` the static column count, None when the columns are dynamic."""
        dense = DenseTiles.for_width(n if n is not None else 2 * lanes, lanes, registers)
        return AttentionTiles(dense.rows, dense.cols)


def attention_form(func: tirx.PrimFunc, block: str) -> int | None:
    """The static column count of a batch matmul with dynamic rows (None: dynamic columns), or -1 when the
    kernel is not one (no batch axis, static rows, a reduction over more than one axis, a 2-D weight
    operand, more than MAX_BLOCKS blocks)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    if len(sch.get_child_blocks(sch.get_sblock("root"))) > MAX_BLOCKS:
        return -1
    matmul = sch.get(sch.get_sblock(block))
    iters = matmul.iter_vars
    if len(iters) < 4 or [iv.iter_type for iv in iters].count(2) != 1 or iters[-1].iter_type != 2:
        return -1
    if any(len(r.region) != len(iters) - 1 for r in matmul.reads):  # a weight (no head axes): a dense layer
        return -1
    if isinstance(iters[-3].dom.extent, tirx.IntImm):
        return -1
    n = iters[-2].dom.extent
    return int(n) if isinstance(n, tirx.IntImm) else None


def schedule_attention(func: tirx.PrimFunc, block: str, tiles: AttentionTiles, parallel: bool) -> tirx.PrimFunc | None:
    """The padded-tile kernel above, or None when this kernel's blocks do not take it (the caller keeps
    the row-wise schedule)."""
    n = attention_form(func, block)
    if n == -1 or (n is not None and n % tiles.cols):
        return None
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        _tile(sch, sch.get_sblock(block), tiles, n is None, parallel and not tiles.serial)
    except Exception:  # ScheduleError, a TVM internal error, or a chain `_epilogue` does not take: row-wise
        return None
    return sch.mod["main"]


def _tile(sch: s_tir.Schedule, blk, tiles: AttentionTiles, pad_cols: bool, parallel: bool) -> None:
    depth = len(sch.get_loops(blk))
    pad = [1] * (depth - 3) + [tiles.rows, tiles.cols if pad_cols else 1, 1]
    _inline_elementwise(sch, blk)
    if pad != [1] * depth:  # a kernel with one row per tile and static columns needs no padding
        sch.pad_einsum(blk, pad)
    operands = sch.get_producers(blk)  # the zero-padded copies
    epilogue = _epilogue(sch, blk)
    *heads, i, j, k = sch.get_loops(blk)
    io, ii = sch.split(i, [None, tiles.rows])
    jo, ji = sch.split(j, [None, tiles.cols])
    sch.reorder(*heads, io, jo, k, ii, ji)
    sch.unroll(ii)
    sch.vectorize(ji)
    acc = sch.cache_write(blk, 0, "local")  # the rows x cols accumulators: a stack tile LLVM keeps in registers
    sch.reverse_compute_at(acc, jo)
    sch.vectorize(sch.get_loops(acc)[-1])
    head, row_tile = _fuse(sch, heads), io
    if epilogue is not None:
        e_loops = sch.get_loops(epilogue)
        eo, _ = sch.split(e_loops[len(heads)], [None, tiles.rows])
        head = sch.merge(head, _fuse(sch, e_loops[:len(heads)]))
        row_tile = sch.merge(io, eo)  # both have (rows + tile - 1) / tile iterations
    row_operand = region_tensor(sch.get(blk).reads[0])
    for p in operands:
        sch.compute_at(p, row_tile if region_tensor(sch.get(p).writes[0]) == row_operand else head)
    if parallel:
        sch.parallel(head)
    sch.decompose_reduction(blk, k)


def _inline_elementwise(sch: s_tir.Schedule, blk) -> None:
    """Every element-wise block but the last inlined where it is read (the epilogue's chain, and the mask
    a fused kernel computes beside the matmul: expand, cast, subtract, scale), so one block remains after
    the matmul."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for b in blocks[:-1]:
        if not sch.get(b).same_as(sch.get(blk)):
            try:
                sch.compute_inline(b)
            except Exception:  # ScheduleError: not element-wise; `_epilogue` then refuses the kernel
                pass


def _fuse(sch: s_tir.Schedule, loops: list):
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


def _epilogue(sch: s_tir.Schedule, blk):
    """The one block after the padded matmul: the copy out of the padding with every element-wise block of
    the epilogue inlined into it. None: the matmul writes the kernel's output itself."""
    unpad = sch.get_consumers(blk)
    if not unpad:
        return None
    assert len(unpad) == 1
    chain = [unpad[0]]
    while len(nxt := sch.get_consumers(chain[-1])) == 1:
        chain.append(nxt[0])
    assert not sch.get_consumers(chain[-1])  # the chain ends the kernel
    for b in chain[:-1]:
        sch.compute_inline(b)
    out = sch.get_consumers(blk)
    assert len(out) == 1 and len(sch.get_loops(out[0])) == len(sch.get_loops(blk)) - 1
    return out[0]
