"""The first stage as two calls: read and check a model before any heavy work (`prepare`), then rename,
canonicalize, import and lower it into a Plan and its TIR kernels (`lower_model`)."""

from __future__ import annotations

from pathlib import Path

import onnx

from . import onnx_load
from .names import rename_model
from .plan import DimRange


def prepare(model_path: str | Path, dim_ranges: dict[str, tuple[int, int]]) -> tuple[onnx.ModelProto, list[DimRange]]:
    """Read and check a model before any heavy work: file, operators, dims."""
    model = onnx_load.load_onnx(model_path)
    onnx_load.check_ops(model)
    dims = onnx_load.resolve_dims(model, dim_ranges)
    return model, dims


def lower_model(name: str, model: onnx.ModelProto, dims: list[DimRange], word_bits: int = 64):
    """-> model.lower.Lowered: the plan and its TIR kernels. word_bits: the board's (Board.word_bits)."""
    from .canonicalize import canonicalize  # TVM-dependent: imported when needed (seconds), not for bad input
    from .lower import import_relax, lower
    from .op_fixes import fix_ops
    from .qdq_fuse import integer_ops
    from .quant import constant_qparams

    ins, outs = onnx_load.graph_inputs(model), onnx_load.graph_outputs(model)
    model = fix_ops(canonicalize(rename_model(model, dims), {d.c_name: (d.lo, d.hi) for d in dims}))
    model = constant_qparams(integer_ops(model, word_bits))
    lowered = lower(name, import_relax(model), dims)
    for tid, io in zip(lowered.plan.inputs, ins):
        lowered.plan.tensor(tid).name = io.name
    for o, io in zip(lowered.plan.outputs, outs):
        o.name = io.name
    return lowered
