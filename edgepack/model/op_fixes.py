"""Single ONNX nodes that TVM 0.27's importer gets wrong, rewritten into nodes it gets right, or refused.

A wrong value that builds is the worst outcome, so every attribute the importer ignores is either rewritten
here or refused with one line that names the node:
- IsInf: detect_positive / detect_negative are ignored (both signs are always reported) -> IsInf & sign test.
- Resize: the importer turns `scales` into output sizes and then interpolates by the size ratio, ignores
  `axes`, `keep_aspect_ratio_policy` and `antialias`. Scales become sizes here when that changes nothing
  (the ratio equals the scale); `axes` and `keep_aspect_ratio_policy` become full-rank sizes when the input
  shape is known; antialias and any scale the size ratio cannot express are refused.
Runs after canonicalize (constant arguments are initializers by then).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import UnsupportedOpsError


def fix_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    shapes = _static_shapes(m)
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consts |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node
               if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"}
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        if n.op_type == "IsInf":
            nodes += _is_inf(n)
        elif n.op_type == "Resize":
            nodes.append(_resize(n, g, consts, shapes))
        else:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    return m


def _attr(n: onnx.NodeProto, name: str, default):
    a = next((a for a in n.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


def _is_inf(n: onnx.NodeProto) -> list[onnx.NodeProto]:
    pos, neg = _attr(n, "detect_positive", 1), _attr(n, "detect_negative", 1)
    if pos and neg:
        return [n]
    x, y, inf = n.input[0], n.output[0], f"{n.output[0]}_isinf"
    zero = f"{n.output[0]}_zero"
    nodes = [helper.make_node("IsInf", [x], [inf], name=f"{n.name}_isinf"),
             helper.make_node("Constant", [], [zero], name=f"{n.name}_zero",
                              value=numpy_helper.from_array(np.zeros((), np.float32)))]
    zero_like = f"{n.output[0]}_zero_like"
    nodes.append(helper.make_node("CastLike", [zero, x], [zero_like], name=f"{n.name}_castlike"))
    if not pos and not neg:  # nothing detected: all false, same shape
        return nodes + [helper.make_node("Xor", [inf, inf], [y], name=n.name)]
    sign = f"{n.output[0]}_sign"
    nodes.append(helper.make_node("Greater" if pos else "Less", [x, zero_like], [sign], name=f"{n.name}_sign"))
    return nodes + [helper.make_node("And", [inf, sign], [y], name=n.name)]


def _static_shapes(m: onnx.ModelProto) -> dict[str, list[int | None]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
    except Exception:  # a model shape inference cannot read: nothing is known, rewrites needing shapes refuse
        return {}
    out = {}
    for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return out


def _resize(n, g, consts, shapes) -> onnx.NodeProto:
    def refuse(why: str) -> UnsupportedOpsError:
        return UnsupportedOpsError(f"Resize node {n.name}: {why}; edgepack would compute it wrongly, so it refuses it")

    if _attr(n, "antialias", 0):
        raise refuse("antialias=1 is not supported")
    policy = _attr(n, "keep_aspect_ratio_policy", b"stretch").decode()
    axes = _attr(n, "axes", None)
    scales = consts.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    sizes = consts.get(n.input[3]) if len(n.input) > 3 and n.input[3] else None
    if (len(n.input) > 2 and n.input[2] and scales is None) or (len(n.input) > 3 and n.input[3] and sizes is None):
        raise refuse("scales and sizes must be constants")
    if scales is not None and scales.size == 0:
        scales = None
    shape = shapes.get(n.input[0])
    if axes is None and policy == "stretch" and (sizes is not None or _scales_exact(scales, shape)):
        return n
    if shape is None or any(d is None for d in shape):
        raise refuse("scales other than whole factors, axes and keep_aspect_ratio_policy need a static input shape")
    rank = len(shape)
    axes = [a % rank for a in (axes or range(rank))]
    if sizes is not None:
        full = _sizes_with_policy(shape, axes, [int(s) for s in sizes], policy)
    else:
        full = list(shape)
        for a, s in zip(axes, scales):
            full[a] = int(math.floor(shape[a] * float(s)))
        per_axis = dict(zip(axes, (float(s) for s in scales)))
        if any(full[a] != shape[a] * per_axis[a] for a in axes):
            raise refuse(f"scales {list(map(float, scales))} differ from the output/input size ratio "
                         f"({[f'{full[a]}/{shape[a]}' for a in axes]}); give sizes instead")
    name = f"{n.output[0]}_sizes"
    g.initializer.append(numpy_helper.from_array(np.array(full, np.int64), name))
    out = helper.make_node("Resize", [n.input[0], _full_roi(n, g, consts, axes, rank), "", name],
                           list(n.output), name=n.name)
    out.attribute.extend(a for a in n.attribute if a.name not in ("axes", "keep_aspect_ratio_policy"))
    return out


def _full_roi(n, g, consts, axes: list[int], rank: int) -> str:
    """The roi input over every axis (ONNX gives it for `axes` only when axes is set)."""
    roi = consts.get(n.input[1]) if len(n.input) > 1 and n.input[1] else None
    if roi is None or roi.size in (0, 2 * rank):
        return n.input[1] if len(n.input) > 1 else ""
    full = np.array([0.0] * rank + [1.0] * rank, np.float32)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = roi[i], roi[len(axes) + i]
    name = f"{n.output[0]}_roi"
    g.initializer.append(numpy_helper.from_array(full.astype(roi.dtype), name))
    return name


def _scales_exact(scales, shape) -> bool:
    """Whole-number scales map every output coordinate as the size ratio does; other scales only when the
    input shape is known and the ratio comes out equal."""
    if scales is None:
        return False
    if all(float(s) == int(s) and s >= 1 for s in scales):
        return True
    if shape is None or any(d is None for d in shape) or len(shape) != len(scales):
        return False
    return all(math.floor(d * float(s)) == d * float(s) for d, s in zip(shape, scales))


def _sizes_with_policy(shape, axes, sizes, policy: str) -> list[int]:
    full = list(shape)
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            full[a] = s
        return full
    ratios = [s / shape[a] for a, s in zip(axes, sizes)]
    r = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:  # ONNX: round half up of ratio * in (keep_aspect_ratio_policy)
        full[a] = int(math.floor(r * shape[a] + 0.5))
    return full
