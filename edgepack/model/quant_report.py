"""How each quantised node of a model runs, for `edgepack inspect` (no TVM import: inspect stays fast).

One `Lowering` per quantised op in `LOWERINGS`; model/quant.py holds the converters these describe. Which
nodes become integer kernels with a fixed-point epilogue is decided by model/qdq_fuse.py's rewrite, which this
report runs (it is plain ONNX, no TVM): a QDQ layer it fuses, or a QLinear op it turns into an edgepack
integer op, is reported as INTEGER; the rest as their `LOWERINGS` entry says.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .ops import MS_DOMAIN, ONNX_DOMAINS, op_label
from .qdq_fuse import EP_DOMAIN, MOVES, fusions, integer_ops

# -- how a quantised node runs ----------------------------------------------------------------------------

INTEGER = "integer"  # integer arithmetic end to end
INT_ACC = "int32 accumulation"  # integer products and sums; the requantisation in float32
FLOAT = "float fallback"  # dequantize -> float op -> quantize
QDQ = "quantize/dequantize"  # a QuantizeLinear / DequantizeLinear boundary


@dataclass(frozen=True)
class Lowering:
    kind: str  # INTEGER, INT_ACC, FLOAT or QDQ
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.detail})" if self.detail else self.kind


_REQUANT = "requantised in float32 as onnxruntime does"
_FALLBACK = "dequantize -> float op -> quantize"
LOWERINGS: dict[str, Lowering] = {
    "QuantizeLinear": Lowering(QDQ, "round half to even, saturate"),
    "DequantizeLinear": Lowering(QDQ, "(x - zero point) * scale in float32"),
    "DynamicQuantizeLinear": Lowering(QDQ, "scale and zero point from the run-time min/max"),
    "MatMulInteger": Lowering(INTEGER, "int32 in, int32 out"),
    "ConvInteger": Lowering(INTEGER, "int32 in, int32 out"),
    "QLinearConv": Lowering(INT_ACC, _REQUANT),
    "QLinearMatMul": Lowering(INT_ACC, _REQUANT),
    "QGemm": Lowering(INT_ACC, _REQUANT),
    "QLinearGlobalAveragePool": Lowering(INTEGER, "int32 sum, fixed-point requantisation"),
    "QLinearAdd": Lowering(FLOAT, _FALLBACK),
    "QLinearMul": Lowering(FLOAT, _FALLBACK),
    "QLinearSigmoid": Lowering(FLOAT, _FALLBACK),
    "QLinearLeakyRelu": Lowering(FLOAT, _FALLBACK),
}


FIXED_POINT = Lowering(INTEGER, "int8 x int8 -> int32, fixed-point requantisation")
ON_INTEGERS = Lowering(INTEGER, "on the quantised values")


# ops that move or select values without arithmetic: on int8 tensors they run on the integers as they are
_ON_INTEGERS = frozenset({"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Slice",
                          "Gather", "Split", "Identity", "GlobalMaxPool", "Pad", "Expand", "Tile"})


@dataclass(frozen=True)
class NodeReport:
    node: str  # the model's node name (or #index)
    op: str
    lowering: Lowering


def node_report(model: onnx.ModelProto) -> list[NodeReport]:
    """How every quantised node runs: the quantised ops themselves, and in QDQ models each float op whose
    inputs are dequantised or whose output is quantised (it runs in float between them)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    integer = _integer_outputs(model)
    found = fusions(model)
    fused = {n.output[0]: f for f in found for n in (f.op, f.act) if n is not None}
    folded = {f.q.output[0] for f in found}
    out = []
    quantised: set[str] = set()  # int8/uint8 tensors: quantised outputs and data movement on them
    for k, n in enumerate(g.node):
        name = n.name or f"#{k}"
        op = op_label(n.domain, n.op_type)
        if n.op_type in LOWERINGS and n.domain in (*ONNX_DOMAINS, MS_DOMAIN):
            if n.op_type not in ("DequantizeLinear", "MatMulInteger", "ConvInteger"):
                quantised.update(n.output[:1])
            low = Lowering(QDQ, "folded into the integer op before it") if n.output[0] in folded else \
                FIXED_POINT if n.output[0] in integer else LOWERINGS[n.op_type]
            out.append(NodeReport(name, op, low))
            continue
        if n.output and n.output[0] in fused:
            f = fused[n.output[0]]
            low = ON_INTEGERS if f.op.op_type in MOVES else \
                LOWERINGS["QLinearGlobalAveragePool"] if f.op.op_type == "GlobalAveragePool" else \
                FIXED_POINT if f.q.output[0] in integer else Lowering(INT_ACC, _REQUANT)
            out.append(NodeReport(name, op, low if n is f.op else Lowering(INTEGER, "a clamp in the epilogue")))
            continue
        if n.op_type in _ON_INTEGERS and n.input and n.input[0] in quantised:
            quantised.update(n.output[:1])
            out.append(NodeReport(name, op, ON_INTEGERS))
            continue
        fed = any(getattr(producer.get(i), "op_type", None) == "DequantizeLinear" for i in n.input)
        feeds = any(c.op_type == "QuantizeLinear" for o in n.output for c in consumers.get(o, []))
        if fed or feeds:
            out.append(NodeReport(name, op, Lowering(FLOAT, _FALLBACK if fed and feeds
                                                     else "float op on dequantized inputs" if fed
                                                     else "float op, output quantized")))
    return out


def _integer_outputs(model: onnx.ModelProto) -> set[str]:
    """Outputs of the integer kernels qdq_fuse makes, under the names of the nodes they replace: a QLinear
    op's output, or a fused layer's QuantizeLinear output."""
    outs = {n.output[0] for n in integer_ops(model).graph.node if n.domain == EP_DOMAIN}
    return outs | {o.removesuffix("_ep_unclamped") for o in outs}


def summary(reports: list[NodeReport]) -> dict[str, int]:
    """Nodes per kind (INTEGER, INT_ACC, FLOAT, QDQ)."""
    out: dict[str, int] = {}
    for r in reports:
        out[r.lowering.kind] = out.get(r.lowering.kind, 0) + 1
    return out
