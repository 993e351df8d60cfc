"""Tuning tasks: the kernels of a model with a shape-generic micro-kernel space: dense/matmul kernels with
dynamic rows (the product of their leading dims: batch x seq, a static batch, unit axes; schedule/rows.py),
conv2d kernels with a dynamic batch, and attention's batch matmuls (schedule/attention.py: rows = seq, and
the columns or the reduction seq too), measured at batch 1 over seq.

Each becomes a `TuneTask`: the kernel's TIR, its row split, the DenseTask/ConvTask the space and cost model
see, and the workload it is recorded under in the database. The workload is (op, static dims, dtype, board) with the
kernel's structure (the fused epilogue) folded into the static dims, so two models with the same layer (say
768 x 3072 + bias + GELU) share measurements, and a layer with another epilogue does not borrow them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ..model.plan import DimRange
from ..schedule.attention import attention_form
from ..schedule.conv import conv_block, extents_of
from ..schedule.dense import _static_extent
from ..schedule.rows import row_range
from ..schedule.variants import (
    RowSplit,
    _aligned,
    call_rows,
    dense_rows,
    find_row_split,
    matmul_block,
)
from .space import AttentionTask, ConvTask, DenseTask


@dataclass
class TuneTask:
    kernel: str  # the kernel's name in the plan
    func: object  # tirx.PrimFunc (symbolic rows; a dense kernel's rows flattened into one axis)
    split: RowSplit
    block: str  # the matmul block
    op: DenseTask | ConvTask | AttentionTask  # what the space, adaptation and cost model see
    dim: DimRange  # what counts its rows: the model's batch dim (conv2d), seq (attention) or the row count (dense, rows.ROWS)
    calls: int  # calls per model run
    dtype: str

    @property
    def kind(self) -> str:
        """The operator class, also the workload's op in the database: "dense", "conv2d" or "attention"."""
        return {ConvTask: "conv2d", AttentionTask: "attention"}.get(type(self.op), "dense")

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


def extract_tasks(lowered, dims: list[DimRange], attention: bool = True) -> list[TuneTask]:
    """`attention`: the board compiles attention's tiled kernels (vector boards; Schedules.vectorize)."""
    calls = Counter(c.kernel for c in lowered.plan.calls)
    first_call = {c.kernel: c for c in reversed(lowered.plan.calls)}
    out = []
    for name, func in lowered.kernels.items():
        if name not in first_call:
            continue
        task = (_dense_task(name, func, first_call[name], lowered.plan, dims) if matmul_block(func) is not None
                else _conv_task(name, func, dims))
        if task is None and attention and matmul_block(func) is not None:
            task = _attention_task(name, func, dims)
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


def _attention_task(name: str, func, dims: list[DimRange]) -> TuneTask | None:
    block = matmul_block(func)
    n = attention_form(func, block)
    if n == -1 or dense_rows(func) is not None:
        return None
    *heads, rows, _, red = _block_iters(func, block)
    seq = next((d for d in dims if d.c_name == str(rows.dom.extent)), None)
    if seq is None or seq.lo == seq.hi:
        return None
    static = [int(iv.dom.extent) for iv in heads if isinstance(iv.dom.extent, tirx.IntImm)]
    k = red.dom.extent
    op = AttentionTask(name, math.prod(static), n or 0, int(k) if isinstance(k, tirx.IntImm) else 0, seq.lo, seq.hi)
    return TuneTask(name, func, RowSplit(seq.c_name, (), ()), block, op, seq, 0, str(func.params[-1].dtype))


def _block_iters(func, block: str) -> list:
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    return list(sch.get(sch.get_sblock(block)).iter_vars)
