"""The micro-kernel search spaces (docs/tuning.md#search-space) and the analytic adaptation of a micro-kernel to a
shape (docs/tuning.md#cost-model), for three operator classes:
  DenseTask      dense/matmul with a dynamic row count (transformer layers): DenseTiles
  ConvTask       conv2d NCHW with a dynamic batch (CNNs): ConvTiles over one image
  AttentionTask  batch matmuls with rows and columns (or reduction) both = seq (Q.K^T, A.V): AttentionTiles

Tile sizes come from the board, never from a shape: column tiles are multiples of the vector width that
divide N, row tiles are powers of two (and 6, the AVX2 block of MLAS and XNNPACK) capped near the largest
row count, and a rows x cols accumulator block must fit the board's vector registers. The board's untuned
default is always in the space, so tuning can only match or beat it. Every choice is categorical, so a configuration replays on
any shape and on the symbolic kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..schedule.attention import AttentionTiles
from ..schedule.conv import ConvExtents, ConvTiles, column_tiles, divisors, with_dot
from ..schedule.dense import DenseTiles
from ..schedule.int8_dot import DOTS, NARROWER
from ..schedule.pack import panel_for

ROW_TILES = (1, 2, 4, 6, 8, 16)
UNROLL_K = (1, 2, 4)
SMALL_M = 4  # row tiles up to this also come in the GEMV-like family that parallelises over columns


@dataclass(frozen=True)
class DenseTask:
    """One dense/matmul kernel class: Y[rows, n] = X[rows, k] W[k, n], rows dynamic in [lo, hi]."""

    name: str
    n: int
    k: int
    lo: int
    hi: int

    def flop(self, rows: int) -> float:
        return 2.0 * rows * self.n * self.k


@dataclass(frozen=True)
class Hardware:
    """What the space is derived from (the board file's target section)."""

    lanes: int  # fp32 lanes per vector register
    registers: int  # vector registers (16: AVX2, SSE; 32: AVX-512, NEON on aarch64)
    cores: int
    packed: bool = False  # dense weights in column panels (schedule/pack.py): column tiles stay within a panel
    int8_dot: str = ""  # the int8 dot-product instruction (schedule/int8_dot.py), "": none


@dataclass(frozen=True)
class ConvTask:
    """conv2d NCHW, f output channels of h x w from c input channels (per group) with a kh x kw kernel; batch
    (the dynamic `rows`) in [lo, hi]. `flat`: pointwise, tiled over the h * w pixels as one axis."""

    name: str
    f: int
    h: int
    w: int
    c: int
    kh: int
    kw: int
    lo: int
    hi: int
    flat: bool = False
    integer: bool = False  # int8 x int8 -> int32 products (ConvExtents.integer)
    own: bool = False  # depthwise or grouped (ConvExtents.own)
    stride: int = 1

    def flop(self, rows: int) -> float:
        return 2.0 * rows * self.f * self.h * self.w * self.c * self.kh * self.kw

    @property
    def extents(self) -> ConvExtents:
        return ConvExtents(self.f, self.h, self.w, self.c, self.kh, self.kw, self.flat, self.own, self.integer,
                           self.stride)


@dataclass(frozen=True)
class AttentionTask:
    """A batch matmul over `heads` (batch x heads, batch at 1) with seq rows: n columns and k reduction,
    each 0 when it is seq too (Q.K^T: n = 0; A.V: k = 0); seq (the dynamic `rows`) in [lo, hi]."""

    name: str
    heads: int
    n: int
    k: int
    lo: int
    hi: int

    def flop(self, rows: int) -> float:
        return 2.0 * self.heads * rows * (self.n or rows) * (self.k or rows)


def candidates(task: DenseTask | ConvTask | AttentionTask, hw: Hardware) -> list:
    """Every configuration of the space, in a stable order."""
    if isinstance(task, ConvTask):
        return _conv_candidates(task, hw)
    if isinstance(task, AttentionTask):
        return _attention_candidates(task, hw)
    # power-of-two multiples of the vector width only: LLVM splits a 3- or 6-vector column tile poorly
    # (measured 6-7x slower than 2 or 4 vectors on AVX2)
    cols = sorted({c for m in (1, 2, 4, 8) for c in [m * hw.lanes] if c <= task.n and task.n % c == 0}
                  | ({task.n} if task.n < hw.lanes else set())) or [_odd_width(task.n, hw.lanes)]
    panel = panel_for(task.n, hw.lanes) if hw.packed else None
    if panel:  # a tile wider than a panel reads across panels: measured 3x slower than one within it
        cols = [c for c in cols if panel % c == 0]
    row_cap = max(1.0, 1.1 * task.hi)
    out = []
    for c in cols:
        vec_regs = -(-c // hw.lanes)
        for r in ROW_TILES:
            if r > row_cap or r * vec_regs > hw.registers - 2:  # keep two for the X broadcast and W loads
                continue
            for u in UNROLL_K:
                if task.k % u == 0:
                    out.append(DenseTiles(rows=r, cols=c, unroll_k=u))
                    if hw.cores > 1 and r <= SMALL_M:  # the small-M family: cores split the columns too,
                        out.append(DenseTiles(rows=r, cols=c, unroll_k=u, par_cols=True))
                        out += [DenseTiles(rows=r, cols=c, unroll_k=u, par_cols=p, serial=True)  # or one thread
                                for p in (False, True)]
    default = DenseTiles.for_width(task.n, hw.lanes, hw.registers)
    if default.rows <= row_cap and default not in out:
        out.append(default)
    return out


def _conv_candidates(task: ConvTask, hw: Hardware) -> list[ConvTiles]:
    out = []
    cols = task.h * task.w if task.flat else task.w
    # scalar cores (C kernels): any column tile whose accumulators fit the registers, not whole vectors
    widths = divisors(cols, hw.registers - 4) if hw.lanes == 1 else column_tiles(cols, hw.lanes)
    for ow in widths:
        vec = -(-ow // hw.lanes)
        for oc in (1, 2, 4, 8, 16):
            for oh in (1,) if task.flat else (1, 2, 4):
                if task.f % oc == 0 and task.h % oh == 0 and oc * oh * vec <= hw.registers - 2:
                    out.append(ConvTiles(oc=oc, oh=oh, ow=ow))
                    if (dsp := with_dot(task.extents, out[-1], hw.int8_dot)).dot:  # the same tile on SMLAD
                        out.append(dsp)
    if task.flat and hw.packed:  # the channel-vector form (weights packed): channel vectors x unrolled pixels
        widths = [hw.lanes, 2 * hw.lanes, 4 * hw.lanes]
        if task.extents.integer and hw.int8_dot in NARROWER:  # a 512-bit board's 256-bit dot (the kws net's 24)
            widths.insert(0, DOTS[NARROWER[hw.int8_dot]].lanes)
        for oc in widths:
            for px in range(1, 9):
                if task.f % oc or (task.h * task.w) % px or px * -(-oc // hw.lanes) > hw.registers - 2:
                    continue
                cv = ConvTiles(oc=oc, oh=1, ow=px, cvec=True)
                out.append(cv)
                if (dot := with_dot(task.extents, cv, hw.int8_dot)).dot:
                    out.append(dot)
    if hw.packed and not (task.flat or task.own):  # standard convs as channel vectors (stems too)
        out += ConvTiles.standard_options(task.extents, hw.lanes, hw.registers)
    if task.extents.depthwise and hw.packed:  # depthwise channel vectors
        for oc in (hw.lanes, 2 * hw.lanes):
            out += [ConvTiles(oc=oc, oh=1, ow=px, cvec=True) for px in divisors(task.w, task.w)
                    if task.f % oc == 0 and px * (oc // hw.lanes) <= hw.registers - 2]
    default = ConvTiles.default(task.extents, hw.lanes, hw.registers, hw.packed, hw.int8_dot)
    if default not in out:
        out.append(default)
    return out


def _attention_candidates(task: AttentionTask, hw: Hardware) -> list[AttentionTiles]:
    """Row tiles x column tiles of whole vectors (dividing the columns when they are static) whose
    accumulators fit the registers, each on all cores and on one."""
    out = []
    for v in (1, 2, 4):
        cols = v * hw.lanes
        if task.n and task.n % cols:
            continue
        for r in (1, 2, 4, 6, 8):
            if r * v <= hw.registers - 2 and r <= max(1, task.hi):
                out += [AttentionTiles(r, cols)] + ([AttentionTiles(r, cols, serial=True)] if hw.cores > 1 else [])
    default = AttentionTiles.default(task.n or None, hw.lanes, hw.registers)
    if default not in out and (not task.n or task.n % default.cols == 0):
        out.append(default)
    return out


def _odd_width(n: int, lanes: int) -> int:
    """N with no multiple of the vector width as a divisor (N = 10, 1000): the largest divisor up to four
    vectors; LLVM vectorises it with a short tail, still with no predicate in the TIR."""
    return max(d for d in range(1, min(n, 4 * lanes) + 1) if n % d == 0)


def parallel_tiles(task, tiles, rows: int) -> int:
    """g: the parallel loop's extent on `rows` rows (row tiles, times column tiles for the small-M family;
    images x channel blocks x row blocks for a convolution)."""
    if isinstance(task, ConvTask):
        if tiles.cvec:  # images x pixel tiles x channel tiles
            return rows * (task.h * task.w // tiles.ow) * (task.f // tiles.oc)
        return rows * (task.f // tiles.oc) * (task.h // tiles.oh)
    if isinstance(task, AttentionTask):  # heads (batch x heads: batch 1 here)
        return task.heads
    g = math.ceil(rows / tiles.rows)
    return g * (task.n // tiles.cols) if tiles.par_cols else g


def adaptation(task: DenseTask, tiles: DenseTiles, rows: int, cores: int) -> float:
    """a(S, k) = pad x occ: the fraction of peak a micro-kernel with perfect fit keeps on `rows` rows.

    pad: useful rows over rows covered by whole tiles (the edge variant computes the remainder at the
    row-tile-1 rate, so padding is what the tiles would waste); occ: how evenly the parallel row tiles
    spread over the cores (1 on a single-core board).
    """
    pad = 1.0 if isinstance(task, ConvTask) else rows / (math.ceil(rows / tiles.rows) * tiles.rows)
    if isinstance(task, AttentionTask) and not task.n:  # dynamic columns are padded to whole tiles too
        pad *= rows / (math.ceil(rows / tiles.cols) * tiles.cols)
    g = parallel_tiles(task, tiles, rows)
    occ = 1.0 if cores <= 1 or getattr(tiles, "serial", False) else g / (math.ceil(g / cores) * cores)
    return pad * occ


def best_fit_rows(task, tiles, cores: int) -> int:
    """The instance a trial measures a micro-kernel on: highest adaptation, ties to the larger."""
    step = tiles.rows if isinstance(task, DenseTask) else 1
    options = [r for r in range(task.lo, task.hi + 1) if r % step == 0] or [task.hi]
    return max(options, key=lambda r: (adaptation(task, tiles, r, cores), r))


FEATURE_NAMES = ("log2_rows", "log2_cols", "log2_unroll_k", "accumulators", "cols_over_lanes", "log2_n",
                 "log2_k", "n_col_tiles", "bytes_w_per_tile_kb", "arith_intensity", "par_cols", "serial")


def features(task, tiles, hw: Hardware) -> np.ndarray:
    """Shape-free features of a micro-kernel for the cost model f(k) (one model per operator class)."""
    if isinstance(task, ConvTask):
        acc = tiles.ow * (tiles.oc // hw.lanes) if tiles.cvec else tiles.oc * tiles.oh * -(-tiles.ow // hw.lanes)
        return np.array([math.log2(tiles.oc), math.log2(tiles.oh), math.log2(tiles.ow), acc, tiles.ow / hw.lanes,
                         math.log2(task.f), math.log2(task.c * task.kh * task.kw), task.h * task.w / tiles.ow / tiles.oh,
                         task.f // tiles.oc, task.kh * task.kw, float(tiles.cvec), float(bool(tiles.dot))],
                        dtype=np.float64)
    acc = tiles.rows * -(-tiles.cols // hw.lanes)
    if isinstance(task, AttentionTask):
        intensity = 2.0 * tiles.rows * tiles.cols / (4.0 * (tiles.rows + tiles.cols))
        return np.array([math.log2(tiles.rows), math.log2(tiles.cols), 0.0, acc, tiles.cols / hw.lanes,
                         math.log2(task.n or 1), math.log2(task.k or 1), float(not task.n), float(not task.k),
                         intensity, math.log2(task.heads), float(tiles.serial)], dtype=np.float64)
    w_bytes = task.k * tiles.cols * 4
    intensity = 2.0 * tiles.rows * tiles.cols / (4.0 * (tiles.rows + tiles.cols))
    return np.array([math.log2(tiles.rows), math.log2(tiles.cols), math.log2(tiles.unroll_k), acc,
                     tiles.cols / hw.lanes, math.log2(task.n), math.log2(task.k), task.n // tiles.cols,
                     w_bytes / 1024.0, intensity, float(tiles.par_cols), float(tiles.serial)], dtype=np.float64)
