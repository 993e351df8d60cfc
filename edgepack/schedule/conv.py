"""Micro-kernel schedules for conv2d (NCHW) with a dynamic batch: standard, grouped, depthwise, pointwise.

Tiles cover output channels x output rows x output columns of ONE image (the column tile vectorized, the
channel and row tiles unrolled into a block of accumulators). Tile sizes divide the static extents, and no
tile crosses the batch axis: images are whole work items, so the kernel has no bounds-check predicate for any
batch size and needs no edge variant. Images x spatial tiles x channel blocks run in parallel, channel blocks
innermost, so consecutive work items of a thread reuse the same input tile from cache.

Pointwise (1x1, stride 1, unpadded) kernels are GEMMs over the image's pixels: Y[f, p] = sum_c W[f, c] X[c, p]
with p = y * W + x. Their rows and columns are fused into p before tiling, so a 7x7 or 14x14 feature map
still gets full vectors (a column tile of 7 wastes most of a 16-lane register).

Pointwise kernels have a second form (`ConvTiles.cvec`), the dense micro-kernel's: pixels x output channels
with the CHANNELS vectorized and a few pixels unrolled, each input value broadcast, the weights packed at
build time in panels of output channels ([F / oc, C, 1, 1, oc], schedule/pack.py) so each channel vector is
one contiguous load. It needs no pixel count divisible by the vector width (125, 49, 196 pixels), and an
int8 kernel reads whole vectors of weights instead of 5-byte slivers of activations.

Padded convolutions first copy the input into a zero-bordered buffer. Depthwise and grouped kernels copy
only the channels a work item reads, inside the work item (the copy stays in cache and in a per-thread
workspace, not a whole padded tensor); the copy's interior is split from its zero border
(`decompose_padding`) so it runs as plain vector copies without a per-element bounds check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import tvm
import tvm.sym
from tvm import s_tir, tirx

from ..model.tir import region_tensor
from .dense import _consumers_deep, _fuse_epilogue
from .int8_dot import DOTS, DSP_LANES, NARROWER, QUAD, dsp_intrinsic

CONV_BLOCKS = ("conv2d_nchw", "group_conv2d_nchw", "depthwise_conv2d_nchw")
STANDARD_VECTOR_CHANNELS = 8  # input channels from which a standard conv takes the channel-vector form
MAX_ROWS = 2  # output rows per depthwise tile: more rows (7, 14) measured slower on the host


@dataclass(frozen=True)
class ConvTiles:
    oc: int  # output channels per tile (unrolled)
    oh: int  # output rows per tile (unrolled); 1 for pointwise kernels
    ow: int  # output columns per tile (vectorized); pixels of the fused rows x columns for pointwise kernels
    # pointwise only: output channels vectorized (oc a multiple of the lanes), ow pixels unrolled, weights
    # packed in panels of oc channels
    cvec: bool = False
    # int8 pointwise kernels only: the dot-product instruction (schedule/int8_dot.py; "": the compiler's
    # multiply-add), input channels taken in its groups. int8_dot.DOTS: channel vectors; "dsp": the scalar form
    dot: str = ""

    @staticmethod
    def default(ext: ConvExtents, lanes: int, registers: int, packed: bool = True, int8_dot: str = "") -> ConvTiles:
        """Untuned tiles from the board's vector width and register count: the column tile that fills its
        vectors best, then an accumulator block of output channels (x output rows for depthwise and grouped
        kernels, whose channels share no input) that fits the registers, keeping four for the loads and
        broadcasts. `packed`: the board packs weights and vectorizes (the channel-vector form needs both);
        `int8_dot`: the board's int8 dot-product instruction, if any (Schedules.int8_dot). Depthwise kernels
        take the channel-vector form where `depthwise_vectors` says, and on scalar cores `scalar_depthwise`."""
        if lanes == 1 and ext.own and not ext.flat:
            return ConvTiles.scalar_depthwise(ext, registers)
        ow = max(column_tiles(ext.cols, lanes), key=lambda c: (c / (vectors(c, lanes) * lanes), min(c, 4 * lanes)))
        budget = max(1, (registers - 4) // vectors(ow, lanes))
        oh = max(d for d in range(1, min(budget, MAX_ROWS) + 1) if ext.h % d == 0) if ext.own and not ext.flat else 1
        oc = max(d for d in (1, 2, 4, 8, 16) if ext.f % d == 0 and d * oh <= budget)
        if packed and depthwise_vectors(ext, lanes):
            return ConvTiles(oc=lanes, oh=1, ow=divisors(ext.w, registers - 4)[-1], cvec=True)
        if packed and (st := ConvTiles.stem_vectors(ext, lanes)):
            return st
        # other float stems (3 input channels) keep the column form: its whole input-row vectors measured 3-12%
        # faster on MobileNetV2's and ResNet-18's on AVX2 (the channel form's short reduction pays its epilogue).
        # int8 stems do not: DS-CNN's 10x4 one (5-column rows) 190 -> 71 us at batch 4 as 16 channels x 5
        standard = packed and not (ext.flat or ext.own) and (ext.integer or ext.c >= STANDARD_VECTOR_CHANNELS)
        if standard and (sv := ConvTiles.standard_vectors(ext, lanes, registers)):
            return sv
        cv = ConvTiles.channel_vectors(ext, lanes, registers) if packed and ext.flat else None
        if cv is None and packed and ext.flat and ext.integer and int8_dot in NARROWER:
            # channels no multiple of the 512-bit dot's 16 (the kws net's 24): the 256-bit one's vectors
            cv = ConvTiles.channel_vectors(ext, DOTS[NARROWER[int8_dot]].lanes, registers)
        if cv is not None and (ext.integer or ext.cols % lanes):
            return with_dot(ext, cv, int8_dot)
        return with_dot(ext, ConvTiles(oc=oc, oh=oh, ow=ow), int8_dot)

    @staticmethod
    def scalar_depthwise(ext: ConvExtents, registers: int) -> ConvTiles:
        """Depthwise and grouped kernels on a core without SIMD (C kernels): one channel's block of output
        rows x columns (taps unrolled: schedule_conv), so its weights and requantisation constants stay in
        registers over the block, instead of a block of channels at one pixel that reloads them at every
        output. An int8 DS-CNN on mps2-an386: 7% fewer instructions. (Pointwise kernels keep a block of
        channels at one pixel: wider pixel tiles measured slower there, accumulators spilled.)"""
        budget = registers - 4
        ow = divisors(ext.w, budget)[-1]
        oh = max(d for d in divisors(ext.h, MAX_ROWS) if d * ow <= budget)
        return ConvTiles(oc=1, oh=oh, ow=ow)

    @staticmethod
    def standard_vectors(ext: ConvExtents, lanes: int, registers: int) -> ConvTiles | None:
        """The channel-vector form of a standard conv (`_schedule_standard_vectors`): 1, 2 or 4 channel
        vectors x a divisor of the row's columns, whose accumulators, weight vectors and one broadcast fit the
        registers with two left. Preferred: enough accumulators to hide the FMA latency (half the registers
        less one: 7 on AVX2; 4 left the FMA pipes idle), then the fewest loads per FMA, counting the weight
        vectors 1.5 times more (a panel of a 128-channel layer is larger than L1; the broadcasts' input rows
        stay in it). Measured on the host (AVX2), ResNet-18's 3x3 layers: 16 x 4 at 56 and 28 columns (8 x 8,
        32 x 2: 5-10% slower), 8 x 7 at 14 and 7 (32 x 2: 13% slower)."""
        def key(t: ConvTiles) -> tuple:
            v = t.oc // lanes
            return min(t.ow * v, registers // 2 - 1), -((t.ow + v) / (t.ow * v) + 1.5 / t.ow), t.ow
        return max(ConvTiles.standard_options(ext, lanes, registers), key=key, default=None)

    @staticmethod
    def stem_vectors(ext: ConvExtents, lanes: int) -> ConvTiles | None:
        """A float 3x3 stem (fewer than STANDARD_VECTOR_CHANNELS inputs) on 512-bit vectors: channel vectors,
        2 of them x 2 columns. MobileNetV2's 3->32 stride-2 stem on the znver4 host, batch 4, 1 thread, two
        sessions: 1.36-1.60 ms against 1.88-2.75 ms for the column form, and 16 x 7, 32 x 4, 32 x 7, 32 x 8
        between (1.66-2.19 ms): with 27 multiply-adds an output, a small tile's short unrolled body wins. On
        AVX2 the column form measured 3-12% faster (stop 32), and ResNet-18's 7x7 stem is a tie (9.7-10.6
        against 10.9 ms), so both keep it."""
        if (lanes >= 16 and not (ext.integer or ext.flat or ext.own) and ext.c < STANDARD_VECTOR_CHANNELS
                and ext.kh == ext.kw == 3 and ext.f % (2 * lanes) == 0 and ext.w % 2 == 0):
            return ConvTiles(oc=2 * lanes, oh=1, ow=2, cvec=True)
        return None

    @staticmethod
    def standard_options(ext: ConvExtents, lanes: int, registers: int) -> list[ConvTiles]:
        """Every channel-vector tile of a standard conv that fits the registers (the tuner's space of them)."""
        return [ConvTiles(oc=v * lanes, oh=1, ow=ow, cvec=True) for v in (1, 2, 4) if ext.f % (v * lanes) == 0
                for ow in divisors(ext.w, 14) if ow * v + v + 1 <= registers - 2]

    @staticmethod
    def channel_vectors(ext: ConvExtents, lanes: int, registers: int) -> ConvTiles | None:
        """The channel-vector form of a pointwise kernel: the most accumulators (pixels x channel vectors) that
        fit the registers with four left, at most 8 pixels; ties to the wider channel tile. Its default where
        the pixels fill no whole vectors (7x7, 5x25) or the kernel is int8 (whole-vector weight loads)."""
        budget = registers - 4
        options = [(px * (oc // lanes), oc, px) for oc in (2 * lanes, lanes) if ext.f % oc == 0
                   for px in range(1, 9) if ext.cols % px == 0 and px * (oc // lanes) <= budget]
        if not options:
            return None
        _, oc, px = max(options)
        return ConvTiles(oc=oc, oh=1, ow=px, cvec=True)


def depthwise_vectors(ext: ConvExtents, lanes: int) -> bool:
    """Whether a depthwise kernel's default is the channel-vector form: when its column vectors would gather
    every s-th input (stride > 1) or its rows fill no whole vectors (DS-CNN's 5 columns, MobileNetV2's 14 and
    28: 1.6-1.7x faster as channel vectors on AVX2, batch 4, 2 threads). Rows of whole vectors keep the column
    form (MobileNetV2's 56 columns: a tie; 112: the channel form 1.3x slower)."""
    return ext.depthwise and ext.f % lanes == 0 and (ext.stride > 1 or ext.w % lanes != 0)


def dot_fits(ext: ConvExtents, tiles: ConvTiles, dot: str) -> bool:
    """Whether tiles can use the int8 dot instruction `dot`: an int8 kernel, whole groups of input channels,
    whole instructions of output channels; int8_dot.DOTS on pointwise channel vectors, the DSP's on the scalar form."""
    if not (dot and ext.integer):
        return False
    if dot == "dsp":
        return ext.flat and not tiles.cvec and ext.c % QUAD == 0 and tiles.oc % DSP_LANES[-1] == 0
    return (tiles.cvec and ext.flat and dot in DOTS and ext.c % DOTS[dot].group == 0
            and tiles.oc % DOTS[dot].lanes == 0)


def with_dot(ext: ConvExtents, tiles: ConvTiles, board_dot: str) -> ConvTiles:
    """`tiles` on the board's int8 dot where it fits, else on its 256-bit form (a 512-bit dot's channel tile of
    8), else as they are."""
    for dot in (board_dot, NARROWER.get(board_dot, "")):
        if dot_fits(ext, tiles, dot):
            return replace(tiles, dot=dot)
    return tiles


def group_of(dot: str) -> int:
    """Input channels per instruction of a channel-vector dot (1: none): the weights are packed in groups of it."""
    return DOTS[dot].group if dot in DOTS else 1


@dataclass(frozen=True)
class ConvExtents:
    """The static extents of a conv2d block."""

    f: int  # output channels
    h: int  # output rows
    w: int  # output columns
    c: int  # input channels per group (the reduction)
    kh: int
    kw: int
    flat: bool  # pointwise: rows x columns fused into one pixel axis
    own: bool = False  # depthwise or grouped: an output channel reads only its group's input channels
    integer: bool = False  # int8 x int8 products summed in int32, nothing else (what the int8 dot computes)
    stride: int = 1  # column stride

    @property
    def depthwise(self) -> bool:
        """One input channel per output channel (the kernels with a channel-vector form of their own)."""
        return self.own and not self.flat and self.c == 1

    @property
    def cols(self) -> int:
        """The extent the column tile divides."""
        return self.h * self.w if self.flat else self.w


def vectors(cols: int, lanes: int) -> int:
    return -(-cols // lanes)


def divisors(n: int, cap: int) -> list[int]:
    """The divisors of n up to cap, ascending (1 at least)."""
    return [d for d in range(1, max(1, min(n, cap)) + 1) if n % d == 0]


def column_tiles(width: int, lanes: int) -> list[int]:
    """Column tiles for `width`: multiples of the vector width (1, 2, 4 vectors) that divide it; when none
    does (7, 14, 49, 196 on 16 lanes), its largest divisor up to one vector. LLVM turns wider odd vectors
    (28, 49, 98 floats) into slow code: 20-60x slower than a 14-wide tile, measured on the host."""
    whole = [m * lanes for m in (1, 2, 4) if m * lanes <= width and width % (m * lanes) == 0]
    return whole or [divisors(width, lanes)[-1]]


def conv_block(func: tirx.PrimFunc) -> str | None:
    """The one conv2d block (n, f, y, x spatial; c, ry, rx reduction) with a dynamic n, or None."""
    found = [b for b in kernel_blocks(func) if b.name_hint.startswith(CONV_BLOCKS)]
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
    return [int(iv.dom.extent) for iv in _block(func, block).iter_vars[1:]]


def extents_of(func: tirx.PrimFunc, block: str) -> ConvExtents:
    return ConvExtents(*conv_extents(func, block), flat=is_pointwise(func, block),
                       own=reads_own_channels(func, block), integer=_int8_products(_block(func, block)),
                       stride=column_stride(_block(func, block)))


def _int8_products(blk) -> bool:
    """The block is acc += int32(a) * int32(b) with a and b int8 loads (not a zero point subtracted, not
    int32 activations)."""
    v = blk.body.value
    if not (isinstance(v, tirx.Add) and isinstance(v.b, tirx.Mul)):
        return False
    return all(isinstance(t, tirx.Cast) and hasattr(t.value, "indices") and str(t.value.ty) == "int8"
               for t in (v.b.a, v.b.b))


def is_pointwise(func: tirx.PrimFunc, block: str) -> bool:
    """1x1, stride 1, unpadded: the image's pixels map one to one onto the output's."""
    ext = conv_extents(func, block)
    if ext[4:] != [1, 1] or not all(_is_copy(b) for b in _producers(func, block)):
        return False
    images = [p.shape for p in func.params if len(getattr(p, "shape", ())) == 4
              and not isinstance(p.shape[0], tirx.IntImm)]
    return len(images) >= 2 and all([int(d) for d in s[2:]] == ext[1:3] for s in images)


def _is_copy(blk) -> bool:
    """A producer that copies without padding (TVM legalizes an unpadded conv2d with one)."""
    return "if_then_else" not in blk.body.script()


def reads_own_channels(func: tirx.PrimFunc, block: str) -> bool:
    """Grouped/depthwise: an output-channel block reads only its group's input channels."""
    return block.startswith(("group_", "depthwise_"))


def schedule_conv(func: tirx.PrimFunc, block: str, tiles: ConvTiles, parallel: bool,
                  vectorize: bool = True) -> tirx.PrimFunc:
    """`vectorize`/`parallel` off for C-source kernels (target "c"; gcc vectorizes the plain loops)."""
    flat, own = is_pointwise(func, block), reads_own_channels(func, block)
    if tiles.cvec and weight_panels(func, block, tiles):
        if flat:
            return _schedule_channel_vectors(func, block, tiles, parallel)
        if own:
            return _schedule_depthwise_vectors(func, block, tiles, parallel)
        return _schedule_standard_vectors(func, block, tiles, parallel)
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    for p in sch.get_producers(blk):
        if _is_copy(sch.get(p)):  # read the input in place
            sch.compute_inline(p)
    if flat:
        _flatten_pixels(sch, blk, int(func.params[-1].shape[3]))
        n, f, p, rc, ry, rx = sch.get_loops(blk)
        fo, fi = sch.split(f, [None, tiles.oc])
        po, xi = sch.split(p, [None, tiles.ow])
        spatial, inner = [po], [fi, xi]
        if tiles.dot == "dsp":  # per pixel, each `lanes` channels' whole reduction is one call
            lanes = next(d for d in DSP_LANES if tiles.oc % d == 0)
            fi, fl = sch.split(fi, [None, lanes])
            inner, rc = [xi, fi, fl, rc], None
    else:
        n, f, y, x, rc, ry, rx = sch.get_loops(blk)
        fo, fi = sch.split(f, [None, tiles.oc])
        yo, yi = sch.split(y, [None, tiles.oh])
        xo, xi = sch.split(x, [None, tiles.ow])
        spatial, inner = [yo, xo], [fi, yi, xi]
        sch.unroll(yi)
    # own channels: a work item is an image's channel block, its padded input copied once, in cache;
    # otherwise channel blocks innermost, so consecutive items reuse the same input tile
    order = [n, fo, *spatial] if own else [n, *spatial, fo]
    taps = [ry, rx] if rc is None else [rc, ry, rx]  # the reduction outside the tile: all of it but "dsp"'s
    sch.reorder(*order, *taps, *inner)
    sch.unroll(fi)
    _fuse_epilogue(sch, blk, order[-1])
    if vectorize:
        sch.vectorize(xi)
        _vectorize_epilogue(sch, blk)
    else:  # scalar accumulators: unrolled, they are registers; a depthwise kernel's taps too (its weights)
        sch.unroll(xi)
        if own:
            sch.unroll(ry)
            sch.unroll(rx)
    pads = sch.get_producers(blk)
    padded = bool(pads)
    # items: an image's channel block (own channels); an image's tiles, the image's padded copy made just
    # before them (one image at a time, not the whole batch); any image's tiles (unpadded)
    items = order[:2] if own else order[1:] if padded else order
    outer = _parallel_items(sch, items, parallel)
    stride = column_stride(sch.get(blk))
    init = sch.decompose_reduction(blk, taps[0])  # before the padding's compute-at, which can drop rc's unit loop
    if padded:
        _schedule_padding(sch, pads, outer if own else n, stride, parallel and not own, vectorize)
    if flat and tiles.dot == "dsp":
        sch.unroll(sch.get_loops(init)[-1])  # the accumulators' zeroing: registers, like the calls' sums
        sch.tensorize(fl, dsp_intrinsic(lanes, int(sch.get(inner[-1]).extent)))
    return sch.mod["main"]


def weight_panels(func: tirx.PrimFunc, block: str, tiles: ConvTiles) -> dict[int, tuple[int, int]]:
    """{parameter index: (panel, group)} of the weight a channel-vector kernel reads packed (schedule/pack.py;
    group 2 or 4: input channels in the int8 dot's groups); {} when `tiles` is not that form, or the kernel cannot
    take it: its result is a parameter, or its weight is not one."""
    read = _weight_read(func, block) if tiles.cvec else None
    if read is None or int(func.params[read[1]].shape[0]) % tiles.oc:
        return {}
    ext = extents_of(func, block)
    if ext.own and not ext.depthwise:
        return {}  # grouped kernels have no channel-vector form
    return {read[1]: (tiles.oc, group_of(tiles.dot))}


def _weight_read(func: tirx.PrimFunc, block: str) -> tuple[int, int] | None:
    """(read index, parameter index) of a conv block's weight W[F, C, KH, KW], when it is a parameter and the
    block's result is not (the accumulator's layout is the schedule's to change)."""
    blk = _block(func, block)
    params = {p.name: i for i, p in enumerate(func.params) if getattr(p, "shape", None) is not None}
    if region_tensor(blk.writes[0]) in params:
        return None
    f = int(blk.iter_vars[1].dom.extent)
    for ri, region in enumerate(blk.reads):
        pi = params.get(region_tensor(region))
        if pi is not None and len(func.params[pi].shape) == 4 and int(func.params[pi].shape[0]) == f \
                and str(region.region[0].min) == str(blk.iter_vars[1].var):
            return ri, pi
    return None


def _schedule_channel_vectors(func: tirx.PrimFunc, block: str, tiles: ConvTiles, parallel: bool) -> tirx.PrimFunc:
    """Pointwise as a dense micro-kernel: per work item (an image's `ow` pixels x `oc` channels) the reduction
    over input channels outermost, pixels unrolled, channels vectorized; accumulators laid out [n, p, f].
    With `tiles.dot`, input channels go in the dot's groups and each 8 channels x group is the intrinsic; a
    work item is then a pixel tile and every channel panel, and copies the tile's input as [groups, pixels,
    group] first, so each group is one broadcast load for all panels instead of bytes H x W apart packed by
    scalar code per panel (MobileNetV2 int8: x0.90-0.93 -> x1.06-1.11 of onnxruntime's int8 at batch 1).
    Otherwise weight panels run outermost where the weights outweigh the image (MobileNetV2's 14x14
    expansions: 15-25% faster, each panel read once from L2 instead of once per pixel tile)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    oc, (wi, _), g = tiles.oc, _weight_read(func, block), group_of(tiles.dot)
    width = int(func.params[-1].shape[3])
    copies = sch.get_producers(blk)  # unpadded copies of the input (is_pointwise)
    if tiles.dot:
        sch.transform_layout(blk, ("read", wi), lambda f, c, r, s: (f // oc, c // g, r, s, f % oc, c % g))
        for p in copies:  # the input's groups of g channels stored together: one load per group and pixel
            sch.transform_layout(p, ("write", 0), lambda n, c, y, x: (n, c // g, y * width + x, c % g))
            sch.transform_block_layout(p, lambda n, c, y, x: (n, c, y * width + x))  # a pixel tile's region
    else:
        sch.transform_layout(blk, ("read", wi), lambda f, c, r, s: (f // oc, c, r, s, f % oc))
        for p in copies:
            sch.compute_inline(p)
    _flatten_pixels(sch, blk, width)
    sch.transform_layout(blk, ("write", 0), lambda n, f, p: (n, p, f))
    n, f, p, rc, ry, rx = sch.get_loops(blk)
    fo, fi = sch.split(f, [None, oc])
    po, pi = sch.split(p, [None, tiles.ow])
    # a dot kernel's item is a pixel tile and all its channel panels, which share its interleaved copy
    items = [po, fo] if tiles.dot or not _weights_outweigh_image(func, extents_of(func, block)) else [fo, po]
    if tiles.dot:
        rc, rci = sch.split(rc, [None, g])
        fio, fi = sch.split(fi, [None, DOTS[tiles.dot].lanes])
        sch.reorder(n, *items, rc, ry, rx, pi, fio, fi, rci)
        sch.unroll(fio)
    else:
        sch.reorder(n, *items, rc, ry, rx, pi, fi)
        sch.vectorize(fi)
    sch.unroll(pi)
    _fuse_channel_vector_epilogue(sch, blk, items[-1])
    at = _parallel_items(sch, [n, *items[:1 if tiles.dot else 2]], parallel)
    init = sch.decompose_reduction(blk, rc)
    if tiles.dot:
        for p in copies:  # the item's pixels, in the copy's order
            sch.compute_at(p, at)
            c, px = sch.get_loops(p)[-2:]
            co, ci = sch.split(c, [None, g])
            sch.reorder(co, px, ci)
            sch.unroll(ci)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.tensorize(fi, DOTS[tiles.dot].name)
    return sch.mod["main"]


def _schedule_depthwise_vectors(func: tirx.PrimFunc, block: str, tiles: ConvTiles, parallel: bool) -> tirx.PrimFunc:
    """Depthwise (one input channel per output channel) as channel vectors: per work item (an image's `oc`
    channels) and output row, `ow` columns at a time, the taps outermost, columns unrolled, channels
    vectorized. The item's padded input is copied channels-innermost, [y, x, c], so every tap is a
    contiguous vector load whatever the stride, not a gather across channel planes; accumulators are laid
    out [n, y, x, f] and the epilogue is computed on them as channel vectors (`depthwise_vectors`: where)."""
    sch, blk = _channel_vector_start(func, block, tiles.oc)
    n, f, y, x, rc, ry, rx = sch.get_loops(blk)
    fo, fi = sch.split(f, [None, tiles.oc])
    xo, xi = sch.split(x, [None, tiles.ow])
    sch.reorder(n, fo, y, xo, rc, ry, rx, xi, fi)
    sch.unroll(xi)
    sch.vectorize(fi)
    _fuse_channel_vector_epilogue(sch, blk, xo)
    pads = sch.get_producers(blk)
    at = _parallel_items(sch, [n, fo], parallel)
    init = sch.decompose_reduction(blk, rc)
    sch.vectorize(sch.get_loops(init)[-1])
    for p in pads:  # the item's channels of the padded image, channels innermost
        sch.compute_at(p, at)
        sch.transform_layout(p, ("write", 0), lambda n, c, y, x: (n, y, x, c))
        *_, pc, py, px = sch.get_loops(p)
        sch.reorder(py, px, pc)
        try:  # the zero fill apart from the interior copy: no bounds check per element
            sch.vectorize(sch.get_loops(sch.decompose_padding(p, py))[-1])
        except Exception:  # ScheduleError: not a padding pattern it knows; the one checked nest is correct
            pass
    return sch.mod["main"]


def _schedule_standard_vectors(func: tirx.PrimFunc, block: str, tiles: ConvTiles, parallel: bool) -> tirx.PrimFunc:
    """A standard conv (3x3, 7x7, strided) as MLAS's NCHWc kernel computes it, on NCHW tensors: per work item
    (one output row's `ow` columns x `oc` channels of an image) the taps outermost (input channel, kernel row,
    kernel column), columns unrolled, channels vectorized: each tap is `oc / lanes` contiguous loads of
    weights packed [F / oc, C, KH, KW, oc] and one broadcast input value per column, against a column
    vector and `oc` broadcast weights per tap in the column form. Accumulators are laid out [n, y, x, f];
    the epilogue stores them back into NCHW. The padded image is copied once per image, as in the column
    form. Work items run weight panels innermost (an image's row reused from cache) unless the weights
    outweigh the image (ResNet's 512-channel 7x7 layers), then rows innermost (each panel read once)."""
    sch, blk = _channel_vector_start(func, block, tiles.oc)
    n, f, y, x, rc, ry, rx = sch.get_loops(blk)
    fo, fi = sch.split(f, [None, tiles.oc])
    xo, xi = sch.split(x, [None, tiles.ow])
    ext = extents_of(func, block)
    items = [fo, y, xo] if _weights_outweigh_image(func, ext) else [y, xo, fo]
    sch.reorder(n, *items, rc, ry, rx, xi, fi)
    sch.unroll(xi)
    sch.vectorize(fi)
    _fuse_channel_vector_epilogue(sch, blk, items[-1])
    pads = sch.get_producers(blk)
    _parallel_items(sch, items, parallel)
    init = sch.decompose_reduction(blk, rc)
    sch.vectorize(sch.get_loops(init)[-1])
    if pads:  # broadcasts read single values: no de-interleaved columns needed at any stride
        _schedule_padding(sch, pads, n, 1, parallel, True)
    return sch.mod["main"]


def _channel_vector_start(func: tirx.PrimFunc, block: str, oc: int):
    """The start of both channel-vector forms of a conv over rows and columns (depthwise, standard): the
    weight read as panels of `oc` output channels, [F / oc, C, KH, KW, oc], unpadded input copies read in
    place, accumulators laid out [n, y, x, f]. -> (schedule, the conv block)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get_sblock(block)
    wi = _weight_read(func, block)[0]
    sch.transform_layout(blk, ("read", wi), lambda f, c, r, s: (f // oc, c, r, s, f % oc))
    for p in sch.get_producers(blk):
        if _is_copy(sch.get(p)):
            sch.compute_inline(p)
    sch.transform_layout(blk, ("write", 0), lambda n, f, y, x: (n, y, x, f))
    return sch, blk


def _weights_outweigh_image(func: tirx.PrimFunc, ext: ConvExtents) -> bool:
    """Whether a conv's weights are larger than one input image."""
    image = [p.shape for p in func.params if len(getattr(p, "shape", ())) == 4
             and not isinstance(p.shape[0], tirx.IntImm)][0]
    return ext.f * ext.c * ext.kh * ext.kw > math.prod(int(d) for d in image[1:])


def _fuse_channel_vector_epilogue(sch: s_tir.Schedule, blk, loop) -> None:
    """The epilogue computed on each tile at `loop`, its channels innermost (the accumulators' [.., pixel,
    channel] layout), as vectors."""
    _fuse_epilogue(sch, blk, loop)
    _inline_single_readers(sch, blk)
    for c in _consumers_deep(sch, blk):
        loops = sch.get_loops(c)
        try:
            if len(loops) >= 2:
                sch.reorder(loops[-1], loops[-2])
            sch.vectorize(sch.get_loops(c)[-1])
        except Exception:  # ScheduleError: an epilogue left outside the tile (whole rows); still correct
            pass


def _inline_single_readers(sch: s_tir.Schedule, blk) -> None:
    """An epilogue block with one reader (the bias before the activation) computed in it: one pass over the
    tile and no tile buffer between them (ResNet-18's workspace was 256 B a thread larger without); one that
    two blocks read (x * sigmoid(x)) keeps its buffer rather than being computed twice."""
    for c in _consumers_deep(sch, blk):
        if len(sch.get_consumers(c)) == 1:
            try:
                sch.compute_inline(c)
            except Exception:  # ScheduleError: not element-wise: kept
                pass


def _parallel_items(sch: s_tir.Schedule, items: list, parallel: bool):
    """The work-item loops fused into one parallel loop, or, single-threaded, left as they are: the fused
    index is taken apart by division on every item, which on a 32-bit core without a divider for int64 is a
    library call (__aeabi_ldivmod). -> the loop the items' shared data is computed at."""
    if not parallel:
        return items[-1]
    outer = sch.fuse(*items)
    sch.parallel(outer)
    return outer


def _flatten_pixels(sch: s_tir.Schedule, blk, width: int) -> None:
    """Rows x columns -> one pixel axis in the convolution and its epilogue blocks, and in the intermediate
    buffers between them, so that a tile of pixels is one rectangle for compute-at (the output parameter
    keeps its shape; only its index changes)."""
    pix = lambda n, f, y, x: (n, f, y * width + x)
    sch.transform_layout(blk, ("write", 0), pix)
    sch.transform_block_layout(blk, lambda n, f, y, x, c, ry, rx: (n, f, y * width + x, c, ry, rx))
    for c in _consumers_deep(sch, blk):
        if sch.get_consumers(c):
            sch.transform_layout(c, ("write", 0), pix)
        sch.transform_block_layout(c, pix)


def _vectorize_epilogue(sch: s_tir.Schedule, blk) -> None:
    """The fused bias/activation blocks: their innermost loop (the column tile) as vectors."""
    for c in _consumers_deep(sch, blk):
        loops = sch.get_loops(c)
        try:
            sch.vectorize(loops[-1])
        except Exception:  # ScheduleError: an epilogue left outside the tile (whole rows); still correct
            pass


def _schedule_padding(sch: s_tir.Schedule, pads: list, at, stride: int, parallel: bool, vectorize: bool) -> None:
    """The zero-padding copy, computed at `at` (a work item: its channels only; or an image). With a column
    stride s its columns are stored de-interleaved, [.., x % s, x // s], so the convolution reads each
    output tile's inputs as contiguous vectors instead of gathering every s-th float. Its zero fill is split
    from the copy of the interior, so both are plain vector loops with no per-element bounds check."""
    for p in pads:
        width = int(sch.get(p).iter_vars[3].dom.extent)  # of the padded copy
        sch.compute_at(p, at)
        deinterleave = stride > 1 and width % stride == 0  # else the layout would need a predicate
        if deinterleave:
            sch.transform_layout(p, ("write", 0), lambda n, c, y, x: (n, c, y, x % stride, x // stride))
        if parallel:
            sch.parallel(sch.get_loops(p)[1])
        if not vectorize:
            continue
        try:
            fill = sch.decompose_padding(p, sch.get_loops(p)[1])  # the first loop inside `at`
        except Exception:  # ScheduleError: not a padding pattern it knows; leave the one scalar nest
            continue
        sch.vectorize(sch.get_loops(fill)[-1])
        x = sch.get_loops(p)[-1]
        if deinterleave and int(sch.get(x).extent) % stride == 0:  # write each column phase contiguously
            xo, phase = sch.split(x, [None, stride])
            sch.reorder(phase, xo)
            x = xo
        sch.vectorize(x)


def column_stride(block) -> int:
    """The column stride of a convolution block that reads a padded copy: the coefficient of x in its index."""
    x = block.iter_vars[3].var
    for region in block.reads:
        if len(region.region) == 4 and region.script().startswith("pad_temp"):
            coef = tvm.sym.detect_linear_equation(region.region[3].min, [x])
            return int(coef[0]) if len(coef) == 2 else 1
    return 1


def _producers(func: tirx.PrimFunc, block: str) -> list:
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return [sch.get(p) for p in sch.get_producers(sch.get_sblock(block))]


def _block(func: tirx.PrimFunc, name: str):
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return sch.get(sch.get_sblock(name))


def kernel_blocks(func: tirx.PrimFunc) -> list:
    """The blocks of a kernel as Relax legalizes it (all children of the root block)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # no root block (already lowered)
        return []
