"""The float model a QDQ model was quantised from, for the memory report's "against the float build" (issue 14).

onnxruntime's `quantize_static` (QDQ format) only inserts QuantizeLinear -> DequantizeLinear pairs on
activations and DequantizeLinear on constant weights. Undoing that gives the float model back, with the same
graph, dims and operators: every DQ(Q(x)) becomes x, and every DQ of a constant a float constant. Lowering it
(model/frontend.lower_model) gives the float build's arena and weight bytes without building a second package.

A model with other quantised ops (QOperator QLinearConv, MatMulInteger, DynamicQuantizeLinear, int8 graph
inputs) has no such twin: `float_twin` returns None and the report says nothing against float.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .ops import ONNX_DOMAINS

_QUANT_TYPES = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT4,
                TensorProto.UINT4)


def float_twin(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model without its QDQ pairs and with dequantised constant weights; None when it is not a QDQ model
    (nothing to undo) or holds quantised ops this cannot undo."""
    g = model.graph
    if any(t.type.tensor_type.elem_type in _QUANT_TYPES for t in (*g.input, *g.output)):
        return None
    consts = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    alias: dict[str, str] = {}  # a DQ's output -> the float tensor it stands for
    dequantised: list[onnx.TensorProto] = []
    for n in g.node:
        if n.op_type != "DequantizeLinear" or n.domain not in ONNX_DOMAINS:
            continue
        src = producer.get(n.input[0])
        if src is not None and src.op_type == "QuantizeLinear" and src.domain in ONNX_DOMAINS:
            alias[n.output[0]] = src.input[0]
        elif n.input[0] in consts:
            t = _dequantize(n, consts)
            if t is None:
                return None
            dequantised.append(t)
        else:
            return None
    if not alias and not dequantised:
        return None
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    outputs = {o.name for o in g.output}
    nodes = [n for n in twin.graph.node if not (n.op_type == "DequantizeLinear" and n.domain in ONNX_DOMAINS)]
    nodes += [helper.make_node("Identity", [alias[o]], [o]) for o in outputs if o in alias]  # keep the names
    for n in nodes:
        for k, i in enumerate(n.input):
            n.input[k] = alias.get(i, i)
    used = {i for n in nodes for i in n.input} | outputs
    nodes = [n for n in nodes if n.op_type != "QuantizeLinear" or n.output[0] in used]
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") or n.domain not in ONNX_DOMAINS for n in nodes):
        return None
    del twin.graph.node[:]
    twin.graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    keep = [t for t in twin.graph.initializer if t.name in used]
    del twin.graph.initializer[:]
    twin.graph.initializer.extend(keep + dequantised)
    del twin.graph.value_info[:]  # the int8 tensors' types no longer hold
    return twin


def _dequantize(n: onnx.NodeProto, consts: dict[str, onnx.TensorProto]) -> onnx.TensorProto | None:
    """A constant DequantizeLinear's output as a float32 initializer (per tensor or per axis)."""
    if any(i and i not in consts for i in n.input[1:]):
        return None
    x = numpy_helper.to_array(consts[n.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(consts[n.input[1]]).astype(np.float64)
    zp = numpy_helper.to_array(consts[n.input[2]]).astype(np.float64) if len(n.input) > 2 and n.input[2] else 0.0
    if np.ndim(scale) > 1 or any(a.name == "block_size" and a.i for a in n.attribute):
        return None
    if np.ndim(scale) == 1 and x.ndim:
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1) % x.ndim
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), np.reshape(zp, shape) if np.ndim(zp) else zp
    return numpy_helper.from_array(((x - zp) * scale).astype(np.float32), n.output[0])
