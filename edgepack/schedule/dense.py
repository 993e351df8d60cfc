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
    par_cols: bool = False  # parallel over row x column tiles (the small-M / GEMV family: few row tiles)

    def with_rows(self, rows: int) -> DenseTiles:
        return replace(self, rows=rows)

    @staticmethod
    def default(func: tirx.PrimFunc, block: str, lanes: int) -> DenseTiles:
        """Untuned tiles: 4 rows x 2 vectors, 8 accumulators, which fit in the 16 vector registers of
        AVX2/SSE/armv7 NEON (4 x 4 vectors spill there) and leave room on AVX-512 and aarch64."""
        n = _static_extent(func, block, -2)
        cols = next((c for c in (2 * lanes, lanes, lanes // 2, lanes // 4) if c >= 1 and n % c == 0), 1)
        return DenseTiles(rows=4, cols=cols)


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
    if tiles.unroll_k > 1 and isinstance(k_extent, tirx.IntImm) and int(k_extent) % tiles.unroll_k == 0:
        ko, ki = sch.split(k, [None, tiles.unroll_k])
        sch.reorder(*outer, io, jo, ko, ki, ii, ji)
        sch.unroll(ki)
    else:
        sch.reorder(*outer, io, jo, k, ii, ji)
    if tiles.rows > 1:
        sch.unroll(ii)  # rows x cols accumulators stay in vector registers
    _fuse_epilogue(sch, blk, jo)
    if vectorize:  # off for C-source kernels: gcc vectorizes the plain inner loop where the ISA can
        sch.vectorize(ji)
    if parallel:
        par = [*outer, io, jo] if tiles.par_cols else [*outer, io]
        sch.parallel(sch.fuse(*par) if len(par) > 1 else par[0])
    sch.decompose_reduction(blk, ko)
    return sch.mod["main"]


def _fuse_epilogue(sch: s_tir.Schedule, blk, loop) -> None:
    frontier = list(sch.get_consumers(blk))
    while frontier:
        c = frontier.pop(0)
        try:
            sch.reverse_compute_at(c, loop)
        except Exception:  # ScheduleError or TVM internal errors: an epilogue that needs whole rows stays where it is: still correct
            continue
        frontier.extend(sch.get_consumers(c))


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
