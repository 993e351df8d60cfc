"""A micro-kernel schedule for conv2d (NCHW) with a dynamic batch.

Tiles cover output channels x output rows x output columns of ONE image (the column tile vectorized, the
channel and row tiles unrolled into a block of accumulators). Tile sizes divide the static extents, and no
tile crosses the batch axis: images are whole work items, so the kernel has no bounds-check predicate for any
batch size and needs no edge variant. Images x channel blocks x row blocks run in parallel (so one image
still fills every core); the padded input is its own loop nest, parallel over images x channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx

from .dense import _fuse_epilogue


@dataclass(frozen=True)
class ConvTiles:
    oc: int  # output channels per tile (unrolled)
    oh: int  # output rows per tile (unrolled)
    ow: int  # output columns per tile (vectorized)


def conv_block(func: tirx.PrimFunc) -> str | None:
    """The one conv2d_nchw block (n, f, y, x spatial; c, ry, rx reduction) with a dynamic n, or None."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # no root block
        return None
    found = [b for b in blocks if b.name_hint.startswith("conv2d_nchw")]
    if len(found) != 1:
        return None
    ivs = found[0].iter_vars
    kinds = [iv.iter_type for iv in ivs]
    static = [isinstance(iv.dom.extent, tirx.IntImm) for iv in ivs]
    if kinds != [0, 0, 0, 0, 2, 2, 2] or static[0] or not all(static[1:]):
        return None
    return found[0].name_hint


def conv_extents(func: tirx.PrimFunc, block: str) -> list[int]:
    """[F, H, W, C, KH, KW]: output channels, output rows/columns, input channels, kernel size."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return [int(iv.dom.extent) for iv in sch.get(sch.get_sblock(block)).iter_vars[1:]]


def schedule_conv(func: tirx.PrimFunc, block: str, tiles: ConvTiles, parallel: bool,
                  vectorize: bool = True) -> tirx.PrimFunc:
    """`vectorize`/`parallel` off for C-source kernels (target "c"; gcc vectorizes the plain loops)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    n, f, y, x, rc, ry, rx = sch.get_loops(blk)
    fo, fi = sch.split(f, [None, tiles.oc])
    yo, yi = sch.split(y, [None, tiles.oh])
    xo, xi = sch.split(x, [None, tiles.ow])
    sch.reorder(n, fo, yo, xo, rc, ry, rx, fi, yi, xi)
    sch.unroll(fi)
    sch.unroll(yi)
    _fuse_epilogue(sch, blk, xo)
    if vectorize:
        sch.vectorize(xi)
    if parallel:
        sch.parallel(sch.fuse(n, fo, yo))
        for p in sch.get_producers(blk):
            loops = sch.get_loops(p)
            if len(loops) >= 2:
                sch.parallel(sch.fuse(loops[0], loops[1]))
    sch.decompose_reduction(blk, rc)
    return sch.mod["main"]
