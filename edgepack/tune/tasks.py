"""Tuning tasks: the dense/matmul kernels of a model whose rows follow one dynamic dim.

Each becomes a `TuneTask`: the kernel's TIR, its row split, the DenseTask the space and cost model see, and
the workload it is recorded under in the database. The workload is (op, static dims, dtype, board) with the
kernel's structure (the fused epilogue) folded into the static dims, so two models with the same layer (say
768 x 3072 + bias + GELU) share measurements, and a layer with another epilogue does not borrow them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import tvm_ffi

from ..model.plan import DimRange
from ..schedule.dense import DenseTiles, _static_extent
from ..schedule.variants import RowSplit, _aligned, find_row_split, matmul_block
from .space import DenseTask


@dataclass
class TuneTask:
    kernel: str  # the kernel's name in the plan
    func: object  # tirx.PrimFunc (symbolic rows)
    split: RowSplit
    block: str  # the matmul block
    dense: DenseTask
    dim: DimRange  # the model dim that counts its rows
    calls: int  # calls per model run
    dtype: str

    @property
    def static_dims(self) -> dict:
        body = f"{tvm_ffi.structural_hash(self.func) & 0xFFFFFFFFFFFF:012x}"
        return {"n": self.dense.n, "k": self.dense.k, "body": body}

    def runs(self, tiles: DenseTiles) -> bool:
        """Whether this kernel can use the row tile (its row views must stay 64-byte aligned)."""
        return _aligned(self.split, self.func, tiles.rows)

    def weight(self, rows: float) -> float:
        """Share of the model's work at `rows` rows: FLOPs times calls (the budget split uses it)."""
        return self.calls * self.dense.flop(rows)


def extract_tasks(lowered, dims: list[DimRange]) -> list[TuneTask]:
    calls = Counter(c.kernel for c in lowered.plan.calls)
    by_c = {d.c_name: d for d in dims}
    out = []
    for name, func in lowered.kernels.items():
        split, block = find_row_split(func), matmul_block(func)
        if split is None or block is None or split.dim not in by_c:
            continue
        d = by_c[split.dim]
        n, k = _static_extent(func, block, -2), _static_extent(func, block, -1)
        dtype = str(func.params[0].dtype)
        out.append(TuneTask(name, func, split, block, DenseTask(name, n, k, d.lo, d.hi), d, calls[name], dtype))
    return out
