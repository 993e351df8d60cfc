"""A predicate-free tiled schedule for dense/matmul kernels (the default micro-kernel; the tuner picks tiles)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import tvm
from tvm import s_tir, tirx


@dataclass(frozen=True)
class DenseTiles:
    rows: int  # tile on the dynamic row axis (M)
    cols: int  # tile on N; divides N, vectorized
    unroll_k: int = 1  # inner split of K, unrolled (1 = none); ignored unless it divides K
    # Column panels outermost, parallel over panels x row tiles: each weight panel is read once and reused
    # by every row tile (False: row tiles outermost, parallel over them; each row tile streams all of W).
    # With few row tiles (small M, GEMV) this is also what keeps every core busy.
    par_cols: bool = False
    # One thread, no parallel loop: at a tiny shape (a GEMV, a few rows) waking the pool costs more than the
    # second core saves. The dispatcher picks it per shape like any other micro-kernel (the thread count per
    # shape). On a one-core board every kernel is built without the parallel loop anyway.
    serial: bool = False

    def with_rows(self, rows: int) -> DenseTiles:
        return replace(self, rows=rows)

    @staticmethod
    def default(func: tirx.PrimFunc, block: str, lanes: int, registers: int = 16) -> DenseTiles:
        """Untuned tiles: rows x 2 vectors of accumulators in registers, with room left for the weight
        vectors and the broadcast: 4 rows (8 accumulators) in the 16 registers of AVX2/SSE/armv7 NEON,
        8 rows (16) in the 32 of AVX-512 and aarch64. Weight panels outermost (par_cols). Not 6 rows (MLAS's
        AVX2 block): measured on MiniLM-6, 1 thread, it ties 4 at seq >= 128 and loses up to 27% at seq 8..77,
        where the rows past the last whole tile run on the row-1 edge kernel (the tuner has 6 to pick per shape)."""
        return DenseTiles.for_width(_static_extent(func, block, -2), lanes, registers)

    @staticmethod
    def for_width(n: int, lanes: int, registers: int) -> DenseTiles:
        cols = next((c for c in (2 * lanes, lanes, lanes // 2, lanes // 4) if c >= 1 and n % c == 0), 1)
        return DenseTiles(rows=8 if registers >= 32 else 4, cols=cols, par_cols=True)


def _static_extent(func: tirx.PrimFunc, block: str, iter_index: int) -> int:
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    it = sch.get(sch.get_sblock(block)).iter_vars[iter_index]
    return int(it.dom.extent) if isinstance(it.dom.extent, tirx.IntImm) else 1


def schedule_dense(func: tirx.PrimFunc, block: str, tiles: DenseTiles, parallel: bool,
                   vectorize: bool = True) -> tirx.PrimFunc:
    """Tile rows x cols around the reduction, fuse the epilogue into the tile, vectorize the column tile.

    Row and column factors divide their extents (rows are specialized to mt * tile, cols divide N), so the
    inner loops carry no bounds-check predicate.
    """
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    iters = sch.get(blk).iter_vars
    loops = sch.get_loops(blk)
    if len(loops) != len(iters) or iters[-1].iter_type != 2 or any(iv.iter_type != 0 for iv in iters[:-1]):
        return func
    dyn = [i for i, iv in enumerate(iters[:-1]) if not isinstance(iv.dom.extent, tirx.IntImm)]
    col = len(iters) - 2
    row = dyn[0] if dyn else col - 1
    if row == col or row < 0:
        return func
    outer = [lp for i, lp in enumerate(loops[:-1]) if i not in (row, col)]
    io, ii = sch.split(loops[row], [None, tiles.rows])
    jo, ji = sch.split(loops[col], [None, tiles.cols])
    k = ko = loops[-1]
    k_extent = iters[-1].dom.extent
    tile_loops = [jo, io] if tiles.par_cols else [io, jo]
    if tiles.unroll_k > 1 and isinstance(k_extent, tirx.IntImm) and int(k_extent) % tiles.unroll_k == 0:
        ko, ki = sch.split(k, [None, tiles.unroll_k])
        sch.reorder(*outer, *tile_loops, ko, ki, ii, ji)
        sch.unroll(ki)
    else:
        sch.reorder(*outer, *tile_loops, k, ii, ji)
    if tiles.rows > 1:
        sch.unroll(ii)  # rows x cols accumulators stay in vector registers
    _fuse_epilogue(sch, blk, tile_loops[-1], vectorize)
    if vectorize:  # off for C-source kernels: gcc vectorizes the plain inner loop where the ISA can
        sch.vectorize(ji)
    if parallel and not tiles.serial:
        par = [*outer, *tile_loops] if tiles.par_cols else [*outer, io]
        sch.parallel(sch.fuse(*par) if len(par) > 1 else par[0])
    sch.decompose_reduction(blk, ko)
    return sch.mod["main"]


def _fuse_epilogue(sch: s_tir.Schedule, blk, loop, vectorize: bool = False) -> None:
    """Compute the consumers (bias, activation, residual) on each tile while it is in registers; with
    `vectorize`, over the tile's columns in vectors (a GELU's polynomial costs as much as the tile's FMAs)."""
    if str(sch.get(blk).body.buffer.dtype) == "int32":  # an integer kernel
        _inline_integer_epilogue(sch, blk)
    frontier = list(sch.get_consumers(blk))
    while frontier:
        c = frontier.pop(0)
        try:
            sch.reverse_compute_at(c, loop)
        except Exception:  # ScheduleError or TVM internal errors: an epilogue that needs whole rows stays where it is: still correct
            continue
        inner = sch.get_loops(c)[-1]
        if vectorize and isinstance(sch.get(inner).extent, tirx.IntImm):
            sch.vectorize(inner)
        frontier.extend(sch.get_consumers(c))


def _inline_integer_epilogue(sch: s_tir.Schedule, blk) -> None:
    """An int32 accumulator's requantisation (bias, int64 multiply, rounding shift, clamp: a DAG of a dozen
    element-wise blocks on int32/int64) inlined into the cast to int8 that ends it: left as blocks, the ones
    that feed two others stay whole tensors. What follows the cast (a float fallback's chain) is left to
    `_fuse_epilogue`: inlined too, its reuses (x * sigmoid(x)) would copy the expression at every read."""
    for c in _consumers_deep(sch, blk, lambda b: str(sch.get(b).body.buffer.dtype) in ("int32", "int64")):
        try:
            sch.compute_inline(c)
        except Exception:  # ScheduleError: not element-wise (a broadcast read, a reduction): kept
            pass


def _consumers_deep(sch: s_tir.Schedule, blk, through=lambda b: True) -> list:
    """Every block downstream of `blk` (only through blocks `through` accepts), each once, nearest first."""
    out, seen, frontier = [], set(), list(sch.get_consumers(blk))
    while frontier:
        c = frontier.pop(0)
        if sch.get(c).name_hint in seen or not through(c):  # epilogues are DAGs (x - floor(x)): each block once
            continue
        seen.add(sch.get(c).name_hint)
        out.append(c)
        frontier.extend(sch.get_consumers(c))
    return out


def schedule_matmul_rowwise(func: tirx.PrimFunc, block: str, vectorize: bool = True,
                            parallel: bool = True) -> tirx.PrimFunc:
    """For matmuls whose rows cannot be split (batch matmuls with dynamic N or K, as in attention):
    loop order (batch.., i, k, j) with j innermost over contiguous memory, rows in parallel, the epilogue
    fused per row. No tile crosses a dynamic extent, so no predicate; LLVM vectorizes the j loop."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    iters = sch.get(blk).iter_vars
    loops = sch.get_loops(blk)
    if len(loops) != len(iters) or len(loops) < 3 or iters[-1].iter_type != 2 or \
            any(iv.iter_type != 0 for iv in iters[:-1]):
        return func
    *outer, j = loops[:-1]
    k = loops[-1]
    sch.reorder(*outer, k, j)
    _fuse_epilogue(sch, blk, outer[-1])
    rows = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if parallel:
        sch.parallel(rows)
    if vectorize and isinstance(iters[-2].dom.extent, tirx.IntImm):
        sch.vectorize(j)
    sch.decompose_reduction(blk, k)
    return sch.mod["main"]
