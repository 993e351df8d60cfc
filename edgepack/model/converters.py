"""edgepack's own ONNX converters for ops TVM 0.27's Relax frontend cannot import, or imports into ops that
do not lower to TIR: LSTM and GRU (no converter), TopK (`relax.topk` legalizes to an extern sort call) and
CumSum (`relax.cumsum` is left unlowered). Each becomes a TIR kernel (`call_tir`) the static plan can call.

model/custom_ops.py registers them with the frontend while a model is imported; LSTM and GRU live in
model/recurrent.py.
"""

from __future__ import annotations

from functools import reduce

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as frontend
from tvm.script import tirx as T

from ..errors import ModelError


# -- helpers shared by the converters ---------------------------------------------------------------------

def constant_int(value, params, what: str) -> int:
    """A scalar (or one-element) integer operand that must be known at build time."""
    c = frontend.get_constant(value, params)
    if not isinstance(c, tvm.ir.GenericConst) or c.value.numpy().size != 1:
        raise ModelError(f"{what} must be a constant (an initializer), not a run-time input")
    return int(c.value.numpy().item())


def shape_of(x: relax.Expr) -> list:
    return list(x.ty.shape.values)


def normal_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise ModelError(f"{op} axis {axis} is out of range for a rank-{ndim} input")
    return axis % ndim


def around_axis(shape: list, axis: int) -> list:
    """(outer, n, inner): the shape as three axes around `axis`, so one kernel serves every rank and axis."""
    prod = lambda dims: reduce(lambda a, b: a * b, dims, tvm.tirx.const(1, "int64"))  # noqa: E731
    return [prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])]


def call_kernel(bb: relax.BlockBuilder, func: tvm.tirx.PrimFunc, name: str, args: list, outs: list):
    """Emit `call_tir` of a kernel; `outs` are (shape, dtype) of its destination tensors."""
    gv = bb.add_func(func, name)
    tys = [relax.TensorType(shape, dtype) for shape, dtype in outs]
    return bb.emit(relax.call_tir(gv, args, tys[0] if len(tys) == 1 else tys))


# -- CumSum -----------------------------------------------------------------------------------------------

def cumsum_kernel(dtype: str, exclusive: bool, reverse: bool) -> tvm.tirx.PrimFunc:
    """A running sum along the middle axis of (outer, n, inner)."""

    @T.prim_func(private=True, s_tir=True)
    def cumsum(x_h: T.handle, y_h: T.handle):
        T.func_attr({"tirx.noalias": True})
        outer, n, inner = T.int64(), T.int64(), T.int64()
        x = T.match_buffer(x_h, (outer, n, inner), dtype)
        y = T.match_buffer(y_h, (outer, n, inner), dtype)
        acc = T.alloc_buffer((1,), dtype)
        with T.sblock("cumsum"):  # one opaque block: Relax's passes expect a root block
            for o, j in T.grid(outer, inner):
                acc[0] = T.cast(0, dtype)
                for s in range(n):  # indices inline: a bound name would become a workspace buffer
                    if exclusive:
                        y[o, n - 1 - s if reverse else s, j] = acc[0]
                        acc[0] = acc[0] + x[o, n - 1 - s if reverse else s, j]
                    else:
                        acc[0] = acc[0] + x[o, n - 1 - s if reverse else s, j]
                        y[o, n - 1 - s if reverse else s, j] = acc[0]

    return cumsum


class CumSum(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        data = inputs[0]
        shape = shape_of(data)
        axis = normal_axis(constant_int(inputs[1], params, "CumSum axis"), max(len(shape), 1), "CumSum")
        flat = around_axis(shape, axis) if shape else [1, 1, 1]
        dtype = data.ty.dtype
        kernel = cumsum_kernel(dtype, bool(attr.get("exclusive", 0)), bool(attr.get("reverse", 0)))
        y = call_kernel(bb, kernel, "ep_cumsum", [bb.emit(relax.op.reshape(data, flat))], [(flat, dtype)])
        return relax.op.reshape(y, shape)


# -- TopK -------------------------------------------------------------------------------------------------

def topk_kernel(dtype: str, k: int, largest: bool) -> tvm.tirx.PrimFunc:
    """The k largest (smallest) along the middle axis of (outer, n, inner), sorted, ties by lower index as
    onnxruntime breaks them: an insertion into the sorted output, one element at a time (O(n k))."""

    @T.prim_func(private=True, s_tir=True)
    def topk(x_h: T.handle, v_h: T.handle, i_h: T.handle):
        T.func_attr({"tirx.noalias": True})
        outer, n, inner = T.int64(), T.int64(), T.int64()
        x = T.match_buffer(x_h, (outer, n, inner), dtype)
        vals = T.match_buffer(v_h, (outer, k, inner), dtype)
        idx = T.match_buffer(i_h, (outer, k, inner), "int64")
        pos = T.alloc_buffer((1,), "int64")
        with T.sblock("topk"):
            for o, j in T.grid(outer, inner):
                for i in range(n):
                    # kept = min(i, k) entries are sorted; those that tie or beat x[i] stay ahead of it
                    pos[0] = T.int64(0)
                    for m in range(T.int64(k)):
                        if m < i:
                            if (vals[o, m, j] >= x[o, i, j]) if largest else (vals[o, m, j] <= x[o, i, j]):
                                pos[0] = m + 1
                    if pos[0] < k:
                        for s in range(T.int64(k - 1)):  # shift the entries after pos down, last first
                            if k - 1 - s > pos[0] and k - 1 - s <= i:
                                vals[o, k - 1 - s, j] = vals[o, k - 2 - s, j]
                                idx[o, k - 1 - s, j] = idx[o, k - 2 - s, j]
                        vals[o, pos[0], j] = x[o, i, j]
                        idx[o, pos[0], j] = i


    return topk


class TopK(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._topk(bb, inputs[0], int(attr.get("k", 1)), attr)

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return cls._topk(bb, inputs[0], constant_int(inputs[1], params, "TopK k"), attr)

    @classmethod
    def _topk(cls, bb, data, k: int, attr):
        shape = shape_of(data)
        axis = normal_axis(int(attr.get("axis", -1)), len(shape), "TopK")
        n = shape[axis]
        if k < 1 or (isinstance(n, tvm.tirx.IntImm) and k > int(n)):
            raise ModelError(f"TopK k = {k} must be in 1..{n} (the size of its axis)")
        outer, _, inner = around_axis(shape, axis)
        dtype = data.ty.dtype
        kernel = topk_kernel(dtype, k, bool(attr.get("largest", 1)))
        flat = bb.emit(relax.op.reshape(data, [outer, n, inner]))
        res = call_kernel(bb, kernel, "ep_topk", [flat], [([outer, k, inner], dtype), ([outer, k, inner], "int64")])
        out_shape = shape[:axis] + [k] + shape[axis + 1:]
        return relax.Tuple([bb.emit(relax.op.reshape(bb.emit(relax.TupleGetItem(res, i)), out_shape))
                            for i in range(2)])
