"""One tuning trial: a dense micro-kernel configuration turned into a measurable kernel on one shape.

The main variant of a configuration is the kernel specialised to rows = mt * tile (schedule/variants.py);
a trial measures it on the rows of its best-fitting instance, with random inputs made on the board.
"""

from __future__ import annotations

from ..model.symexpr import to_sym
from ..schedule.dense import DenseTiles, schedule_dense
from ..schedule.variants import RowSplit, specialize_rows
from .rpc import MeasureInput


def main_variant_input(func, split: RowSplit, block: str, tiles: DenseTiles, rows: int,
                       parallel: bool = True) -> MeasureInput:
    """MeasureInput for `tiles`' main variant on `rows` rows (a multiple of tiles.rows)."""
    if rows % tiles.rows:
        raise ValueError(f"rows {rows} is not a multiple of the row tile {tiles.rows}")
    mt = rows // tiles.rows
    kernel = schedule_dense(specialize_rows(func, split, tiles.rows), block, tiles, parallel)
    name = f"dense_r{tiles.rows}_c{tiles.cols}_u{tiles.unroll_k}"
    spec = []
    for p in kernel.params:
        shape = getattr(p, "shape", None)
        if shape is None:  # the trailing mt scalar
            spec.append(mt)
        else:
            spec.append(([to_sym(s).eval({"mt": mt}) for s in shape], str(p.dtype)))
    return MeasureInput(kernel.with_attr("global_symbol", name), name, spec)
