"""QDQ models to integer ops (issue 14, step 2): the ONNX rewrite onnxruntime's own QDQ transformer does.

onnxruntime's `quantize_static` writes a quantised layer as float ops between DequantizeLinear and
QuantizeLinear:

    DQ(x_q) --+
    DQ(w_q) --+-- Conv / MatMul / Gemm -- [Relu | Clip] -- Q --> y_q
    DQ(b_q) --+

Run as written, every tensor between two layers is float (the activation's DequantizeLinear fuses into the
producing kernel), and the arena is a float one. `fuse_qdq` rewrites each such layer into one QLinearConv,
QLinearMatMul or com.microsoft QGemm node on the int8 tensors (model/quant.py lowers those to
int8 x int8 -> int32 kernels with a fixed-point requantisation epilogue). A Relu or Clip before the Q
becomes a clamp on the quantised output, which is exact: Q is monotonic and Q(0) is the zero point.

A layer is rewritten only when the result is the same integer computation onnxruntime's QDQ transformer
would run: per-tensor activation scales, weights (and an int32 bias whose scale is x_scale * w_scale) that
are constants, per-tensor or per-output-channel. Everything else stays as written and runs in float.
No TVM import: `edgepack inspect` uses `fusions` to say which nodes run as integer code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .ops import MS_DOMAIN

_INT8 = (np.int8, np.uint8)
_LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


@dataclass(frozen=True)
class Fusion:
    """One float layer between DequantizeLinear and QuantizeLinear, to run as one integer op."""

    op: onnx.NodeProto  # the Conv / MatMul / Gemm
    x: onnx.NodeProto  # the activation's DequantizeLinear
    w: onnx.NodeProto | None  # the weight's DequantizeLinear (None: a pooling)
    b: onnx.NodeProto | None  # the bias's DequantizeLinear (int32), if any
    act: onnx.NodeProto | None  # Relu / Clip between the op and the QuantizeLinear
    q: onnx.NodeProto  # the output's QuantizeLinear
    clamp: tuple[int, int] | None  # the activation as bounds on the quantised output


class _Graph:
    def __init__(self, g: onnx.GraphProto):
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.consts |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node
                        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"}
        self.outputs = {o.name for o in g.output}
        self.inputs = {i.name for i in g.input}

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name and name not in self.inputs else None

    def only_consumer(self, tensor: str) -> onnx.NodeProto | None:
        c = self.consumers.get(tensor, [])
        return c[0] if len(c) == 1 and tensor not in self.outputs else None

    def dq(self, tensor: str, op: str = "DequantizeLinear") -> onnx.NodeProto | None:
        n = self.producer.get(tensor)
        return n if n is not None and n.op_type == op and n.domain in ("", "ai.onnx") else None

    def qparams(self, n: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, zero point) of a Q/DQ node when both are constants (a missing zero point: uint8 0)."""
        s = self.const(n.input[1])
        zp = self.const(n.input[2]) if len(n.input) > 2 and n.input[2] else np.zeros((), np.uint8)
        if s is None or zp is None or s.dtype != np.float32 or _attr(n, "block_size", 0):
            return None
        return s, zp


def _attr(n: onnx.NodeProto, name: str, default):
    a = next((a for a in n.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


def _per_tensor(g: _Graph, n: onnx.NodeProto) -> bool:
    p = g.qparams(n)
    return p is not None and p[0].size == 1 and p[1].size == 1 and p[1].dtype in _INT8


def _weight_ok(g: _Graph, w: onnx.NodeProto, axis: int, channels: int) -> bool:
    """A constant int8/uint8 weight, per tensor or per channel along `axis` (the output channels)."""
    data, p = g.const(w.input[0]), g.qparams(w)
    if data is None or p is None or data.dtype not in _INT8:
        return False
    s, zp = p
    if s.size == 1 and zp.size == 1:
        return True
    return s.ndim == 1 and s.size == channels and zp.size in (1, channels) and \
        _attr(w, "axis", 1) % data.ndim == axis


def _bias_ok(g: _Graph, b: onnx.NodeProto | None, x_scale: np.ndarray, w_scale: np.ndarray) -> bool:
    """An int32 bias whose scale is x_scale * w_scale (then it adds to the int32 accumulator as it is)."""
    if b is None:
        return True
    data, p = g.const(b.input[0]), g.qparams(b)
    if data is None or p is None or data.dtype != np.int32 or p[1].any():
        return False
    have, want = np.broadcast_arrays(p[0], (x_scale.reshape(()) * w_scale).astype(np.float32))
    return bool(np.allclose(have, want, rtol=1e-6, atol=0))


def _clamp(g: _Graph, act: onnx.NodeProto | None, q: onnx.NodeProto) -> tuple[bool, tuple[int, int] | None]:
    """(ok, bounds): a Relu or a constant Clip before Q as bounds on the quantised output."""
    if act is None:
        return True, None
    s, zp = g.qparams(q)
    lo_q, hi_q = _LIMITS[zp.dtype]

    def quant(v) -> int:
        return int(np.clip(np.round(np.float32(v) / s.reshape(())) + int(zp.reshape(())), lo_q, hi_q))

    if act.op_type == "Relu":
        return True, (quant(0.0), hi_q)
    lo = g.const(act.input[1]) if len(act.input) > 1 and act.input[1] else None
    hi = g.const(act.input[2]) if len(act.input) > 2 and act.input[2] else None
    if (len(act.input) > 1 and act.input[1] and lo is None) or (len(act.input) > 2 and act.input[2] and hi is None):
        return False, None  # a Clip whose bounds are computed at run time
    return True, (quant(lo) if lo is not None else lo_q, quant(hi) if hi is not None else hi_q)


def _match(g: _Graph, n: onnx.NodeProto) -> Fusion | None:
    if n.domain not in ("", "ai.onnx") or n.op_type not in ("Conv", "MatMul", "Gemm") or len(n.input) < 2:
        return None
    x, w = g.dq(n.input[0]), g.dq(n.input[1])
    b = g.dq(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    if x is None or w is None or (len(n.input) > 2 and n.input[2] and b is None):
        return None
    nxt = g.only_consumer(n.output[0])
    act = nxt if nxt is not None and nxt.op_type in ("Relu", "Clip") else None
    q = g.only_consumer(act.output[0]) if act is not None else nxt
    if q is None or q.op_type != "QuantizeLinear" or not _per_tensor(g, x) or not _per_tensor(g, q):
        return None
    wdata = g.const(w.input[0])
    if wdata is None:
        return None
    if n.op_type == "Conv":
        axis, channels = 0, wdata.shape[0]
    elif n.op_type == "MatMul":
        axis, channels = 1, wdata.shape[-1]
        if wdata.ndim != 2:
            return None
    else:  # Gemm: Y = A B' + C with alpha = beta = 1 (other scalings stay float)
        if _attr(n, "transA", 0) or _attr(n, "alpha", 1.0) != 1.0 or _attr(n, "beta", 1.0) != 1.0:
            return None
        axis = 0 if _attr(n, "transB", 0) else 1
        channels = wdata.shape[axis]
    if not _weight_ok(g, w, axis, channels):
        return None
    if not _bias_ok(g, b, g.qparams(x)[0], g.qparams(w)[0]):
        return None
    ok, clamp = _clamp(g, act, q)
    return Fusion(n, x, w, b, act, q, clamp) if ok else None


def _match_pool(g: _Graph, n: onnx.NodeProto) -> Fusion | None:
    """DQ -> GlobalAveragePool -> Q, both per tensor: an int32 sum, requantised (QLinearGlobalAveragePool)."""
    if n.domain not in ("", "ai.onnx") or n.op_type != "GlobalAveragePool":
        return None
    x, q = g.dq(n.input[0]), g.only_consumer(n.output[0])
    if x is None or q is None or q.op_type != "QuantizeLinear" or not _per_tensor(g, x) or not _per_tensor(g, q):
        return None
    return Fusion(n, x, None, None, None, q, None)


# ops that only move or select values: Q(op(DQ(v))) == op(v) when the DQ and Q have the same parameters
# (DQ is monotonic and Q inverts it), so between such a pair they run on the quantised values as they are
MOVES = frozenset({"MaxPool", "GlobalMaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"})


def _match_move(g: _Graph, n: onnx.NodeProto) -> Fusion | None:
    """DQ -> MaxPool / Reshape / ... -> Q with the DQ's own per-tensor scale and zero point."""
    if n.domain not in ("", "ai.onnx") or n.op_type not in MOVES or not n.input:
        return None
    x, q = g.dq(n.input[0]), g.only_consumer(n.output[0])
    if x is None or q is None or q.op_type != "QuantizeLinear" or not _per_tensor(g, x) or not _per_tensor(g, q):
        return None
    (xs, xz), (qs, qz) = g.qparams(x), g.qparams(q)
    same = xz.dtype == qz.dtype and xs.reshape(()) == qs.reshape(()) and xz.reshape(()) == qz.reshape(())
    return Fusion(n, x, None, None, None, q, None) if same else None


def fusions(model: onnx.ModelProto) -> list[Fusion]:
    """Every QDQ layer of the model that `fuse_qdq` rewrites into an integer op."""
    g = _Graph(model.graph)
    found = (_match(g, n) or _match_pool(g, n) or _match_move(g, n) for n in model.graph.node)
    return [f for f in found if f is not None]


def _qparam_inputs(n: onnx.NodeProto) -> list[str]:
    """A Q/DQ node's scale and zero point ("" for a missing zero point: the op's default uint8 0)."""
    return [n.input[1], n.input[2] if len(n.input) > 2 else ""]


def _integer_nodes(f: Fusion, zp_dtype: np.dtype) -> list[onnx.NodeProto]:
    """The integer op for one fusion, then its clamp (Max / Min with constants of the output's type, fused
    into the op's epilogue), writing the QuantizeLinear's output."""
    x = [f.x.input[0], *_qparam_inputs(f.x)]
    y = _qparam_inputs(f.q)
    dst = f.q.output[0]
    if f.op.op_type == "GlobalAveragePool":
        return [helper.make_node("QLinearGlobalAveragePool", x + y, [dst], name=f.op.name or dst, domain=MS_DOMAIN)]
    if f.op.op_type in MOVES:
        moved = onnx.NodeProto()
        moved.CopyFrom(f.op)
        moved.input[0], moved.output[0] = f.x.input[0], dst
        return [moved]
    w = [f.w.input[0], *_qparam_inputs(f.w)]
    out = dst if f.clamp is None else f"{dst}_ep_unclamped"
    name = f.op.name or dst
    bias = [f.b.input[0]] if f.b is not None else []
    attrs = {a.name: helper.get_attribute_value(a) for a in f.op.attribute}
    if f.op.op_type == "Conv":
        nodes = [helper.make_node("QLinearConv", x + w + y + bias, [out], name=name, **attrs)]
    elif f.op.op_type == "MatMul":
        nodes = [helper.make_node("QLinearMatMul", x + w + y, [out], name=name)]
    else:
        tb = {k: v for k, v in attrs.items() if k == "transB"}
        nodes = [helper.make_node("QGemm", x + w + (bias or [""]) + y, [out], name=name, domain=MS_DOMAIN, **tb)]
    if f.clamp is None:
        return nodes
    (lo, hi), mid = f.clamp, f"{dst}_ep_clamped_below"

    def const(name: str, v: int) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, zp_dtype)))

    return [const(f"{dst}_ep_lo", lo), const(f"{dst}_ep_hi", hi), *nodes,
            helper.make_node("Max", [out, f"{dst}_ep_lo"], [mid], name=f"{name}_clamp_lo"),
            helper.make_node("Min", [mid, f"{dst}_ep_hi"], [dst], name=f"{name}_clamp_hi")]


def fuse_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every matched QDQ layer as one integer op; DequantizeLinear nodes left without a
    consumer are removed. A model without such layers comes back unchanged."""
    found = fusions(model)
    if not found:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    graph = _Graph(g)
    by_op = {f.op.output[0]: f for f in found}
    drop = {n.output[0] for f in found for n in (f.op, f.act, f.q) if n is not None}
    nodes: list[onnx.NodeProto] = []
    for n in g.node:
        if n.output and n.output[0] in by_op:
            f = by_op[n.output[0]]
            nodes += _integer_nodes(f, graph.qparams(f.q)[1].dtype)
        elif not (n.output and n.output[0] in drop):
            nodes.append(n)
    del g.node[:]
    g.node.extend(_without_dead_dequantize(nodes, {o.name for o in g.output}))
    if any(n.domain == MS_DOMAIN for n in g.node) and not any(o.domain == MS_DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return m


def _without_dead_dequantize(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    used = {i for n in nodes for i in n.input} | outputs
    return [n for n in nodes if n.op_type != "DequantizeLinear" or n.output[0] in used]


# -- integer ops with a fixed-point requantisation ------------------------------------------------------------

EP_DOMAIN = "ai.edgepack"  # edgepack's internal ops (never in a user's model: check_ops runs before this)
INTEGER_OPS = {"QLinearConv": "EpQConv", "QLinearMatMul": "EpQMatMul", "QGemm": "EpQMatMul"}


def fixed_point(m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """A float32 multiplier as m0 * 2^-shift, m0 in [2^30, 2^31) (TFLite's and CMSIS-NN's form): exact, since
    float32 has a 24-bit mantissa. None when a multiplier is >= 2^30 or negative (left as float code)."""
    m = np.asarray(m, np.float64)
    if (m < 0).any() or (m >= 2.0**30).any():
        return None
    f, e = np.frexp(m)
    m0, shift = np.round(f * 2.0**31).astype(np.int64), (31 - e).astype(np.int64)
    m0 = np.minimum(m0, 2**31 - 1)  # a float64 multiplier just under a power of two rounds up to 2^31: int32 holds m0
    big = shift > 62  # a multiplier under 2^-32: drop low bits of m0 so the shift stays within int64
    m0 = np.where(big, m0 >> np.minimum(shift - 62, 62), m0)
    shift = np.where(m == 0, 1, np.minimum(shift, 62))
    return m0, shift


def requantize_reference(acc: np.ndarray, m0: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """round_half_even(acc * m0 / 2^shift) in int64: what the kernels' epilogue computes (model/quant.py)."""
    v = acc.astype(np.int64) * m0
    return (v + ((np.int64(1) << (shift - 1)) - 1) + ((v >> shift) & 1)) >> shift


def _integer_op(g: _Graph, n: onnx.NodeProto, word_bits: int) -> list[onnx.NodeProto] | None:
    """QLinearConv / QLinearMatMul / QGemm -> EpQConv / EpQMatMul, when the weight is a constant with zero
    zero points: the activation's zero point then folds into the int32 bias (b - x_zp * sum(w)), and the
    kernel multiplies the int8 tensors as they are. None: left to model/quant.py's general converters."""
    if n.domain not in ("", "ai.onnx", MS_DOMAIN) or INTEGER_OPS.get(n.op_type) is None:
        return None
    ins = list(n.input) + [""] * 9
    if n.op_type == "QGemm":
        x, xs, xzp, w, ws, wzp, b, ys, yzp = ins[:9]
        if _attr(n, "transA", 0) or _attr(n, "alpha", 1.0) != 1.0 or not ys:
            return None
    else:
        x, xs, xzp, w, ws, wzp, ys, yzp = ins[:8]
        b = ins[8] if n.op_type == "QLinearConv" else ""
    vals = {k: g.const(v) if v else None for k, v in dict(xs=xs, xzp=xzp, w=w, ws=ws, wzp=wzp, ys=ys, yzp=yzp).items()}
    bias = g.const(b) if b else np.zeros((), np.int32)
    if any(vals[k] is None for k in ("xs", "w", "ws", "ys")) or bias is None or vals["w"].dtype not in _INT8:
        return None
    wv = vals["w"].astype(np.int64)
    if n.op_type == "QGemm" and _attr(n, "transB", 0):
        wv = wv.T
    conv = n.op_type == "QLinearConv"
    if (conv and (wv.ndim != 4 or _attr(n, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"))) or \
            (not conv and wv.ndim != 2):
        return None
    if vals["wzp"] is not None and vals["wzp"].any():
        return None  # sum(x) per output would be needed: the general converter
    if vals["xs"].size != 1 or vals["ys"].size != 1 or any(vals[z] is not None and vals[z].size != 1
                                                             for z in ("xzp", "yzp")):
        return None
    zx = int(vals["xzp"].reshape(())) if vals["xzp"] is not None else 0
    out_dtype = vals["yzp"].dtype if vals["yzp"] is not None else np.dtype(np.uint8)
    mult = (vals["xs"].astype(np.float32).reshape(()) * vals["ws"].astype(np.float32)) / \
        vals["ys"].astype(np.float32).reshape(())  # float32, onnxruntime's order
    fp = fixed_point(mult.astype(np.float32))
    if fp is None:
        return None
    channels = wv.shape[0] if conv else wv.shape[1]
    wsum = wv.reshape(channels, -1).sum(1) if conv else wv.sum(0)
    folded = np.broadcast_to(bias.astype(np.int64), (channels,)) - zx * wsum
    if np.abs(folded).max(initial=0) >= 2**31:
        return None
    shape = (1, channels, 1, 1) if conv else (channels,)

    def per(a) -> np.ndarray:  # per channel in the output's layout, or a scalar
        return np.broadcast_to(a, (channels,)).reshape(shape) if np.size(a) > 1 else np.asarray(a).reshape(())

    m0, shift = fp
    base = n.output[0]
    consts = {f"{base}_ep_bias": folded.astype(np.int32).reshape(shape), f"{base}_ep_m0": per(m0).astype(np.int32),
              f"{base}_ep_shift": per(shift).astype(np.int32)}  # m0 < 2^31, shift 1..62
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.ascontiguousarray(v)))
             for k, v in consts.items()]
    wname = w
    if n.op_type == "QGemm" and _attr(n, "transB", 0):
        wname = f"{base}_ep_weight"
        nodes.append(helper.make_node("Transpose", [w], [wname], perm=[1, 0]))
    lo, hi = _LIMITS[np.dtype(out_dtype)]
    attrs = dict(x_zero_point=zx, y_zero_point=int(vals["yzp"].reshape(())) if vals["yzp"] is not None else 0,
                 lo=lo, hi=hi, signed=int(np.dtype(out_dtype) == np.int8),
                 high_word=int(word_bits == 32 and bool((shift >= 33).all())))  # model/quant.py's _requantize_te
    if conv:
        attrs |= {a.name: helper.get_attribute_value(a) for a in n.attribute
                  if a.name in ("pads", "strides", "dilations", "group")}
    nodes.append(helper.make_node(INTEGER_OPS[n.op_type], [x, wname, *consts], [base], name=n.name,
                                  domain=EP_DOMAIN, **attrs))
    return nodes


def integer_ops(model: onnx.ModelProto, word_bits: int = 64) -> onnx.ModelProto:
    """QDQ layers fused (`fuse_qdq`), then every integer op with a constant weight as an EpQConv / EpQMatMul.
    word_bits: the board's integer registers (Board.word_bits), which choose the requantisation's arithmetic."""
    m = fuse_qdq(model)
    g = _Graph(m.graph)
    rewritten = [(n, _integer_op(g, n, word_bits)) for n in m.graph.node]
    if not any(r for _, r in rewritten):
        return m
    out = onnx.ModelProto()
    out.CopyFrom(m)
    del out.graph.node[:]
    out.graph.node.extend([x for n, r in rewritten for x in (r or [n])])
    if not any(o.domain == EP_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(EP_DOMAIN, 1))
    return out
