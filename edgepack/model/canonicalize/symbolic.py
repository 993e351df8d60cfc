"""Symbolic evaluation of shape computations, one handler per ONNX op (`HANDLERS`).

A handler takes the running `folder.Folder` `f` and a node, and returns the node's outputs as arrays of
`Poly` (or plain ints/bools when fully known), or None when the value cannot be known at build time. The
values a handler reads come from `f.sym(name)` (symbolic, <= MAX_SYM elements), `f.consts` and
`f.shape_of(name)`; `f.compare` decides signs within the declared dim ranges. Exceptions mean "unknown" too
(the folder catches them).
"""

from __future__ import annotations

import numpy as np
import onnx

from .graph import INT_TYPES, attr
from .poly import Poly


def shape(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    shp = f.shape_of(ins[0])
    if shp is None:
        return None
    r = len(shp)
    start, end = attr(n, "start", 0), attr(n, "end", r)
    start = max(0, min(r, start + r if start < 0 else start))
    end = max(0, min(r, end + r if end < 0 else end))
    a = np.empty(max(0, end - start), dtype=object)
    for k in range(start, end):
        a[k - start] = shp[k]
    return [a]


def size(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    shp = f.shape_of(ins[0])
    if shp is None:
        return None
    p = Poly.const(1)
    for d in shp:
        p = p * d
    a = np.empty((), dtype=object)
    a[()] = p
    return [a]


def identity(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    return [f.sym(ins[0])]


def cast(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    to = attr(n, "to")
    x = f.sym(ins[0])
    if x is not None and to in INT_TYPES and f.is_int(ins[0]):
        return [x]
    return None


def gather(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x, idx = f.sym(ins[0]), f.consts.get(ins[1])
    if x is None or idx is None:
        return None
    axis = attr(n, "axis", 0)
    return [np.take(x, idx.astype(np.int64), axis=axis, mode="wrap")]


def unsqueeze(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x = f.sym(ins[0])
    axes = attr(n, "axes") if f.opset < 13 else (
        f.consts.get(ins[1]).tolist() if len(ins) > 1 and ins[1] in f.consts else None)
    if x is None or axes is None:
        return None
    r = x.ndim + len(axes)
    axes = sorted(a + r if a < 0 else a for a in axes)
    for a in axes:
        x = np.expand_dims(x, a)
    return [x]


def squeeze(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x = f.sym(ins[0])
    if x is None:
        return None
    if f.opset < 13:
        axes = attr(n, "axes")
    else:
        axes = f.consts[ins[1]].tolist() if len(ins) > 1 and ins[1] else None
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    return [np.squeeze(x, axis=tuple(a + x.ndim if a < 0 else a for a in axes))]


def reshape_flatten(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x = f.sym(ins[0])
    if x is None:
        return None
    if n.op_type == "Flatten":
        ax = attr(n, "axis", 1)
        ax = ax + x.ndim if ax < 0 else ax
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    tgt = f.consts.get(ins[1])
    if tgt is None:
        return None
    tgt = [x.shape[k] if (d == 0 and not attr(n, "allowzero", 0)) else int(d)
           for k, d in enumerate(tgt.tolist())]
    return [x.reshape(tgt)]


def concat(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    parts = [f.sym(i) for i in ins]
    if any(p is None for p in parts):
        return None
    return [np.concatenate(parts, axis=attr(n, "axis", 0))]


def slice_(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x = f.sym(ins[0])
    if x is None or x.ndim != 1:
        return None
    vals = [f.consts.get(i) if i else None for i in ins[1:5]]
    if f.opset < 10:
        starts, ends = attr(n, "starts"), attr(n, "ends")
        axes, steps = attr(n, "axes", [0]), [1]
    else:
        if vals[0] is None or vals[1] is None:
            return None
        starts, ends = vals[0].tolist(), vals[1].tolist()
        axes = vals[2].tolist() if len(vals) > 2 and vals[2] is not None else [0]
        steps = vals[3].tolist() if len(vals) > 3 and vals[3] is not None else [1]
    if axes not in ([0], [-1]) or len(starts) != 1:
        return None
    e = ends[0]
    e = None if (steps[0] < 0 and e < -x.shape[0]) else min(e, 2**62)
    return [x[slice(starts[0], e, steps[0])]]


def arithmetic(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    xs = [f.sym(i) for i in ins]
    if any(x is None for x in xs) or not all(f.is_int(i) for i in ins):
        return None
    if n.op_type == "Add":
        return [xs[0] + xs[1]]
    if n.op_type == "Sub":
        return [xs[0] - xs[1]]
    if n.op_type == "Mul":
        return [xs[0] * xs[1]]
    if n.op_type == "Div":
        a, b = np.broadcast_arrays(xs[0], xs[1])
        out = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            q = a[idx].exact_div(b[idx])
            if q is None:
                return None
            out[idx] = q
        return [out]
    # Max/Min: only when decidable
    arrs = np.broadcast_arrays(*xs)
    out = np.empty(arrs[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        vals = [a[idx] for a in arrs]
        best = vals[0]
        for v in vals[1:]:
            c = f.compare(v, best)
            if c is None:
                return None
            if (n.op_type == "Max" and c > 0) or (n.op_type == "Min" and c < 0):
                best = v
        out[idx] = best
    return [out]


def neg(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    x = f.sym(ins[0])
    return [-x] if x is not None else None


def equal(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    xs = [f.sym(i) for i in ins]
    if any(x is None for x in xs):
        return None
    a, b = np.broadcast_arrays(xs[0], xs[1])
    out = np.empty(a.shape, dtype=bool)
    for idx in np.ndindex(a.shape):
        c = f.compare(a[idx], b[idx])
        if c is None:
            return None
        out[idx] = c == 0
    return [out]  # a bool array: fully known, folded by the caller


def where(f, n: onnx.NodeProto) -> list | None:
    ins = list(n.input)
    cond = f.consts.get(ins[0])
    xs = [f.sym(ins[1]), f.sym(ins[2])]
    if cond is None or any(x is None for x in xs):
        return None
    return [np.where(cond, xs[0], xs[1])]


HANDLERS = {
    "Shape": shape,
    "Size": size,
    "Identity": identity,
    "Cast": cast,
    "Gather": gather,
    "Unsqueeze": unsqueeze,
    "Squeeze": squeeze,
    "Reshape": reshape_flatten,
    "Flatten": reshape_flatten,
    "Concat": concat,
    "Slice": slice_,
    "Add": arithmetic,
    "Sub": arithmetic,
    "Mul": arithmetic,
    "Div": arithmetic,
    "Max": arithmetic,
    "Min": arithmetic,
    "Neg": neg,
    "Equal": equal,
    "Where": where,
}
