"""Rewrite ONNX exports into a form TVM 0.27's Relax frontend imports AND lowers to a static call sequence.

Real exporters (torch.onnx TorchScript and dynamo, onnxscript, ORT's quantizer) write graphs that
``tvm.relax.frontend.onnx.from_onnx`` either rejects or imports into data-dependent Relax code
(``R.tensor_to_shape`` + ``match_cast`` on a fresh variable, i.e. a ``vm.builtin`` shape op at run
time). ``canonicalize`` rewrites such graphs, keeping their inputs, outputs and numerics:

* **Constant forms**: ``Constant`` nodes written with ``value_int(s)`` / ``value_float(s)`` (the dynamo
  exporter does) become ``value`` tensors (TVM: "ValueError: no value in Constant").
* **Small initializers -> Constant nodes**: integer/bool initializers of <= 64 elements and float
  scalars (shape vectors, axes, fill values the dynamo exporter stores as initializers). With
  ``keep_params_in_input=True`` TVM would otherwise turn each into a run-time function input.
* **Identity / Dropout removal** (inference: Dropout is the identity).
* **Constant folding**: every node whose inputs are all constants is evaluated with
  ``onnx.reference.ReferenceEvaluator`` (e.g. ``Transpose`` of a weight). Small results become
  ``Constant`` nodes, large ones initializers (function inputs, like the other weights).
* **Symbolic shape folding**: the values of shape tensors (``Shape -> Gather -> Unsqueeze -> Concat``,
  ``Cast``, ``Add``/``Mul``/``Div``, ``Equal``/``Where`` ...) are evaluated as polynomials in the graph's
  dim_params, on top of ONNX shape inference (``data_prop=True``). Then
    - a tensor whose value is fully known becomes a ``Constant`` (e.g. ``Shape(x)[2]``);
    - ``Reshape`` gets a constant target, using 0 (copy the input's dim) and at most one -1;
    - ``Range(start, limit, delta)`` with constant start >= 0, delta > 0 and a symbolic limit becomes
      ``Slice(arange(0, UB), start, limit, step=delta)`` where UB is the upper bound of ``limit`` from
      ``dim_ranges``; ``limit`` is read straight off a graph input with ``Shape(start, end)``. TVM imports
      ``Range`` with a symbolic limit as ``tensor_to_shape`` + a fresh shape variable (data dependent),
      the ``Slice`` form as ``strided_slice`` with the symbolic extent;
    - the remaining symbolic shape operands of ``Reshape``/``Expand``/``ConstantOfShape``/``Slice``/
      ``Tile`` are rebuilt as ``Concat`` of constants and ``Shape(graph_input, start=k, end=k+1)``
      slices (the form TVM turns into a symbolic ``R.shape``); ``Expand`` targets first get 1 wherever
      the input already has that dim.
* **DequantizeLinear** on int8/uint8 initializers is kept in the graph by default (TVM imports it as
  ``R.dequantize`` and lowers it to a kernel, so the package keeps int8 weights). With
  ``fold_dequantize=True`` it is folded into float32 weights instead.
* **Gemm transB on a weight**: the weight is stored transposed and ``transB`` cleared (TVM would
  otherwise transpose it at every call, since weights stay function inputs).
* Dead nodes, initializers and stale ``value_info`` entries are removed.

Graph inputs (names, types, dim_params) and outputs are never changed. A model that needs none of
this comes back equal up to node order (no-op safe).
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from edgepack.errors import DimError, ModelError

log = logging.getLogger(__name__)

__all__ = ["canonicalize", "canonicalize_with_report", "CanonicalizeReport"]

#: Constants up to this many elements become ``Constant`` nodes (Relax consts), larger ones initializers.
SMALL_CONST = 64
#: Largest symbolic (shape-like) tensor tracked, in elements.
MAX_SYM = 64
#: Constant folding may produce up to this many elements (or as many as its inputs hold).
FOLD_LIMIT = 1 << 16
#: Largest ``arange`` constant written for a ``Range`` rewrite.
MAX_RANGE = 1 << 20

_INT_TYPES = {
    TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8,
    TensorProto.UINT64, TensorProto.UINT32, TensorProto.UINT16, TensorProto.UINT8,
}
# Never folded: non-deterministic or with side effects / sequence outputs.
_NO_FOLD = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SplitToSequence", "Optional",
}
_DEFAULT_DOMAINS = ("", "ai.onnx")


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


# --------------------------------------------------------------------------------------------------
# Symbolic integers: polynomials with integer coefficients in the dim symbols
# --------------------------------------------------------------------------------------------------
class _Poly:
    """An integer polynomial in dim symbols, e.g. ``2*batch*seq + 1``. Immutable."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict | None = None):
        # monomial (sorted tuple of symbol names, with repeats) -> nonzero int coefficient
        self.terms = {k: v for k, v in (terms or {}).items() if v != 0}

    @staticmethod
    def const(c: int) -> "_Poly":
        return _Poly({(): int(c)})

    @staticmethod
    def sym(name: str) -> "_Poly":
        return _Poly({(name,): 1})

    @staticmethod
    def of(x) -> "_Poly":
        return x if isinstance(x, _Poly) else _Poly.const(int(x))

    def is_const(self) -> bool:
        return all(k == () for k in self.terms)

    @property
    def value(self) -> int:
        return self.terms.get((), 0)

    def single_symbol(self) -> str | None:
        """The symbol name if this is exactly one symbol (coefficient 1, no constant term)."""
        if len(self.terms) == 1:
            (k, v), = self.terms.items()
            if len(k) == 1 and v == 1:
                return k[0]
        return None

    def symbols(self) -> set[str]:
        return {s for k in self.terms for s in k}

    def __add__(self, o):
        o = _Poly.of(o)
        t = dict(self.terms)
        for k, v in o.terms.items():
            t[k] = t.get(k, 0) + v
        return _Poly(t)

    __radd__ = __add__

    def __neg__(self):
        return _Poly({k: -v for k, v in self.terms.items()})

    def __sub__(self, o):
        return self + (-_Poly.of(o))

    def __rsub__(self, o):
        return _Poly.of(o) - self

    def __mul__(self, o):
        o = _Poly.of(o)
        t: dict = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in o.terms.items():
                k = tuple(sorted(k1 + k2))
                t[k] = t.get(k, 0) + v1 * v2
        return _Poly(t)

    __rmul__ = __mul__

    def exact_div(self, o: "_Poly") -> "_Poly | None":
        """self / o when o is a nonzero constant dividing every coefficient (else None)."""
        if not o.is_const() or o.value == 0:
            return None
        d = o.value
        if self.is_const():
            a = self.value
            q = abs(a) // abs(d)  # ONNX integer Div truncates toward zero
            return _Poly.const(q if (a >= 0) == (d > 0) else -q)
        if all(v % d == 0 for v in self.terms.values()):
            return _Poly({k: v // d for k, v in self.terms.items()})
        return None

    def bound(self, ranges: dict[str, tuple[int, int]], upper: bool) -> int | None:
        """Upper (or lower) bound for nonnegative symbols in ``ranges``; None if not bounded."""
        total = 0
        for k, v in self.terms.items():
            pick_max = (v > 0) == upper
            prod = 1
            for s in k:
                if s not in ranges:
                    if pick_max:
                        return None
                    lo = 0
                    prod *= lo
                    continue
                lo, hi = ranges[s]
                prod *= hi if pick_max else max(lo, 0)
            total += v * prod
        return total

    def _key(self):
        return frozenset(self.terms.items())

    def __eq__(self, o):
        if isinstance(o, (int, np.integer)):
            o = _Poly.const(int(o))
        return isinstance(o, _Poly) and self._key() == o._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if not self.terms:
            return "0"
        return " + ".join(f"{v}*{'*'.join(k)}" if k else str(v) for k, v in sorted(self.terms.items()))


def _poly_array(a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    for idx, v in np.ndenumerate(a):
        out[idx] = _Poly.const(int(v))
    return out


def _all_const(a: np.ndarray) -> bool:
    return all(p.is_const() for p in a.flat)


def _to_int_array(a: np.ndarray, dtype) -> np.ndarray:
    return np.array([p.value for p in a.flat], dtype=dtype).reshape(a.shape)


# --------------------------------------------------------------------------------------------------
# Graph helpers
# --------------------------------------------------------------------------------------------------
def _opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in _DEFAULT_DOMAINS:
            return o.version
    return 1


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Names that a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    names: set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                names.update(i for i in n.input if i)
                names |= _subgraph_inputs(n)
    return names


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


class _Names:
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


def _const_node(name: str, arr: np.ndarray, node_name: str | None = None) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=node_name or name + "_Constant",
                            value=numpy_helper.from_array(np.asarray(arr), name))


# --------------------------------------------------------------------------------------------------
# Passes
# --------------------------------------------------------------------------------------------------
def _inline_functions(model: onnx.ModelProto, rep: CanonicalizeReport) -> onnx.ModelProto:
    if len(model.functions) == 0:
        return model
    import onnx.inliner

    n = len(model.functions)
    model = onnx.inliner.inline_local_functions(model)
    rep.add("inline local functions", n)
    return model


def _normalize_constants(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
    """Constant(value_float/floats/int/ints) -> Constant(value=tensor)."""
    for n in model.graph.node:
        if n.op_type != "Constant" or n.domain not in _DEFAULT_DOMAINS:
            continue
        names = [a.name for a in n.attribute]
        if "value" in names:
            continue
        arr = None
        if "value_float" in names:
            arr = np.array(_attr(n, "value_float"), np.float32)
        elif "value_floats" in names:
            arr = np.array(_attr(n, "value_floats"), np.float32).reshape(-1)
        elif "value_int" in names:
            arr = np.array(_attr(n, "value_int"), np.int64)
        elif "value_ints" in names:
            arr = np.array(_attr(n, "value_ints"), np.int64).reshape(-1)
        if arr is None:
            continue  # value_string(s) / sparse_value: left alone
        del n.attribute[:]
        n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(arr, n.output[0])))
        rep.add("Constant value_* -> value tensor")


def _small_initializers_to_constants(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
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
            new_nodes.append(_const_node(t.name, numpy_helper.to_array(t)))
        else:
            keep.append(t)
    if new_nodes:
        del g.initializer[:]
        g.initializer.extend(keep)
        nodes = new_nodes + list(g.node)
        del g.node[:]
        g.node.extend(nodes)
        rep.add("small initializer -> Constant", len(new_nodes))


def _remove_identity_like(model: onnx.ModelProto, rep: CanonicalizeReport) -> None:
    """Drop Identity and inference Dropout nodes, rewiring their consumers."""
    g = model.graph
    graph_outputs = {o.name for o in g.output}
    graph_inputs = {i.name for i in g.input} | {t.name for t in g.initializer}
    consumers = collections.defaultdict(int)
    for n in g.node:
        for i in n.input:
            consumers[i] += 1
    for n in g.node:
        for i in _subgraph_inputs(n):
            consumers[i] += 1

    renames: dict[str, str] = {}
    out_renames: dict[str, str] = {}
    kept = []
    for n in g.node:
        mask_out = n.output[1] if n.op_type == "Dropout" and len(n.output) > 1 else ""
        identity = n.domain in _DEFAULT_DOMAINS and (
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


def _dce(model: onnx.ModelProto, rep: CanonicalizeReport) -> int:
    g = model.graph
    live = {o.name for o in g.output}
    kept = []
    for n in reversed(list(g.node)):
        if any(o in live for o in n.output if o):
            kept.append(n)
            live.update(i for i in n.input if i)
            live |= _subgraph_inputs(n)
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


def _prune_value_info(model: onnx.ModelProto) -> None:
    g = model.graph
    names = {o for n in g.node for o in n.output}
    vis = [vi for vi in g.value_info if vi.name in names]
    del g.value_info[:]
    g.value_info.extend(vis)


def _pretranspose_gemm_weights(model: onnx.ModelProto, rep: CanonicalizeReport, names: _Names) -> None:
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
            and _attr(u, "transB", 0) == 1 for u in us)

    for n in list(g.node):
        if n.op_type != "Gemm" or n.domain not in _DEFAULT_DOMAINS or len(n.input) < 2:
            continue
        b = n.input[1]
        if _attr(n, "transB", 0) != 1 or b in inputs:
            continue
        if b in inits:
            w = numpy_helper.to_array(inits[b])
            if w.ndim != 2:
                continue
            if all_gemm_transb(b):  # only these Gemms read it: transpose in place, keep the name
                inits[b].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w.T), b))
                for u in users[b]:
                    _set_attr(u, "transB", 0)
                    rep.add("Gemm transB weight stored transposed")
                continue
            new = names.fresh(b + "_T")
            g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.T), new))
            inits[new] = g.initializer[-1]
            for u in users[b]:  # every Gemm reading it with transB=1 shares the transposed copy
                if u.op_type == "Gemm" and len(u.input) > 1 and u.input[1] == b and _attr(u, "transB", 0) == 1:
                    u.input[1] = new
                    _set_attr(u, "transB", 0)
                    rep.add("Gemm transB weight stored transposed")
            continue
        dq = producer.get(b)
        if (dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in _DEFAULT_DOMAINS
                or dq.input[0] not in inits or dq.input[0] in inputs or len(users[dq.input[0]]) != 1
                or not all_gemm_transb(b) or _attr(dq, "block_size", 0)):
            continue
        q = numpy_helper.to_array(inits[dq.input[0]])
        if q.ndim != 2:
            continue
        # only this DequantizeLinear reads it: transpose in place, keep the name
        inits[dq.input[0]].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q.T), dq.input[0]))
        axis = _attr(dq, "axis", 1)
        _set_attr(dq, "axis", 1 - (axis + 2 if axis < 0 else axis))
        for u in users[b]:
            _set_attr(u, "transB", 0)
            rep.add("Gemm transB weight stored transposed (through DequantizeLinear)")


# --------------------------------------------------------------------------------------------------
# The folding / symbolic pass
# --------------------------------------------------------------------------------------------------
class _Folder:
    def __init__(self, model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]],
                 rep: CanonicalizeReport, fold_dequantize: bool):
        self.model = model
        self.ranges = dim_ranges
        self.rep = rep
        self.fold_dequantize = fold_dequantize
        self.opset = _opset(model)
        self.names = _Names(model)
        g = model.graph
        self.graph_inputs = {i.name for i in g.input}
        self.graph_outputs = {o.name for o in g.output}
        self.inits = {t.name: t for t in g.initializer if t.name not in self.graph_inputs}
        # Graph-input dim symbols -> (input name, axis): where a symbolic dim can be read at run time.
        self.sources: dict[str, tuple[str, int]] = {}
        for vi in g.input:
            if vi.name in self.inits:
                continue
            t = vi.type.tensor_type
            if not t.HasField("shape"):
                continue
            for k, d in enumerate(t.shape.dim):
                if d.HasField("dim_param") and d.dim_param and d.dim_param not in self.sources:
                    self.sources[d.dim_param] = (vi.name, k)
        self.shapes, self.elem = self._infer()
        self.consts: dict[str, np.ndarray] = {}
        self.syms: dict[str, np.ndarray] = {}
        for name, t in self.inits.items():
            if t.data_location == TensorProto.EXTERNAL:
                continue
            self.consts[name] = numpy_helper.to_array(t)

    # ---------------------------------------------------------------- shapes
    def _infer(self):
        try:
            inferred = shape_inference.infer_shapes(self.model, check_type=False, strict_mode=False,
                                                    data_prop=True)
        except Exception as e:  # noqa: BLE001 - inference is best effort
            log.debug("shape inference failed: %s", e)
            inferred = self.model
        shapes: dict[str, list[_Poly] | None] = {}
        elem: dict[str, int] = {}
        g = inferred.graph
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            if tt.elem_type:
                elem[vi.name] = tt.elem_type
            if not tt.HasField("shape"):
                continue
            dims = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    dims.append(_Poly.const(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(_Poly.sym(d.dim_param))
                else:
                    dims.append(_Poly.sym(f"?{vi.name}:{k}"))  # unknown: equal to nothing else
            shapes[vi.name] = dims
        for t in self.model.graph.initializer:
            shapes[t.name] = [_Poly.const(d) for d in t.dims]
            elem[t.name] = t.data_type
        return shapes, elem

    def _shape_of(self, name: str) -> list[_Poly] | None:
        if name in self.consts:
            return [_Poly.const(d) for d in self.consts[name].shape]
        return self.shapes.get(name)

    def _is_int(self, name: str) -> bool:
        if name in self.consts:
            return np.issubdtype(self.consts[name].dtype, np.integer)
        return self.elem.get(name) in _INT_TYPES

    def _np_int_dtype(self, name: str, n: onnx.NodeProto):
        if n.op_type == "Cast":
            return helper.tensor_dtype_to_np_dtype(_attr(n, "to"))
        if n.op_type in ("Shape", "Size"):
            return np.int64
        et = self.elem.get(name)
        if et in _INT_TYPES:
            return helper.tensor_dtype_to_np_dtype(et)
        for i in n.input:  # shape-preserving ops keep their first int input's dtype
            if i in self.consts and np.issubdtype(self.consts[i].dtype, np.integer):
                return self.consts[i].dtype
            if self.elem.get(i) in _INT_TYPES:
                return helper.tensor_dtype_to_np_dtype(self.elem[i])
        return np.int64

    def _sym(self, name: str) -> np.ndarray | None:
        if name in self.syms:
            return self.syms[name]
        c = self.consts.get(name)
        if c is not None and np.issubdtype(c.dtype, np.integer) and c.size <= MAX_SYM:
            return _poly_array(c)
        return None

    # ---------------------------------------------------------------- folding
    def _foldable(self, n: onnx.NodeProto) -> bool:
        if n.domain not in _DEFAULT_DOMAINS or n.op_type in _NO_FOLD or _has_subgraph(n):
            return False
        ins = [i for i in n.input if i]
        if n.op_type == "Constant" or not ins or not all(i in self.consts for i in ins):
            return False
        if not self.fold_dequantize:
            if n.op_type == "DequantizeLinear":
                return False
            if n.op_type == "Cast" and self.consts[n.input[0]].dtype in (np.int8, np.uint8) \
                    and self.consts[n.input[0]].size > SMALL_CONST:
                return False  # Cast+Mul weight dequantisation: keep the int8 weight
        return True

    def _too_big(self, n: onnx.NodeProto, in_size: int) -> bool:
        """Ops whose output can dwarf their inputs: checked before evaluating them."""
        limit = max(in_size, FOLD_LIMIT)
        c = self.consts
        try:
            if n.op_type == "ConstantOfShape":
                return int(np.prod(c[n.input[0]])) > limit
            if n.op_type == "Expand":
                return int(np.prod(np.broadcast_shapes(c[n.input[0]].shape,
                                                       tuple(int(d) for d in c[n.input[1]])))) > limit
            if n.op_type == "Tile":
                return int(np.prod(np.array(c[n.input[0]].shape) * c[n.input[1]])) > limit
            if n.op_type == "Range":
                s, e, d = (float(c[i].reshape(())) for i in n.input[:3])
                return d == 0 or (e - s) / d > limit
        except Exception:  # noqa: BLE001 - malformed operands: let the evaluator decide
            return False
        return False

    def _evaluate(self, n: onnx.NodeProto) -> list[np.ndarray] | None:
        from onnx.reference import ReferenceEvaluator

        feeds = {i: self.consts[i] for i in n.input if i}
        if self._too_big(n, sum(v.size for v in feeds.values())):
            return None
        try:
            ev = ReferenceEvaluator(n, opsets={"": self.opset})
            outs = ev.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - an op the reference runtime cannot run: leave it
            log.debug("cannot fold %s %s: %s", n.op_type, n.name, e)
            return None
        outs = [np.asarray(o) for o in outs]
        in_size = sum(v.size for v in feeds.values())
        if any(o.dtype == object for o in outs):
            return None
        if sum(o.size for o in outs) > max(in_size, FOLD_LIMIT):
            return None
        return outs

    def _emit_const(self, name: str, arr: np.ndarray, out: list, from_weights: bool) -> None:
        arr = np.asarray(arr)
        self.consts[name] = arr
        if arr.size <= SMALL_CONST or not from_weights:
            out.append(_const_node(name, arr))
        else:
            self.model.graph.initializer.append(numpy_helper.from_array(arr, name))
            self.inits[name] = self.model.graph.initializer[-1]

    # ---------------------------------------------------------------- symbolic evaluation
    def _eval_sym(self, n: onnx.NodeProto) -> list[np.ndarray | None]:
        res = []
        for r in self._eval_sym_raw(n):
            if r is not None and not isinstance(r, np.ndarray):
                a = np.empty((), dtype=object if isinstance(r, _Poly) else np.asarray(r).dtype)
                a[()] = r
                r = a
            res.append(r)
        return res

    def _eval_sym_raw(self, n: onnx.NodeProto) -> list:
        op = n.op_type
        ins = list(n.input)
        none = [None] * len(n.output)
        if n.domain not in _DEFAULT_DOMAINS:
            return none
        S = self._sym
        try:
            if op == "Shape":
                shp = self._shape_of(ins[0])
                if shp is None:
                    return none
                r = len(shp)
                start, end = _attr(n, "start", 0), _attr(n, "end", r)
                start = max(0, min(r, start + r if start < 0 else start))
                end = max(0, min(r, end + r if end < 0 else end))
                a = np.empty(max(0, end - start), dtype=object)
                for k in range(start, end):
                    a[k - start] = shp[k]
                return [a]
            if op == "Size":
                shp = self._shape_of(ins[0])
                if shp is None:
                    return none
                p = _Poly.const(1)
                for d in shp:
                    p = p * d
                a = np.empty((), dtype=object)
                a[()] = p
                return [a]
            if op in ("Identity",):
                return [S(ins[0])]
            if op == "Cast":
                to = _attr(n, "to")
                x = S(ins[0])
                if x is not None and to in _INT_TYPES and self._is_int(ins[0]):
                    return [x]
                return none
            if op == "Gather":
                x, idx = S(ins[0]), self.consts.get(ins[1])
                if x is None or idx is None:
                    return none
                axis = _attr(n, "axis", 0)
                return [np.take(x, idx.astype(np.int64), axis=axis, mode="wrap")]
            if op == "Unsqueeze":
                x = S(ins[0])
                axes = _attr(n, "axes") if self.opset < 13 else (
                    self.consts.get(ins[1]).tolist() if len(ins) > 1 and ins[1] in self.consts else None)
                if x is None or axes is None:
                    return none
                r = x.ndim + len(axes)
                axes = sorted(a + r if a < 0 else a for a in axes)
                for a in axes:
                    x = np.expand_dims(x, a)
                return [x]
            if op == "Squeeze":
                x = S(ins[0])
                if x is None:
                    return none
                if self.opset < 13:
                    axes = _attr(n, "axes")
                else:
                    axes = self.consts[ins[1]].tolist() if len(ins) > 1 and ins[1] else None
                if axes is None:
                    return [x.reshape([d for d in x.shape if d != 1])]
                return [np.squeeze(x, axis=tuple(a + x.ndim if a < 0 else a for a in axes))]
            if op in ("Reshape", "Flatten"):
                x = S(ins[0])
                if x is None:
                    return none
                if op == "Flatten":
                    ax = _attr(n, "axis", 1)
                    ax = ax + x.ndim if ax < 0 else ax
                    return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
                tgt = self.consts.get(ins[1])
                if tgt is None:
                    return none
                tgt = [x.shape[k] if (d == 0 and not _attr(n, "allowzero", 0)) else int(d)
                       for k, d in enumerate(tgt.tolist())]
                return [x.reshape(tgt)]
            if op == "Concat":
                parts = [S(i) for i in ins]
                if any(p is None for p in parts):
                    return none
                return [np.concatenate(parts, axis=_attr(n, "axis", 0))]
            if op == "Slice":
                x = S(ins[0])
                if x is None or x.ndim != 1:
                    return none
                vals = [self.consts.get(i) if i else None for i in ins[1:5]]
                if self.opset < 10:
                    starts, ends = _attr(n, "starts"), _attr(n, "ends")
                    axes, steps = _attr(n, "axes", [0]), [1]
                else:
                    if vals[0] is None or vals[1] is None:
                        return none
                    starts, ends = vals[0].tolist(), vals[1].tolist()
                    axes = vals[2].tolist() if len(vals) > 2 and vals[2] is not None else [0]
                    steps = vals[3].tolist() if len(vals) > 3 and vals[3] is not None else [1]
                if axes not in ([0], [-1]) or len(starts) != 1:
                    return none
                e = ends[0]
                e = None if (steps[0] < 0 and e < -x.shape[0]) else min(e, 2**62)
                return [x[slice(starts[0], e, steps[0])]]
            if op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
                xs = [S(i) for i in ins]
                if any(x is None for x in xs) or not all(self._is_int(i) for i in ins):
                    return none
                if op == "Add":
                    return [xs[0] + xs[1]]
                if op == "Sub":
                    return [xs[0] - xs[1]]
                if op == "Mul":
                    return [xs[0] * xs[1]]
                if op == "Div":
                    a, b = np.broadcast_arrays(xs[0], xs[1])
                    out = np.empty(a.shape, dtype=object)
                    for idx in np.ndindex(a.shape):
                        q = a[idx].exact_div(b[idx])
                        if q is None:
                            return none
                        out[idx] = q
                    return [out]
                # Max/Min: only when decidable
                arrs = np.broadcast_arrays(*xs)
                out = np.empty(arrs[0].shape, dtype=object)
                for idx in np.ndindex(out.shape):
                    vals = [a[idx] for a in arrs]
                    best = vals[0]
                    for v in vals[1:]:
                        c = self._compare(v, best)
                        if c is None:
                            return none
                        if (op == "Max" and c > 0) or (op == "Min" and c < 0):
                            best = v
                    out[idx] = best
                return [out]
            if op == "Neg":
                x = S(ins[0])
                return [-x] if x is not None else none
            if op == "Equal":
                xs = [S(i) for i in ins]
                if any(x is None for x in xs):
                    return none
                a, b = np.broadcast_arrays(xs[0], xs[1])
                out = np.empty(a.shape, dtype=bool)
                for idx in np.ndindex(a.shape):
                    c = self._compare(a[idx], b[idx])
                    if c is None:
                        return none
                    out[idx] = c == 0
                return [out]  # a bool array: fully known, folded by the caller
            if op == "Where":
                cond = self.consts.get(ins[0])
                xs = [S(ins[1]), S(ins[2])]
                if cond is None or any(x is None for x in xs):
                    return none
                return [np.where(cond, xs[0], xs[1])]
        except Exception as e:  # noqa: BLE001 - symbolic evaluation is best effort
            log.debug("symbolic eval of %s %s failed: %s", op, n.name, e)
        return none

    def _compare(self, a: _Poly, b: _Poly) -> int | None:
        """sign(a - b) when decidable for symbols within dim_ranges (dims are >= 0), else None."""
        d = a - b
        if d.is_const():
            return (d.value > 0) - (d.value < 0)
        lo, hi = d.bound(self.ranges, upper=False), d.bound(self.ranges, upper=True)
        if lo is None:
            # unknown symbols: dims are >= 0, so a poly with nonnegative coefficients is >= its constant
            if all(v >= 0 for v in d.terms.values()):
                lo = d.value
        if lo is not None and lo > 0:
            return 1
        if hi is not None and hi < 0:
            return -1
        return None

    # ---------------------------------------------------------------- materializing shape vectors
    def _materialize(self, vec: np.ndarray, base: str, out: list) -> str | None:
        """Build a 1-D int64 tensor holding ``vec`` from constants and Shape(graph_input) slices."""
        if vec.ndim != 1:
            return None
        pieces: list[tuple] = []  # ("c", [ints]) or ("s", input, start, end)
        for p in vec:
            if p.is_const():
                if pieces and pieces[-1][0] == "c":
                    pieces[-1][1].append(p.value)
                else:
                    pieces.append(("c", [p.value]))
                continue
            s = p.single_symbol()
            if s is None or s not in self.sources:
                return None
            src, k = self.sources[s]
            if pieces and pieces[-1][0] == "s" and pieces[-1][1] == src and pieces[-1][3] == k:
                pieces[-1] = ("s", src, pieces[-1][2], k + 1)
            else:
                pieces.append(("s", src, k, k + 1))
        names = []
        for pc in pieces:
            if pc[0] == "c":
                nm = self.names.fresh(base + "_c")
                out.append(_const_node(nm, np.array(pc[1], np.int64)))
            else:
                nm = self._shape_slice(pc[1], pc[2], pc[3], base, out)
            names.append(nm)
        if len(names) == 1:
            return names[0]
        nm = self.names.fresh(base + "_shape")
        out.append(helper.make_node("Concat", names, [nm], name=nm + "_Concat", axis=0))
        return nm

    def _shape_slice(self, src: str, start: int, end: int, base: str, out: list) -> str:
        nm = self.names.fresh(f"{base}_{src}_dims{start}")
        if self.opset >= 15:
            out.append(helper.make_node("Shape", [src], [nm], name=nm + "_Shape", start=start, end=end))
            return nm
        full = self.names.fresh(f"{src}_shape")
        out.append(helper.make_node("Shape", [src], [full], name=full + "_Shape"))
        s, e, a = (self.names.fresh(base + x) for x in ("_s", "_e", "_a"))
        out += [_const_node(s, np.array([start], np.int64)), _const_node(e, np.array([end], np.int64)),
                _const_node(a, np.array([0], np.int64))]
        out.append(helper.make_node("Slice", [full, s, e, a], [nm], name=nm + "_Slice"))
        return nm

    # ---------------------------------------------------------------- rewrites
    def _rewrite_reshape(self, n, out) -> bool:
        if len(n.input) < 2 or n.input[1] in self.consts:
            return False
        vec = self._sym(n.input[1])
        if vec is None or vec.ndim != 1:
            return False
        allowzero = _attr(n, "allowzero", 0)
        in_shape = self._shape_of(n.input[0])
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
            nm = self.names.fresh(n.input[1] + "_const")
            out.append(_const_node(nm, np.array(tgt, np.int64)))
            new.input[1] = nm
            if allowzero:
                _set_attr(new, "allowzero", 0)
            out.append(new)
            self.rep.add("Reshape shape -> constant (0/-1)")
            return True
        if n.input[1].startswith("canon_"):
            return False
        nm = self._materialize(vec, n.input[1], out)
        if nm is None:
            return False
        new.input[1] = nm
        out.append(new)
        self.rep.add("Reshape shape -> Concat(Shape(input) slices)")
        return True

    def _rewrite_range(self, n, out) -> bool:
        if not all(i in self.consts for i in (n.input[0], n.input[2])) or n.input[1] in self.consts:
            return False
        start, delta = self.consts[n.input[0]], self.consts[n.input[2]]
        if not (np.issubdtype(start.dtype, np.integer) and np.issubdtype(delta.dtype, np.integer)):
            self.rep.notes.append(f"Range {n.name}: float Range with a symbolic limit left alone")
            return False
        s, d = int(start.reshape(())), int(delta.reshape(()))
        lim = self._sym(n.input[1])
        if lim is None or lim.size != 1 or s < 0 or d <= 0:
            self.rep.notes.append(f"Range {n.name}: limit not a known shape expression or start<0/delta<=0; "
                                  "left alone (TVM imports it data-dependently)")
            return False
        p = lim.reshape(())[()]
        ub = p.bound(self.ranges, upper=True)
        if ub is None:
            self.rep.notes.append(f"Range {n.name}: limit {p!r} has no upper bound in dim_ranges; left alone")
            return False
        ub = max(ub, s)
        if ub > MAX_RANGE:
            return False
        base = n.output[0]
        ar = self.names.fresh(base + "_arange")
        out.append(_const_node(ar, np.arange(0, ub, dtype=start.dtype)))
        ends = self._materialize(np.array([p], dtype=object), base + "_end", out)
        if ends is None:
            # generic: the limit tensor itself, as int64 [1]
            lim_name = n.input[1]
            if self.elem.get(lim_name, TensorProto.INT64) != TensorProto.INT64:
                c = self.names.fresh(base + "_lim64")
                out.append(helper.make_node("Cast", [lim_name], [c], name=c + "_Cast", to=TensorProto.INT64))
                lim_name = c
            one = self.names.fresh(base + "_one")
            out.append(_const_node(one, np.array([1], np.int64)))
            ends = self.names.fresh(base + "_end")
            out.append(helper.make_node("Reshape", [lim_name, one], [ends], name=ends + "_Reshape"))
        st, ax, sp = (self.names.fresh(base + x) for x in ("_start", "_axis", "_step"))
        out += [_const_node(st, np.array([s], np.int64)), _const_node(ax, np.array([0], np.int64)),
                _const_node(sp, np.array([d], np.int64))]
        out.append(helper.make_node("Slice", [ar, st, ends, ax, sp], [n.output[0]], name=(n.name or base) + "_asSlice"))
        self.rep.add("Range(symbolic limit) -> Slice(arange(0, upper bound))")
        return True

    def _rewrite_expand(self, n, out) -> bool:
        if n.input[1] in self.consts:
            return False
        vec = self._sym(n.input[1])
        if vec is None or vec.ndim != 1:
            return False
        in_shape = self._shape_of(n.input[0])
        vec = vec.copy()
        if in_shape is not None:
            off = len(vec) - len(in_shape)
            for j, p in enumerate(vec):
                i = j - off
                if not p.is_const() and i >= 0 and in_shape[i] == p:
                    vec[j] = _Poly.const(1)
        new = onnx.NodeProto()
        new.CopyFrom(n)
        if _all_const(vec):
            nm = self.names.fresh(n.input[1] + "_const")
            out.append(_const_node(nm, _to_int_array(vec, np.int64)))
            self.rep.add("Expand shape -> constant")
        else:
            if n.input[1].startswith("canon_"):
                return False
            nm = self._materialize(vec, n.input[1], out)
            if nm is None:
                return False
            self.rep.add("Expand shape -> Concat(Shape(input) slices)")
        new.input[1] = nm
        out.append(new)
        return True

    def _rewrite_shape_operand(self, n, out, positions: Iterable[int]) -> bool:
        """ConstantOfShape / Slice / Tile: rebuild symbolic shape operands from graph-input dims."""
        new = onnx.NodeProto()
        new.CopyFrom(n)
        changed = False
        for k in positions:
            if k >= len(n.input) or not n.input[k] or n.input[k] in self.consts or n.input[k].startswith("canon_"):
                continue
            vec = self._sym(n.input[k])
            if vec is None or vec.ndim != 1:
                continue
            nm = self._materialize(vec, n.input[k], out)
            if nm is None:
                continue
            new.input[k] = nm
            changed = True
        if changed:
            out.append(new)
            self.rep.add(f"{n.op_type} shape operand -> Concat(Shape(input) slices)")
        return changed

    # ---------------------------------------------------------------- driver
    def run(self) -> bool:
        g = self.model.graph
        out: list[onnx.NodeProto] = []
        changed = False
        for n in list(g.node):
            if n.op_type == "Constant" and n.domain in _DEFAULT_DOMAINS:
                v = _attr(n, "value")
                if isinstance(v, TensorProto):
                    self.consts[n.output[0]] = numpy_helper.to_array(v)
                out.append(n)
                continue
            if self._foldable(n):
                res = self._evaluate(n)
                if res is not None:
                    from_weights = any(i in self.inits for i in n.input)
                    for name, arr in zip(n.output, res):
                        if name:
                            self._emit_const(name, arr, out, from_weights)
                    self.rep.add(f"fold {n.op_type}")
                    changed = True
                    continue
            syms = self._eval_sym(n)
            if syms and all(s is not None for s in syms) and n.output[0] not in self.graph_outputs:
                if all(s.dtype == bool or _all_const(s) for s in syms):
                    for name, s in zip(n.output, syms):
                        arr = s if s.dtype == bool else _to_int_array(s, self._np_int_dtype(name, n))
                        self._emit_const(name, arr, out, False)
                    self.rep.add(f"fold shape {n.op_type}")
                    changed = True
                    continue
            for name, s in zip(n.output, syms):
                if s is not None and s.dtype == object and s.size <= MAX_SYM:
                    self.syms[name] = s
            op = n.op_type if n.domain in _DEFAULT_DOMAINS else None
            done = False
            if op == "Reshape":
                done = self._rewrite_reshape(n, out)
            elif op == "Range" and self.opset >= 11:
                done = self._rewrite_range(n, out)
            elif op == "Expand":
                done = self._rewrite_expand(n, out)
            elif op == "ConstantOfShape":
                done = self._rewrite_shape_operand(n, out, [0])
            elif op == "Slice" and self.opset >= 10:
                done = self._rewrite_shape_operand(n, out, [1, 2])
            elif op == "Tile":
                done = self._rewrite_shape_operand(n, out, [1])
            if done:
                changed = True
                continue
            out.append(n)
        del g.node[:]
        g.node.extend(out)
        return changed


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------
def _check_ranges(dim_ranges: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    out = {}
    for k, v in (dim_ranges or {}).items():
        try:
            lo, hi = (int(x) for x in v)
        except (TypeError, ValueError):
            raise DimError(f"dim range for {k!r} must be a (min, max) pair of ints, got {v!r}") from None
        if lo < 0 or hi < lo:
            raise DimError(f"dim range for {k!r} must satisfy 0 <= min <= max, got ({lo}, {hi})")
        out[k] = (lo, hi)
    return out


def _input_signature(model: onnx.ModelProto) -> list:
    return [vi.SerializeToString() for vi in model.graph.input]


def canonicalize_with_report(model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]], *,
                             fold_dequantize: bool = False,
                             pretranspose_gemm: bool = True) -> tuple[onnx.ModelProto, CanonicalizeReport]:
    """``canonicalize`` that also returns what it did (see the module docstring)."""
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(f"canonicalize expects an onnx.ModelProto, got {type(model).__name__}")
    ranges = _check_ranges(dim_ranges)
    rep = CanonicalizeReport()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    signature = _input_signature(m)

    m = _inline_functions(m, rep)
    _normalize_constants(m, rep)
    _small_initializers_to_constants(m, rep)
    _remove_identity_like(m, rep)
    for _ in range(8):
        changed = _Folder(m, ranges, rep, fold_dequantize).run()
        _dce(m, rep)
        if not changed:
            break
    if pretranspose_gemm:
        _pretranspose_gemm_weights(m, rep, _Names(m))
        _dce(m, rep)
    _prune_value_info(m)

    if _input_signature(m) != signature:  # pragma: no cover - guarded by construction
        raise ModelError("internal error: canonicalize changed the graph inputs")
    try:
        onnx.checker.check_model(m)
    except onnx.checker.ValidationError as e:
        raise ModelError(f"canonicalize produced an invalid model: {e}") from e
    for k, v in sorted(rep.counts.items()):
        log.debug("canonicalize: %s x%d", k, v)
    for note in rep.notes:
        log.info("canonicalize: %s", note)
    return m, rep


def canonicalize(model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]]) -> onnx.ModelProto:
    """Return a copy of ``model`` that TVM 0.27's ``from_onnx(model, keep_params_in_input=True)``
    imports without data-dependent shape code (see the module docstring for each rewrite).

    ``dim_ranges`` maps dim_param names (e.g. ``{"batch": (1, 4), "seq": (1, 64)}``) to inclusive
    ranges; upper bounds size the constants that replace ``Range`` over a symbolic length.
    int8 weights behind ``DequantizeLinear`` stay int8 (TVM lowers the dequantisation to a kernel).
    """
    return canonicalize_with_report(model, dim_ranges)[0]
