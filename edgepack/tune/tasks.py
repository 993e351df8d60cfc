"""Tuning tasks: the kernels of a model with a shape-generic micro-kernel space: dense/matmul kernels whose
rows follow one dynamic dim, and conv2d kernels with a dynamic batch.

Each becomes a `TuneTask`: the kernel's TIR, its row split, the DenseTask/ConvTask the space and cost model
see, and the workload it is recorded under in the database. The workload is (op, static dims, dtype, board) with the
kernel's structure (the fused epilogue) folded into the static dims, so two models with the same layer (say
768 x 3072 + bias + GELU) share measurements, and a layer with another epilogue does not borrow them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import tvm_ffi

from ..model.plan import DimRange
from ..schedule.conv import conv_block, conv_extents, is_pointwise
from ..schedule.dense import _static_extent
from ..schedule.variants import RowSplit, _aligned, find_row_split, matmul_block
from .space import ConvTask, DenseTask


@dataclass
class TuneTask:
    kernel: str  # the kernel's name in the plan
    func: object  # tirx.PrimFunc (symbolic rows)
    split: RowSplit
    block: str  # the matmul block
    op: DenseTask | ConvTask  # what the space, adaptation and cost model see
    dim: DimRange  # the model dim that counts its rows
    calls: int  # calls per model run
    dtype: str

    @property
    def kind(self) -> str:
        """The operator class, also the workload's op in the database: "dense" or "conv2d"."""
        return "conv2d" if isinstance(self.op, ConvTask) else "dense"

    @property
    def static_dims(self) -> dict:
        body = f"{tvm_ffi.structural_hash(self.func) & 0xFFFFFFFFFFFF:012x}"
        dims = {k: v for k, v in vars(self.op).items() if k not in ("name", "lo", "hi")}
        return dims | {"body": body}

    def runs(self, tiles) -> bool:
        """Whether this kernel can use the tiles (dense row views must stay 64-byte aligned)."""
        return self.kind != "dense" or _aligned(self.split, self.func, tiles.rows)

    def weight(self, rows: float) -> float:
        """Share of the model's work at `rows` rows: FLOPs times calls (the budget split uses it)."""
        return self.calls * self.op.flop(rows)


def extract_tasks(lowered, dims: list[DimRange]) -> list[TuneTask]:
    calls = Counter(c.kernel for c in lowered.plan.calls)
    by_c = {d.c_name: d for d in dims}
    out = []
    for name, func in lowered.kernels.items():
        split = find_row_split(func)
        if split is None or split.dim not in by_c:
            continue
        d, dtype = by_c[split.dim], str(func.params[0].dtype)
        if (block := matmul_block(func)) is not None:
            n, k = _static_extent(func, block, -2), _static_extent(func, block, -1)
            op = DenseTask(name, n, k, d.lo, d.hi)
        elif (block := conv_block(func)) is not None:
            op = ConvTask(name, *conv_extents(func, block), d.lo, d.hi, is_pointwise(func, block))
        else:
            continue
        out.append(TuneTask(name, func, split, block, op, d, calls[name], dtype))
    return out
