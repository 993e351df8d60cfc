"""What the canonicalisation passes share: limits, the report, and small ONNX graph helpers."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Constants up to this many elements become ``Constant`` nodes (Relax consts), larger ones initializers.
SMALL_CONST = 64
#: Largest symbolic (shape-like) tensor tracked, in elements.
MAX_SYM = 64
#: Constant folding may produce up to this many elements (or as many as its inputs hold).
FOLD_LIMIT = 1 << 16
#: Largest ``arange`` constant written for a ``Range`` rewrite.
MAX_RANGE = 1 << 20

INT_TYPES = {
    TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8,
    TensorProto.UINT64, TensorProto.UINT32, TensorProto.UINT16, TensorProto.UINT8,
}
# Never folded: non-deterministic or with side effects / sequence outputs.
NO_FOLD = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SplitToSequence", "Optional",
}
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class CanonicalizeReport:
    """What ``canonicalize`` did: rewrite name -> count, plus notes on what it left alone."""

    counts: collections.Counter = field(default_factory=collections.Counter)
    notes: list[str] = field(default_factory=list)

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] += n

    def __str__(self) -> str:
        parts = [f"{k}: {v}" for k, v in sorted(self.counts.items())]
        return ", ".join(parts) + ("; " + "; ".join(self.notes) if self.notes else "")


def opset_of(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return o.version
    return 1


def subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Names that a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    names: set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                names.update(i for i in n.input if i)
                names |= subgraph_inputs(n)
    return names


def has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def set_attr(node: onnx.NodeProto, name: str, value) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


class Names:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.used = {t.name for t in g.initializer} | {i.name for i in g.input} | {o.name for o in g.output}
        for n in g.node:
            self.used.update(n.input)
            self.used.update(n.output)
            self.used.add(n.name)

    def fresh(self, base: str) -> str:
        base = "canon_" + base.replace("/", "_").replace(":", "_")
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def const_node(name: str, arr: np.ndarray, node_name: str | None = None) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=node_name or name + "_Constant",
                            value=numpy_helper.from_array(np.asarray(arr), name))
