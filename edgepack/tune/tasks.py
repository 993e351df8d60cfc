"""Tuning tasks: the kernels of a model with a shape-generic micro-kernel space: dense/matmul kernels with
dynamic rows (the product of their leading dims: batch x seq, a static batch, unit axes; schedule/rows.py),
and conv2d kernels with a dynamic batch.

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
from ..schedule.conv import conv_block, extents_of
from ..schedule.dense import _static_extent
from ..schedule.rows import row_range
from ..schedule.variants import RowSplit, _aligned, call_rows, dense_rows, find_row_split, matmul_block
from .space import ConvTask, DenseTask


@dataclass
class TuneTask:
    kernel: str  # the kernel's name in the plan
    func: object  # tirx.PrimFunc (symbolic rows; a dense kernel's rows flattened into one axis)
    split: RowSplit
    block: str  # the matmul block
    op: DenseTask | ConvTask  # what the space, adaptation and cost model see
    dim: DimRange  # what counts its rows: the model's batch dim (conv2d) or the row count (dense, rows.ROWS)
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
    first_call = {c.kernel: c for c in reversed(lowered.plan.calls)}
    out = []
    for name, func in lowered.kernels.items():
        if name not in first_call:
            continue
        task = (_dense_task(name, func, first_call[name], lowered.plan, dims) if matmul_block(func) is not None
                else _conv_task(name, func, dims))
        if task is not None:
            task.calls = calls[name]
            out.append(task)
    return out


def _dense_task(name: str, func, call, plan, dims: list[DimRange]) -> TuneTask | None:
    flat = dense_rows(func)
    if flat is None:
        return None
    func, split = flat
    d = row_range(call_rows(plan, call, split), dims)
    if d.lo == d.hi:
        return None  # static rows: nothing shape-generic to tune
    block = matmul_block(func)
    op = DenseTask(name, _static_extent(func, block, -2), _static_extent(func, block, -1), d.lo, d.hi)
    return TuneTask(name, func, split, block, op, d, 0, str(func.params[0].dtype))


def _conv_task(name: str, func, dims: list[DimRange]) -> TuneTask | None:
    by_c = {d.c_name: d for d in dims}
    split, block = find_row_split(func), conv_block(func)
    if split is None or split.dim not in by_c or block is None:
        return None
    d = by_c[split.dim]
    ext = extents_of(func, block)
    op = ConvTask(name, ext.f, ext.h, ext.w, ext.c, ext.kh, ext.kw, d.lo, d.hi, ext.flat, ext.integer, ext.own,
                  ext.stride)
    return TuneTask(name, func, split, block, op, d, 0, str(func.params[0].dtype))
