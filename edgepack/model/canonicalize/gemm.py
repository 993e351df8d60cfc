"""Gemm(A, W, transB=1) on a weight: the weight stored transposed, so no transpose kernel runs per call."""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import numpy_helper

from .graph import DEFAULT_DOMAINS, CanonicalizeReport, Names, attr, set_attr


def pretranspose_gemm_weights(model: onnx.ModelProto, rep: CanonicalizeReport, names: Names) -> None:
    """Gemm(A, W, transB=1) with W a weight -> Gemm(A, W^T, transB=0), W^T stored. Also through a
    DequantizeLinear of a 2-D quantized weight (the int8 tensor is transposed, the per-channel axis
    flipped), so no transpose kernel runs per call."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    inputs = {i.name for i in g.input}
    producer = {o: n for n in g.node for o in n.output}
    users = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            users[i].append(n)
    graph_outputs = {o.name for o in g.output}

    def all_gemm_transb(name: str) -> bool:
        us = users[name]
        return name not in graph_outputs and bool(us) and all(
            u.op_type == "Gemm" and len(u.input) > 1 and u.input[1] == name and u.input[0] != name
            and attr(u, "transB", 0) == 1 for u in us)

    for n in list(g.node):
        if n.op_type != "Gemm" or n.domain not in DEFAULT_DOMAINS or len(n.input) < 2:
            continue
        b = n.input[1]
        if attr(n, "transB", 0) != 1 or b in inputs:
            continue
        if b in inits:
            w = numpy_helper.to_array(inits[b])
            if w.ndim != 2:
                continue
            if all_gemm_transb(b):  # only these Gemms read it: transpose in place, keep the name
                inits[b].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w.T), b))
                for u in users[b]:
                    set_attr(u, "transB", 0)
                    rep.add("Gemm transB weight stored transposed")
                continue
            new = names.fresh(b + "_T")
            g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.T), new))
            inits[new] = g.initializer[-1]
            for u in users[b]:  # every Gemm reading it with transB=1 shares the transposed copy
                if u.op_type == "Gemm" and len(u.input) > 1 and u.input[1] == b and attr(u, "transB", 0) == 1:
                    u.input[1] = new
                    set_attr(u, "transB", 0)
                    rep.add("Gemm transB weight stored transposed")
            continue
        dq = producer.get(b)
        if (dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in DEFAULT_DOMAINS
                or dq.input[0] not in inits or dq.input[0] in inputs or len(users[dq.input[0]]) != 1
                or not all_gemm_transb(b) or attr(dq, "block_size", 0)):
            continue
        q = numpy_helper.to_array(inits[dq.input[0]])
        if q.ndim != 2:
            continue
        # only this DequantizeLinear reads it: transpose in place, keep the name
        inits[dq.input[0]].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q.T), dq.input[0]))
        axis = attr(dq, "axis", 1)
        set_attr(dq, "axis", 1 - (axis + 2 if axis < 0 else axis))
        for u in users[b]:
            set_attr(u, "transB", 0)
            rep.add("Gemm transB weight stored transposed (through DequantizeLinear)")
