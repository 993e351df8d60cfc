"""Quantised ONNX models (issue 14, step 1): edgepack's converters for the quantised operators, and what
`edgepack inspect` reports about each quantised node.

Formats: QDQ (QuantizeLinear / DequantizeLinear around float ops, onnxruntime's `quantize_static` default),
QOperator (QLinearConv, QLinearMatMul, and onnxruntime's com.microsoft QLinearAdd, QLinearMul, QGemm,
QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu), MatMulInteger / ConvInteger and
DynamicQuantizeLinear (`quantize_dynamic`).

Numerics, chosen to match onnxruntime's CPU kernels (tests/test_quant_import.py: within 1 LSB):
- Rounding is ONNX's: half to even, then saturation to the integer type. It is written here as Relax
  arithmetic (floor, compare, select), so it is the same on every target: TVM lowers `round` to llvm's
  nearbyint for LLVM objects but to C `round` (half away from zero) in C source (Cortex-M).
- QLinearConv, QLinearMatMul, QGemm, MatMulInteger, ConvInteger accumulate in int32, exactly as onnxruntime
  does; the requantisation multiplier is x_scale * w_scale / y_scale in float32 (onnxruntime's order), applied
  to the int32 accumulator in float32, rounded half to even, plus the output zero point, saturated.
- The element-wise QOperator ops (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu) run in float:
  dequantize -> float op -> quantize. QLinearGlobalAveragePool sums in int32.
- QDQ models: TVM's DequantizeLinear (float32 (x - zp) * scale) and edgepack's QuantizeLinear; the float
  op between them runs in float, as onnxruntime runs it with graph optimisations off.

How each node runs is reported by model/quant_report.py (`edgepack inspect`).
"""

from __future__ import annotations

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as frontend

from ..errors import ModelError

# -- Relax helpers ----------------------------------------------------------------------------------------

_LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}


def _dtype(x: relax.Expr) -> str:
    return str(x.ty.dtype)


def _ndim(x: relax.Expr) -> int:
    return len(x.ty.shape.values)


def _value(x):
    """The numpy value of a constant operand (scales and zero points usually are), else None."""
    if isinstance(x, tvm.ir.GenericConst):
        return x.value.numpy()
    return None


def _cast(bb, x, dtype: str):
    if _dtype(x) == dtype:
        return x
    v = _value(x)  # constants are cast here: a scalar cast left in a fused conv breaks its schedule
    return relax.const(v.astype(dtype), dtype) if v is not None else bb.emit(relax.op.astype(x, dtype))


def _f32(bb, x):
    return _cast(bb, x, "float32")


def _i32(bb, x):
    return _cast(bb, x, "int32")


def _c(v: float, dtype: str = "float32"):
    return relax.const(v, dtype)


def _elements(x) -> int | None:
    n = 1
    for d in x.ty.shape.values:
        if not isinstance(d, tvm.tirx.IntImm):
            return None
        n *= int(d)
    return n


def _along(bb, p, axis: int, ndim: int):
    """A scale or zero point (scalar, or 1-D along `axis`) shaped to broadcast against a rank-ndim tensor."""
    if p is None or _ndim(p) == 0:
        return p
    if _ndim(p) != 1:
        raise ModelError(f"a quantisation parameter of rank {_ndim(p)} is not supported (blocked quantisation); "
                         "use per-tensor or per-axis scales")
    if ndim <= 1:
        return p
    shape = [-1] + [1] * (ndim - 1 - axis)
    v = _value(p)
    return relax.const(v.reshape(shape), _dtype(p)) if v is not None else bb.emit(relax.op.reshape(p, shape))


def round_half_even(bb, v):
    """ONNX's rounding of float32 `v`, from floor and compares (the same on every target).

    v is compared with floor(v) + 0.5 (exact) rather than v - floor(v) with 0.5: when v is a product, LLVM
    may contract v - floor(v) into one fused multiply-add, whose unrounded product decides a near-tie
    differently from onnxruntime (seen: 1 LSB in a uint8 QLinearConv). A compare is never contracted."""
    f = bb.emit(relax.op.floor(v))
    half = _c(0.5)
    mid = bb.emit(relax.op.add(f, half))
    odd = relax.op.subtract(f, relax.op.multiply(_c(2.0), relax.op.floor(relax.op.multiply(f, half))))
    tie = bb.emit(relax.op.add(f, odd))
    up = bb.emit(relax.op.add(f, _c(1.0)))
    return bb.emit(relax.op.where(relax.op.greater(v, mid), up, relax.op.where(relax.op.less(v, mid), f, tie)))


def _is_zero(zp) -> bool:
    """A constant all-zero zero point (or none): subtracting or adding it changes nothing."""
    return zp is None or (_value(zp) is not None and not _value(zp).any())


def saturate(bb, v, zp, dtype: str):
    """round_half_even(v) + zp, saturated to `dtype` (v: the value divided by its scale, float32)."""
    if dtype not in _LIMITS:
        raise ModelError(f"quantisation to {dtype} is not supported (int8, uint8, int16 and uint16 are)")
    r = round_half_even(bb, v)
    if not _is_zero(zp):
        r = bb.emit(relax.op.add(r, _f32(bb, zp)))
    lo, hi = _LIMITS[dtype]
    r = bb.emit(relax.op.minimum(relax.op.maximum(r, _c(float(lo))), _c(float(hi))))
    return bb.emit(relax.op.astype(r, dtype))


def dequantize(bb, x, scale, zp, axis: int = 1):
    """float32 (x - zp) * scale, per tensor or along `axis`."""
    nd = _ndim(x)
    axis = axis % nd if nd else 0
    return bb.emit(relax.op.multiply(_f32(bb, _centered(bb, x, zp, axis)), _f32(bb, _along(bb, scale, axis, nd))))


def quantize(bb, x, scale, zp, dtype: str, axis: int = 1):
    nd = _ndim(x)
    axis = axis % nd if nd else 0
    v = bb.emit(relax.op.divide(_f32(bb, x), _f32(bb, _along(bb, scale, axis, nd))))
    return saturate(bb, v, _along(bb, zp, axis, nd), dtype)


def _opt(inputs, i):
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def _zp_dtype(zp, default: str = "uint8") -> str:
    return _dtype(zp) if zp is not None else default


def _centered(bb, x, zp, axis: int):
    """int32 (x - zp): the integer operand of an int32-accumulating op."""
    xi = _i32(bb, x)
    if _is_zero(zp):
        return xi
    return bb.emit(relax.op.subtract(xi, _i32(bb, _along(bb, zp, axis, _ndim(x)))))


def _requantize(bb, acc, x_scale, w_scale, y_scale, y_zp, dtype: str, axis: int, alpha: float = 1.0):
    """int32 accumulator -> quantised output: float32(acc) * (x_scale * w_scale / y_scale), as onnxruntime."""
    nd = _ndim(acc)
    xs, ws, ys = (_value(_f32(bb, s)) for s in (x_scale, w_scale, y_scale))
    if xs is not None and ws is not None and ys is not None:  # float32 arithmetic, in onnxruntime's order
        m = (np.float32(alpha) * xs * ws if alpha != 1.0 else xs * ws) / ys
        mult = relax.const(m.astype(np.float32), "float32")
    else:
        mult = relax.op.multiply(_f32(bb, x_scale), _f32(bb, w_scale))
        if alpha != 1.0:
            mult = relax.op.multiply(_c(alpha), mult)
        mult = bb.emit(relax.op.divide(mult, _f32(bb, y_scale)))
    v = bb.emit(relax.op.multiply(_f32(bb, acc), _along(bb, mult, axis, nd)))
    return saturate(bb, v, y_zp, dtype)


# -- converters -------------------------------------------------------------------------------------------

def _axis_attr(attr, x) -> int:
    axis = attr.get("axis", 1)
    nd = _ndim(x)
    if nd <= 1 and axis == 1:
        return 0
    return axis % nd if nd else 0


class QuantizeLinear(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        if attr.get("block_size", 0):
            raise ModelError("QuantizeLinear with block_size (blocked quantisation) is not supported")
        x, scale, zp = inputs[0], inputs[1], _opt(inputs, 2)
        out = attr.get("output_dtype", 0)
        dtype = _zp_dtype(zp, onnx.helper.tensor_dtype_to_np_dtype(out).name if out else "uint8")
        return quantize(bb, x, scale, zp, dtype, _axis_attr(attr, x))


class DynamicQuantizeLinear(frontend.OnnxOpConverter):
    """ONNX's definition (and onnxruntime's): the range [min(x, 0), max(x, 0)] onto uint8; scale 1/255 when
    that range is empty."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        x = _f32(bb, inputs[0])
        hi = bb.emit(relax.op.maximum(_c(0.0), relax.op.max(x)))
        lo = bb.emit(relax.op.minimum(_c(0.0), relax.op.min(x)))
        span = relax.op.where(relax.op.equal(hi, lo), _c(1.0), relax.op.subtract(hi, lo))
        scale = bb.emit(relax.op.divide(span, _c(255.0)))
        zp0 = bb.emit(relax.op.subtract(_c(0.0), relax.op.divide(lo, scale)))
        zp0 = bb.emit(relax.op.minimum(relax.op.maximum(zp0, _c(0.0)), _c(255.0)))
        zp = bb.emit(relax.op.astype(round_half_even(bb, zp0), "uint8"))
        y = quantize(bb, x, scale, zp, "uint8", 0)
        return relax.Tuple([y, scale, zp])


def _conv(bb, x, w, attr, params):
    """TVM's Conv converter on already-prepared operands (int32 or float32), no bias."""
    return bb.emit(frontend.Conv._impl_v11(bb, [x, w, None], dict(attr), params))


class ConvInteger(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, w, x_zp, w_zp = inputs[0], inputs[1], _opt(inputs, 2), _opt(inputs, 3)
        return _conv(bb, _centered(bb, x, x_zp, 1), _centered(bb, w, w_zp, 0), attr, params)


class QLinearConv(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
        bias = _opt(inputs, 8)
        acc = _conv(bb, _centered(bb, x, x_zp, 1), _centered(bb, w, w_zp, 0), attr, params)
        if bias is not None:
            acc = bb.emit(relax.op.add(acc, _along(bb, _i32(bb, bias), 1, _ndim(acc))))
        return _requantize(bb, acc, x_scale, w_scale, y_scale, y_zp, _zp_dtype(y_zp), 1)


class QLinearMatMul(frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs[:8]
        if _ndim(b) != 2 and any(p is not None and _elements(p) != 1 for p in (b_scale, b_zp)):
            raise ModelError("QLinearMatMul with per-column scales on a batched B is not supported")
        acc = bb.emit(relax.op.matmul(_centered(bb, a, a_zp, 0), _centered(bb, b, b_zp, 1), out_dtype="int32"))
        return _requantize(bb, acc, a_scale, b_scale, y_scale, y_zp, _zp_dtype(y_zp), _ndim(acc) - 1)


class QGemm(frontend.OnnxOpConverter):
    """com.microsoft QGemm: Y = alpha * (A' - a_zp)(B' - b_zp) + C (C int32, scale a_scale * b_scale),
    quantised by y_scale / y_zero_point, or float32 when y_scale is absent."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, a_scale, a_zp, b, b_scale, b_zp = inputs[:6]
        c, y_scale, y_zp = _opt(inputs, 6), _opt(inputs, 7), _opt(inputs, 8)
        alpha = float(attr.get("alpha", 1.0))
        ta, tb = attr.get("transA", 0), attr.get("transB", 0)
        ai = _centered(bb, a, a_zp, 0)
        bi = _centered(bb, b, b_zp, 0 if tb else 1)  # b_zp follows B's output columns
        if ta:
            ai = bb.emit(relax.op.permute_dims(ai, [1, 0]))
        if tb:
            bi = bb.emit(relax.op.permute_dims(bi, [1, 0]))
        acc = bb.emit(relax.op.matmul(ai, bi, out_dtype="int32"))
        if c is not None:
            acc = bb.emit(relax.op.add(acc, _i32(bb, c)))
        if y_scale is None:
            mult = bb.emit(relax.op.multiply(_c(alpha), relax.op.multiply(_f32(bb, a_scale), _f32(bb, b_scale))))
            return bb.emit(relax.op.multiply(_f32(bb, acc), _along(bb, mult, 1, 2)))
        return _requantize(bb, acc, a_scale, b_scale, y_scale, y_zp, _zp_dtype(y_zp), 1, alpha)


class _Binary(frontend.OnnxOpConverter):
    op = None

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, a_scale, a_zp, b, b_scale, b_zp, c_scale = inputs[:7]
        c_zp = _opt(inputs, 7)
        fa, fb = dequantize(bb, a, a_scale, a_zp), dequantize(bb, b, b_scale, b_zp)
        y = bb.emit(cls.op(fa, fb))
        return quantize(bb, y, c_scale, c_zp, _zp_dtype(c_zp))


class QLinearAdd(_Binary):
    op = staticmethod(relax.op.add)


class QLinearMul(_Binary):
    op = staticmethod(relax.op.multiply)


class _Unary(frontend.OnnxOpConverter):
    @classmethod
    def _f(cls, x, attr):
        raise NotImplementedError

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, x_scale, x_zp, y_scale = inputs[:4]
        y_zp = _opt(inputs, 4)
        y = bb.emit(cls._f(dequantize(bb, x, x_scale, x_zp), attr))
        return quantize(bb, y, y_scale, y_zp, _zp_dtype(y_zp))


class QLinearSigmoid(_Unary):
    @classmethod
    def _f(cls, x, attr):
        return relax.op.sigmoid(x)


class QLinearLeakyRelu(_Unary):
    @classmethod
    def _f(cls, x, attr):
        alpha = float(attr.get("alpha", 0.01))
        return relax.op.where(relax.op.less(x, _c(0.0)), relax.op.multiply(x, _c(alpha)), x)


class QLinearGlobalAveragePool(frontend.OnnxOpConverter):
    """int32 sum of the int8 values as they are (the cast inside the sum's own kernel, so the tensor before it
    stays int8), minus n * x_zp, requantised by x_scale / (y_scale * n) in fixed point (onnxruntime's
    multiplier, in float32)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        from tvm import te

        from .qdq_fuse import fixed_point

        x, x_scale, x_zp, y_scale = inputs[:4]
        y_zp = _opt(inputs, 4)
        nd = _ndim(x)
        last = bool(attr.get("channels_last", 0))
        axes = list(range(1, nd - 1)) if last else list(range(2, nd))
        shape = x.ty.shape.values
        n = 1
        for a in axes:
            if not hasattr(shape[a], "value"):
                raise ModelError("QLinearGlobalAveragePool over a dynamic spatial size is not supported")
            n *= int(shape[a].value)
        vals = [_value(v) if v is not None else np.zeros((), np.uint8) for v in (x_scale, x_zp, y_scale, y_zp)]
        if any(v is None for v in vals):
            raise ModelError("QLinearGlobalAveragePool with scales computed at run time is not supported")
        xs, zx, ys, zy = vals
        m = np.float32(xs.reshape(())) / (np.float32(ys.reshape(())) * np.float32(n))
        m0, shift = fixed_point(m)
        dtype = _zp_dtype(y_zp)

        def int_sum(data):
            red = [te.reduce_axis((0, shape[a]), name=f"r{a}") for a in axes]

            def f(*i):
                idx, k = [], 0
                for d in range(nd):
                    if d in axes:
                        idx.append(red[k])
                        k += 1
                    else:
                        idx.append(i[d])
                return te.sum(data(*idx).astype("int32"), axis=red)
            return te.compute([1 if d in axes else shape[d] for d in range(nd)], f, name="sum_int32")

        acc = bb.emit_te(int_sum, x, primfunc_name_hint="sum")
        i32 = lambda v: relax.const(np.int32(v), "int32")  # noqa: E731
        return _fixed_point_requantize(bb, acc, i32(-n * int(zx.reshape(()))), i32(m0), i32(shift),
                                       int(zy.reshape(())), dtype)


# -- edgepack's integer ops (model/qdq_fuse.py writes them) ----------------------------------------------------

def _fixed_point_requantize(bb, acc, bias, m0, shift, zp: int, dtype: str, high_word: bool = False):
    """int32 accumulator + bias -> round_half_even(acc * m0 / 2^shift) + zp, saturated to int8/uint8, the same on
    every target: one element-wise kernel (`_requantize_te`) that the conv or matmul before it takes in as its
    epilogue. model/qdq_fuse.py's `fixed_point` makes m0 (< 2^31) and shift (1..62), `requantize_reference`
    is the same arithmetic in numpy. bias, m0 and shift go in as int32 constants, widened inside the kernel:
    as Relax casts they would be folded back into int64 constants (4 B a channel more each, and a full 64 x 64
    multiply on every output). high_word: every shift is >= 33 and the board is a 32-bit core
    (`_requantize_te`)."""
    args = [_int32(bb, x) for x in (bias, m0, shift)]
    return bb.emit_te(_requantize_te, acc, *args, zp=zp, dtype=dtype, high_word=high_word,
                      primfunc_name_hint="requantize")


def _int32(bb, x):
    v = _value(x)
    return relax.const(v.astype(np.int32), "int32") if v is not None else _cast(bb, x, "int32")


def _requantize_te(acc, bias, m0, shift, zp: int, dtype: str, high_word: bool = False):
    """The requantisation as one te.compute. v = (acc + bias) * m0 is a 32 x 32 -> 64 multiply (SMULL on Arm,
    vpmuldq on x86; acc + bias is int32, as in onnxruntime). Its rounding shift runs on v + 2^63 as uint64,
    which is never negative: x86 before AVX-512 has no arithmetic shift of 64-bit lanes, and LLVM spends a
    dozen instructions on each; a logical one is one. Adding 2^63 adds 2^(63 - shift), an even number, to
    floor(v / 2^shift): the same parity (the half-to-even tie), subtracted again at the end.

    high_word (every shift >= 33): only v's high 32-bit word and whether its low word is 0 are needed, and the
    rest is int32 arithmetic: on a 32-bit core (Cortex-M) one SMULL and a dozen 32-bit instructions instead of
    64-bit variable shifts (an int8 DS-CNN on mps2-an386: 18% fewer instructions). Not on 64-bit hosts: there
    the uint64 form vectorises better (measured slower on AVX2)."""
    from tvm import te, tirx

    lo, hi_lim = _LIMITS[dtype]
    one_u, one_i = tirx.const(1, "uint64"), tirx.const(1, "int64")

    def at(p, idx):  # p broadcast against acc (numpy rules: p's dims are 1 or acc's)
        idx = idx[len(idx) - len(p.shape):] if len(p.shape) else ()
        return p[tuple(0 if int(d) == 1 else i for d, i in zip(p.shape, idx))] if idx else p()

    def product(i):
        # TVM rewrites int64(acc + bias) as int64(acc) + int64(bias), which LLVM cannot prove fits 32 bits: it
        # then multiplies 64 x 64 (6 vpmuludq, not 1 vpmuldq). (x << 32) >> 32 says so (LLVM's sign_extend_inreg).
        t = (acc[i] + at(bias, i)).astype("int64")
        return ((t << 32) >> 32) * at(m0, i).astype("int64")

    def f_high_word(*i):
        # floor((v + 2^(shift-1)) / 2^shift) = (hi + 2^(r-1)) >> r with r = shift - 32, as 2^(shift-1) has a zero
        # low word; a tie (to the even neighbour) is a zero low word and hi = q * 2^r - 2^(r-1). Two guards
        # against TVM's simplifier: r is masked to 0..31 (a shift by an unbounded amount gets a bogus bound,
        # [-2, 1], and the clamp to int8 is then dropped) and so is the low word (it takes int32(v) == 0 for v == 0).
        v = product(i)
        hi, r = (v >> 32).astype("int32"), (at(shift, i) - 32) & 31
        half = (tirx.const(1, "int32") << r) >> 1
        q = (hi + half) >> r
        tie = tirx.all((v & tirx.const(0xFFFFFFFF, "int64")) == tirx.const(0, "int64"), (q << r) - half == hi)
        q = q - tirx.Select(tie, q & 1, tirx.const(0, "int32")) + zp
        return te.min(te.max(q, tirx.const(lo, "int32")), tirx.const(hi_lim, "int32")).astype(dtype)

    def f(*i):
        v, s = product(i), at(shift, i)
        u = v.astype("uint64") ^ tirx.const(1 << 63, "uint64")
        su = s.astype("uint64")
        odd = (u >> su) & one_u
        q = ((u + ((one_u << (su - one_u)) - one_u) + odd) >> su).astype("int64")
        q = q - (one_i << (63 - s).astype("int64")) + zp
        return te.min(te.max(q, tirx.const(lo, "int64")), tirx.const(hi_lim, "int64")).astype(dtype)

    return te.compute(acc.shape, f_high_word if high_word else f, name="requantize")


def _ep_requantize(bb, acc, inputs, attr):
    """The requantisation of an EpQConv / EpQMatMul: bias, m0 and shift (int32) are its inputs 2-4."""
    return _fixed_point_requantize(bb, acc, *inputs[2:5], int(attr["y_zero_point"]),
                                   "int8" if attr["signed"] else "uint8", bool(attr.get("high_word", 0)))


class EpQConv(frontend.OnnxOpConverter):
    """int8/uint8 x int8 -> int32 conv2d on the tensors as they are (the input's zero point is in the bias),
    then the fixed-point requantisation. A padded input is padded with its zero point, inside the conv's own
    kernel as TVM pads a float conv with zeros (a separate pad would be a kernel and a tensor of its own)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        from tvm import topi

        x, w = inputs[0], inputs[1]
        t, left, b, r = (list(attr.get("pads", [0, 0, 0, 0])) + [0] * 4)[:4]
        zx = int(attr.get("x_zero_point", 0))
        conv = dict(stride=tuple(attr.get("strides", [1, 1])), dilation=tuple(attr.get("dilations", [1, 1])),
                    groups=int(attr.get("group", 1)), data_layout="NCHW", kernel_layout="OIHW", out_dtype="int32")

        def padded_conv(data, weight):
            data = topi.nn.pad(data, [0, 0, t, left], [0, 0, b, r], pad_value=zx, name="pad_temp")
            return topi.nn.conv(data, weight, padding=0, **conv)

        if zx and (t or left or b or r):
            acc = bb.emit_te(padded_conv, x, w, primfunc_name_hint="conv2d")
        else:
            acc = bb.emit_te(topi.nn.conv, x, w, padding=(t, left, b, r), **conv, primfunc_name_hint="conv2d")
        return _ep_requantize(bb, acc, inputs, attr)


class EpQMatMul(frontend.OnnxOpConverter):
    """int8/uint8 x int8 -> int32 matmul (W[k, n] a constant), then the fixed-point requantisation."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        acc = bb.emit(relax.op.matmul(inputs[0], inputs[1], out_dtype="int32"))
        return _ep_requantize(bb, acc, inputs, attr)


def converters() -> dict:
    """Added to (and, for QuantizeLinear and DynamicQuantizeLinear, replacing) TVM's converter map."""
    return {c.__name__: c for c in (QuantizeLinear, DynamicQuantizeLinear, ConvInteger, QLinearConv,
                                    QLinearMatMul, QGemm, QLinearAdd, QLinearMul, QLinearSigmoid,
                                    QLinearLeakyRelu, QLinearGlobalAveragePool, EpQConv, EpQMatMul)}


# -- ONNX rewrite before import -----------------------------------------------------------------------------

# inputs that are scales and zero points, per quantised op (bias and weights stay initializers)
_QPARAMS = {"QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "MatMulInteger": (2, 3), "ConvInteger": (2, 3),
            "QLinearConv": (1, 2, 4, 5, 6, 7), "QLinearMatMul": (1, 2, 4, 5, 6, 7), "QGemm": (1, 2, 4, 5, 7, 8),
            "QLinearAdd": (1, 2, 4, 5, 6, 7), "QLinearMul": (1, 2, 4, 5, 6, 7), "QLinearSigmoid": (1, 2, 3, 4),
            "QLinearLeakyRelu": (1, 2, 3, 4), "QLinearGlobalAveragePool": (1, 2, 3, 4)}
_QPARAM_MAX = 4096  # elements: per-channel scales of any real layer


def constant_qparams(model: onnx.ModelProto) -> onnx.ModelProto:
    """Scales and zero points that are initializers become Constant nodes (Relax constants): TVM would keep
    them as run-time function inputs, and the requantisation multiplier is then computed at build time."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    wanted = {n.input[i] for n in g.node if n.op_type in _QPARAMS for i in _QPARAMS[n.op_type] if i < len(n.input)}
    move = [inits[w] for w in sorted(wanted) if w in inits and w not in graph_inputs
            and int(np.prod(inits[w].dims)) <= _QPARAM_MAX]
    if not move:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    names = {t.name for t in move}
    keep = [t for t in g.initializer if t.name not in names]
    consts = [onnx.helper.make_node("Constant", [], [t.name], name=f"{t.name}_qparam",
                                    value=numpy_helper.from_array(numpy_helper.to_array(t), t.name)) for t in move]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return m
