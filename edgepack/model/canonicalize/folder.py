"""The folding pass: constant folding with onnx.reference, symbolic shape values (symbolic.py) on top of ONNX
shape inference, and the shape-operand rewrites (rewrites.py). One `Folder` per round; `canonicalize` runs
rounds until nothing changes.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .graph import (DEFAULT_DOMAINS, FOLD_LIMIT, INT_TYPES, MAX_SYM, NO_FOLD, SMALL_CONST, CanonicalizeReport,
                    Names, attr, const_node, has_subgraph, opset_of)
from .poly import Poly, all_const, poly_array, to_int_array
from .rewrites import REWRITES
from .symbolic import HANDLERS

log = logging.getLogger(__name__)


class Folder:
    """One round of folding over the graph (see the module doc); `run` says whether it changed anything."""

    def __init__(self, model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]],
                 rep: CanonicalizeReport, fold_dequantize: bool):
        self.model = model
        self.ranges = dim_ranges
        self.rep = rep
        self.fold_dequantize = fold_dequantize
        self.opset = opset_of(model)
        self.names = Names(model)
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
        shapes: dict[str, list[Poly] | None] = {}
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
                    dims.append(Poly.const(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(Poly.sym(d.dim_param))
                else:
                    dims.append(Poly.sym(f"?{vi.name}:{k}"))  # unknown: equal to nothing else
            shapes[vi.name] = dims
        for t in self.model.graph.initializer:
            shapes[t.name] = [Poly.const(d) for d in t.dims]
            elem[t.name] = t.data_type
        return shapes, elem

    def shape_of(self, name: str) -> list[Poly] | None:
        if name in self.consts:
            return [Poly.const(d) for d in self.consts[name].shape]
        return self.shapes.get(name)

    def is_int(self, name: str) -> bool:
        if name in self.consts:
            return np.issubdtype(self.consts[name].dtype, np.integer)
        return self.elem.get(name) in INT_TYPES

    def _np_int_dtype(self, name: str, n: onnx.NodeProto):
        if n.op_type == "Cast":
            return helper.tensor_dtype_to_np_dtype(attr(n, "to"))
        if n.op_type in ("Shape", "Size"):
            return np.int64
        et = self.elem.get(name)
        if et in INT_TYPES:
            return helper.tensor_dtype_to_np_dtype(et)
        for i in n.input:  # shape-preserving ops keep their first int input's dtype
            if i in self.consts and np.issubdtype(self.consts[i].dtype, np.integer):
                return self.consts[i].dtype
            if self.elem.get(i) in INT_TYPES:
                return helper.tensor_dtype_to_np_dtype(self.elem[i])
        return np.int64

    def sym(self, name: str) -> np.ndarray | None:
        if name in self.syms:
            return self.syms[name]
        c = self.consts.get(name)
        if c is not None and np.issubdtype(c.dtype, np.integer) and c.size <= MAX_SYM:
            return poly_array(c)
        return None

    # ---------------------------------------------------------------- folding
    def _foldable(self, n: onnx.NodeProto) -> bool:
        if n.domain not in DEFAULT_DOMAINS or n.op_type in NO_FOLD or has_subgraph(n):
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
            out.append(const_node(name, arr))
        else:
            self.model.graph.initializer.append(numpy_helper.from_array(arr, name))
            self.inits[name] = self.model.graph.initializer[-1]

    # ---------------------------------------------------------------- symbolic evaluation
    def _eval_sym(self, n: onnx.NodeProto) -> list[np.ndarray | None]:
        res = []
        for r in self._eval_sym_raw(n):
            if r is not None and not isinstance(r, np.ndarray):
                a = np.empty((), dtype=object if isinstance(r, Poly) else np.asarray(r).dtype)
                a[()] = r
                r = a
            res.append(r)
        return res

    def _eval_sym_raw(self, n: onnx.NodeProto) -> list:
        none = [None] * len(n.output)
        handler = HANDLERS.get(n.op_type) if n.domain in DEFAULT_DOMAINS else None
        if handler is None:
            return none
        try:
            res = handler(self, n)
        except Exception as e:  # noqa: BLE001 - symbolic evaluation is best effort
            log.debug("symbolic eval of %s %s failed: %s", n.op_type, n.name, e)
            return none
        return none if res is None else res

    # ---------------------------------------------------------------- deciding signs
    def compare(self, a: Poly, b: Poly) -> int | None:
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
    def materialize(self, vec: np.ndarray, base: str, out: list) -> str | None:
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
                out.append(const_node(nm, np.array(pc[1], np.int64)))
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
        out += [const_node(s, np.array([start], np.int64)), const_node(e, np.array([end], np.int64)),
                const_node(a, np.array([0], np.int64))]
        out.append(helper.make_node("Slice", [full, s, e, a], [nm], name=nm + "_Slice"))
        return nm

    # ---------------------------------------------------------------- driver
    def run(self) -> bool:
        g = self.model.graph
        out: list[onnx.NodeProto] = []
        changed = False
        for n in list(g.node):
            if n.op_type == "Constant" and n.domain in DEFAULT_DOMAINS:
                v = attr(n, "value")
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
                if all(s.dtype == bool or all_const(s) for s in syms):
                    for name, s in zip(n.output, syms):
                        arr = s if s.dtype == bool else to_int_array(s, self._np_int_dtype(name, n))
                        self._emit_const(name, arr, out, False)
                    self.rep.add(f"fold shape {n.op_type}")
                    changed = True
                    continue
            for name, s in zip(n.output, syms):
                if s is not None and s.dtype == object and s.size <= MAX_SYM:
                    self.syms[name] = s
            rule = REWRITES.get(n.op_type) if n.domain in DEFAULT_DOMAINS else None
            done = rule is not None and self.opset >= rule[0] and rule[1](self, n, out)
            if done:
                changed = True
                continue
            out.append(n)
        del g.node[:]
        g.node.extend(out)
        return changed
