"""One tuning trial: a dense micro-kernel configuration turned into a measurable kernel on one shape.

The main variant of a configuration is the kernel specialised to rows = mt * tile (schedule/variants.py);
mt is a run-time argument, so one built kernel serves every row count of a configuration: the tuner builds
it once and measures it on any number of shapes. Inputs are random tensors made on the board.
"""

from __future__ import annotations

from ..model.symexpr import to_sym
from ..schedule.attention import AttentionTiles, schedule_attention
from ..schedule.conv import ConvTiles, schedule_conv
from ..schedule.dense import DenseTiles, schedule_dense
from ..schedule.pack import pack_func, packing
from ..schedule.variants import RowSplit, specialize_rows
from .measure import MeasureInput


def kernel_name(tiles: DenseTiles | ConvTiles | AttentionTiles) -> str:
    if isinstance(tiles, AttentionTiles):
        return f"attn_r{tiles.rows}_c{tiles.cols}" + ("_s" if tiles.serial else "")
    if isinstance(tiles, ConvTiles):
        return f"conv_oc{tiles.oc}_oh{tiles.oh}_ow{tiles.ow}" + ("_cv" if tiles.cvec else "") + \
            (f"_{tiles.dot}" if tiles.dot else "")
    return (f"dense_r{tiles.rows}_c{tiles.cols}_u{tiles.unroll_k}" + ("_p" if tiles.par_cols else "")
            + ("_s" if tiles.serial else ""))


def main_variant(func, split: RowSplit, block: str, tiles: DenseTiles | ConvTiles, parallel: bool = True,
                 vectorize: bool = True, pack_lanes: int | None = None):
    """The configuration's main variant as a PrimFunc named `kernel_name(tiles)` (a convolution has only
    one variant: the symbolic kernel, any batch). `vectorize`/`parallel`/`pack_lanes` (weights packed in
    panels for this vector width, None: not packed): as the package will compile it (Schedules).
    Attention has one variant too: the padded-tile kernel, any seq."""
    if isinstance(tiles, AttentionTiles):
        kernel = schedule_attention(func, block, tiles, parallel)
        if kernel is None:
            raise ValueError(f"{kernel_name(tiles)} does not apply to this kernel")
        return kernel.with_attr("global_symbol", kernel_name(tiles))
    if isinstance(tiles, ConvTiles):
        return schedule_conv(func, block, tiles, parallel, vectorize).with_attr("global_symbol", kernel_name(tiles))
    if pack_lanes and (pk := packing(func, block, pack_lanes)) is not None:
        func = pack_func(func, block, pk[0], pk[2])
    kernel = schedule_dense(specialize_rows(func, split, tiles.rows), block, tiles, parallel, vectorize)
    return kernel.with_attr("global_symbol", kernel_name(tiles))


def args_spec(kernel, tiles: DenseTiles | ConvTiles, rows: int, dim: str = "") -> list:
    """Arguments of a main variant on `rows` rows (a multiple of tiles.rows): shapes, then the mt scalar.
    For a convolution `rows` is the batch, bound to the kernel's dim `dim`; for attention it is seq (`dim`),
    any other dim (the batch) at 1."""
    if isinstance(tiles, (ConvTiles, AttentionTiles)):
        return [([_eval(s, dim, rows) for s in p.shape], str(p.dtype)) for p in kernel.params]
    if rows % tiles.rows:
        raise ValueError(f"rows {rows} is not a multiple of the row tile {tiles.rows}")
    mt = rows // tiles.rows
    spec = []
    for p in kernel.params:
        shape = getattr(p, "shape", None)
        spec.append(mt if shape is None else ([to_sym(s).eval({"mt": mt}) for s in shape], str(p.dtype)))
    return spec


def main_variant_input(func, split: RowSplit, block: str, tiles: DenseTiles, rows: int,
                       parallel: bool = True, pack_lanes: int | None = None) -> MeasureInput:
    """MeasureInput for `tiles`' main variant on `rows` rows (a multiple of tiles.rows)."""
    if rows % tiles.rows:
        raise ValueError(f"rows {rows} is not a multiple of the row tile {tiles.rows}")
    kernel = main_variant(func, split, block, tiles, parallel, pack_lanes=pack_lanes)
    return MeasureInput(kernel, kernel_name(tiles), args_spec(kernel, tiles, rows))


def _eval(extent, dim: str, value: int) -> int:
    sym = to_sym(extent)
    return sym.eval({v: value if v == dim else 1 for v in sym.free_dims()})
