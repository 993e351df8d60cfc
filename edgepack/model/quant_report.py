"""How each quantised node of a model runs, for `edgepack inspect` (no TVM import: inspect stays fast).

One `Lowering` per quantised op in `LOWERINGS`; model/quant.py holds the converters these describe. An
integer kernel (the later steps of issue 14) reports itself by replacing its op's entry, or, for a float op
between DequantizeLinear and QuantizeLinear in a QDQ model, by adding a `QDQ_PATTERNS` entry for that op.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .ops import MS_DOMAIN, ONNX_DOMAINS, op_label

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
    "QLinearGlobalAveragePool": Lowering(INT_ACC, "int32 sum, requantised in float32"),
    "QLinearAdd": Lowering(FLOAT, _FALLBACK),
    "QLinearMul": Lowering(FLOAT, _FALLBACK),
    "QLinearSigmoid": Lowering(FLOAT, _FALLBACK),
    "QLinearLeakyRelu": Lowering(FLOAT, _FALLBACK),
}


# A float op between DequantizeLinear and QuantizeLinear that runs as integer code: op -> its Lowering.
# Empty in step 1: every such op runs in float, as onnxruntime runs a QDQ model with optimisations off.
QDQ_PATTERNS: dict[str, Lowering] = {}


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
    out = []
    quantised: set[str] = set()  # int8/uint8 tensors: quantised outputs and data movement on them
    for k, n in enumerate(g.node):
        name = n.name or f"#{k}"
        op = op_label(n.domain, n.op_type)
        if n.op_type in LOWERINGS and n.domain in (*ONNX_DOMAINS, MS_DOMAIN):
            if n.op_type not in ("DequantizeLinear", "MatMulInteger", "ConvInteger"):
                quantised.update(n.output[:1])
            out.append(NodeReport(name, op, LOWERINGS[n.op_type]))
            continue
        if n.op_type in _ON_INTEGERS and n.input and n.input[0] in quantised:
            quantised.update(n.output[:1])
            out.append(NodeReport(name, op, Lowering(INTEGER, "on the quantised values")))
            continue
        fed = any(getattr(producer.get(i), "op_type", None) == "DequantizeLinear" for i in n.input)
        feeds = any(c.op_type == "QuantizeLinear" for o in n.output for c in consumers.get(o, []))
        if fed or feeds:
            low = QDQ_PATTERNS.get(n.op_type) if fed and feeds else None
            out.append(NodeReport(name, op, low or Lowering(FLOAT, _FALLBACK if fed and feeds
                                                            else "float op on dequantized inputs" if fed
                                                            else "float op, output quantized")))
    return out


def summary(reports: list[NodeReport]) -> dict[str, int]:
    """Nodes per kind (INTEGER, INT_ACC, FLOAT, QDQ)."""
    out: dict[str, int] = {}
    for r in reports:
        out[r.lowering.kind] = out.get(r.lowering.kind, 0) + 1
    return out
