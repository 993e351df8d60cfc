"""Graph clean-up passes: inline local functions, Constant value_* forms, small initializers as Constants,
Identity/Dropout removal, dead-code elimination, stale value_info."""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph import (DEFAULT_DOMAINS, SMALL_CONST, CanonicalizeReport, attr, const_node,
                    subgraph_inputs)


def inline_functions(model: onnx.ModelProto, rep: CanonicalizeReport) -> onnx.ModelProto:
    if len(model.functions) == 0:
        return model
    import onnx.inliner

    n = len(model.functions)
    model = onnx.inliner.inline_local_functions(model)
    rep.add("inline local functions", n)
    return model


def normalize_constants(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
    """Constant(value_float/floats/int/ints) -> Constant(value=tensor)."""
    for n in model.graph.node:
        if n.op_type != "Constant" or n.domain not in DEFAULT_DOMAINS:
            continue
        names = [a.name for a in n.attribute]
        if "value" in names:
            continue
        arr = None
        if "value_float" in names:
            arr = np.array(attr(n, "value_float"), np.float32)
        elif "value_floats" in names:
            arr = np.array(attr(n, "value_floats"), np.float32).reshape(-1)
        elif "value_int" in names:
            arr = np.array(attr(n, "value_int"), np.int64)
        elif "value_ints" in names:
            arr = np.array(attr(n, "value_ints"), np.int64).reshape(-1)
        if arr is None:
            continue  # value_string(s) / sparse_value: left alone
        del n.attribute[:]
        n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(arr, n.output[0])))
        rep.add("Constant value_* -> value tensor")


def small_initializers_to_constants(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
    g = model.graph
    input_names = {i.name for i in g.input}
    keep, new_nodes = [], []
    for t in g.initializer:
        small = False
        if t.name not in input_names and t.data_location != TensorProto.EXTERNAL:
            n = int(np.prod(t.dims)) if len(t.dims) else 1
            if t.data_type in (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL) and n <= SMALL_CONST:
                small = True
            elif t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16) and n == 1 \
                    and len(t.dims) <= 1:
                small = True
        if small:
            new_nodes.append(const_node(t.name, numpy_helper.to_array(t)))
        else:
            keep.append(t)
    if new_nodes:
        del g.initializer[:]
        g.initializer.extend(keep)
        nodes = new_nodes + list(g.node)
        del g.node[:]
        g.node.extend(nodes)
        rep.add("small initializer -> Constant", len(new_nodes))


def remove_identity_like(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
    """Drop Identity and inference Dropout nodes, rewiring their consumers."""
    g = model.graph
    graph_outputs = {o.name for o in g.output}
    graph_inputs = {i.name for i in g.input} | {t.name for t in g.initializer}
    consumers = collections.defaultdict(int)
    for n in g.node:
        for i in n.input:
            consumers[i] += 1
    for n in g.node:
        for i in subgraph_inputs(n):
            consumers[i] += 1

    renames: dict[str, str] = {}
    out_renames: dict[str, str] = {}
    kept = []
    for n in g.node:
        mask_out = n.output[1] if n.op_type == "Dropout" and len(n.output) > 1 else ""
        identity = n.domain in DEFAULT_DOMAINS and (
            n.op_type == "Identity"
            or (n.op_type == "Dropout" and (not mask_out or (consumers[mask_out] == 0
                                                             and mask_out not in graph_outputs)))
        )
        if identity and n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]:
            identity = False  # explicit training_mode input: leave it
        if not identity:
            kept.append(n)
            continue
        src, dst = n.input[0], n.output[0]
        src = renames.get(src, src)
        if dst in graph_outputs:
            # Keep the graph output's name: rename the producer's output instead, when possible.
            if src in graph_inputs or src in graph_outputs or src in out_renames.values():
                kept.append(n)
                continue
            out_renames[src] = dst
        else:
            renames[dst] = src
        rep.add(f"remove {n.op_type}")

    if not renames and not out_renames:
        return
    for n in kept:
        for k, i in enumerate(n.input):
            i = renames.get(i, i)
            n.input[k] = out_renames.get(i, i)
        for k, o in enumerate(n.output):
            n.output[k] = out_renames.get(o, o)
        _rename_in_subgraphs(n, {**renames, **out_renames})
    del g.node[:]
    g.node.extend(kept)
    for vi in g.value_info:
        if vi.name in out_renames:
            vi.name = out_renames[vi.name]


def _rename_in_subgraphs(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for sg in graphs:
            for n in sg.node:
                for k, i in enumerate(n.input):
                    n.input[k] = renames.get(i, i)
                _rename_in_subgraphs(n, renames)


def dce(model: onnx.ModelProto, rep: CanonicalizeReport) -> int:
    g = model.graph
    live = {o.name for o in g.output}
    kept = []
    for n in reversed(list(g.node)):
        if any(o in live for o in n.output if o):
            kept.append(n)
            live.update(i for i in n.input if i)
            live |= subgraph_inputs(n)
    removed = len(g.node) - len(kept)
    if removed:
        del g.node[:]
        g.node.extend(reversed(kept))
        rep.add("dead nodes removed", removed)
    inits = [t for t in g.initializer if t.name in live or t.name in {i.name for i in g.input}]
    if len(inits) != len(g.initializer):
        rep.add("unused initializers removed", len(g.initializer) - len(inits))
        del g.initializer[:]
        g.initializer.extend(inits)
    return removed


def prune_value_info(model: onnx.ModelProto) -> None:
    g = model.graph
    names = {o for n in g.node for o in n.output}
    vis = [vi for vi in g.value_info if vi.name in names]
    del g.value_info[:]
    g.value_info.extend(vis)
