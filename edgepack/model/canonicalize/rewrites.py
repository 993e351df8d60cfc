"""Rewrites of nodes whose shape operand is symbolic, one per ONNX op (`REWRITES`): Reshape gets a constant
target (0/-1) or one rebuilt from graph-input dims, Range with a symbolic limit becomes a Slice of a constant
arange, Expand/ConstantOfShape/Slice/Tile shape operands are rebuilt as Concat of constants and
Shape(graph input) slices. Each takes the running `folder.Folder` `f`, the node and the output node list,
appends its replacement nodes and returns True, or returns False (nothing appended) to keep the node.
"""

from __future__ import annotations

from functools import partial
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper

from .graph import MAX_RANGE, attr, const_node, set_attr
from .poly import Poly, all_const, to_int_array


def reshape(f, n, out) -> bool:
    if len(n.input) < 2 or n.input[1] in f.consts:
        return False
    vec = f.sym(n.input[1])
    if vec is None or vec.ndim != 1:
        return False
    allowzero = attr(n, "allowzero", 0)
    in_shape = f.shape_of(n.input[0])
    tgt, n_infer = [], 0
    for k, p in enumerate(vec):
        if p.is_const():
            c = p.value
            if c == 0 and allowzero:
                tgt = None
                break
            if c == -1:
                n_infer += 1
            tgt.append(c)
        elif in_shape is not None and k < len(in_shape) and in_shape[k] == p:
            tgt.append(0)
        else:
            tgt.append(-1)
            n_infer += 1
    new = n.__class__()
    new.CopyFrom(n)
    if tgt is not None and n_infer <= 1:
        nm = f.names.fresh(n.input[1] + "_const")
        out.append(const_node(nm, np.array(tgt, np.int64)))
        new.input[1] = nm
        if allowzero:
            set_attr(new, "allowzero", 0)
        out.append(new)
        f.rep.add("Reshape shape -> constant (0/-1)")
        return True
    if n.input[1].startswith("canon_"):
        return False
    nm = f.materialize(vec, n.input[1], out)
    if nm is None:
        return False
    new.input[1] = nm
    out.append(new)
    f.rep.add("Reshape shape -> Concat(Shape(input) slices)")
    return True


def range_(f, n, out) -> bool:
    if not all(i in f.consts for i in (n.input[0], n.input[2])) or n.input[1] in f.consts:
        return False
    start, delta = f.consts[n.input[0]], f.consts[n.input[2]]
    if not (np.issubdtype(start.dtype, np.integer) and np.issubdtype(delta.dtype, np.integer)):
        f.rep.notes.append(f"Range {n.name}: float Range with a symbolic limit left alone")
        return False
    s, d = int(start.reshape(())), int(delta.reshape(()))
    lim = f.sym(n.input[1])
    if lim is None or lim.size != 1 or s < 0 or d <= 0:
        f.rep.notes.append(f"Range {n.name}: limit not a known shape expression or start<0/delta<=0; "
                              "left alone (TVM imports it data-dependently)")
        return False
    p = lim.reshape(())[()]
    ub = p.bound(f.ranges, upper=True)
    if ub is None:
        f.rep.notes.append(f"Range {n.name}: limit {p!r} has no upper bound in dim_ranges; left alone")
        return False
    ub = max(ub, s)
    if ub > MAX_RANGE:
        return False
    base = n.output[0]
    ar = f.names.fresh(base + "_arange")
    out.append(const_node(ar, np.arange(0, ub, dtype=start.dtype)))
    ends = f.materialize(np.array([p], dtype=object), base + "_end", out)
    if ends is None:
        # generic: the limit tensor itself, as int64 [1]
        lim_name = n.input[1]
        if f.elem.get(lim_name, TensorProto.INT64) != TensorProto.INT64:
            c = f.names.fresh(base + "_lim64")
            out.append(helper.make_node("Cast", [lim_name], [c], name=c + "_Cast", to=TensorProto.INT64))
            lim_name = c
        one = f.names.fresh(base + "_one")
        out.append(const_node(one, np.array([1], np.int64)))
        ends = f.names.fresh(base + "_end")
        out.append(helper.make_node("Reshape", [lim_name, one], [ends], name=ends + "_Reshape"))
    st, ax, sp = (f.names.fresh(base + x) for x in ("_start", "_axis", "_step"))
    out += [const_node(st, np.array([s], np.int64)), const_node(ax, np.array([0], np.int64)),
            const_node(sp, np.array([d], np.int64))]
    out.append(helper.make_node("Slice", [ar, st, ends, ax, sp], [n.output[0]], name=(n.name or base) + "_asSlice"))
    f.rep.add("Range(symbolic limit) -> Slice(arange(0, upper bound))")
    return True


def expand(f, n, out) -> bool:
    if n.input[1] in f.consts:
        return False
    vec = f.sym(n.input[1])
    if vec is None or vec.ndim != 1:
        return False
    in_shape = f.shape_of(n.input[0])
    vec = vec.copy()
    if in_shape is not None:
        off = len(vec) - len(in_shape)
        for j, p in enumerate(vec):
            i = j - off
            if not p.is_const() and i >= 0 and in_shape[i] == p:
                vec[j] = Poly.const(1)
    new = onnx.NodeProto()
    new.CopyFrom(n)
    if all_const(vec):
        nm = f.names.fresh(n.input[1] + "_const")
        out.append(const_node(nm, to_int_array(vec, np.int64)))
        f.rep.add("Expand shape -> constant")
    else:
        if n.input[1].startswith("canon_"):
            return False
        nm = f.materialize(vec, n.input[1], out)
        if nm is None:
            return False
        f.rep.add("Expand shape -> Concat(Shape(input) slices)")
    new.input[1] = nm
    out.append(new)
    return True


def shape_operand(f, n, out, positions: Iterable[int]) -> bool:
    """ConstantOfShape / Slice / Tile: rebuild symbolic shape operands from graph-input dims."""
    new = onnx.NodeProto()
    new.CopyFrom(n)
    changed = False
    for k in positions:
        if k >= len(n.input) or not n.input[k] or n.input[k] in f.consts or n.input[k].startswith("canon_"):
            continue
        vec = f.sym(n.input[k])
        if vec is None or vec.ndim != 1:
            continue
        nm = f.materialize(vec, n.input[k], out)
        if nm is None:
            continue
        new.input[k] = nm
        changed = True
    if changed:
        out.append(new)
        f.rep.add(f"{n.op_type} shape operand -> Concat(Shape(input) slices)")
    return changed


# op -> (lowest opset the rewrite applies from, rewrite)
REWRITES = {
    "Reshape": (0, reshape),
    "Range": (11, range_),
    "Expand": (0, expand),
    "ConstantOfShape": (0, partial(shape_operand, positions=[0])),
    "Slice": (10, partial(shape_operand, positions=[1, 2])),
    "Tile": (0, partial(shape_operand, positions=[1])),
}
