"""LSTM and GRU as TIR kernels: the time axis is a dynamic dim, so the time loop lives inside the kernel
(serial), with the gates as matrix-vector products over the hidden state of the step before.

One kernel per direction, shared by both cells: per batch row it copies the initial state, then per step
projects the input and the hidden state onto the gates and applies the cell's update. Directions forward,
reverse and bidirectional (two kernels, stacked), layouts 0 and 1 (transposes around the kernel), bias,
initial state, sequence_lens (steps past a row's length give zeros in Y, as in onnxruntime), clip, LSTM
peepholes and GRU linear_before_reset follow the ONNX spec. Refused with one line: LSTM input_forget=1 and
activations outside `_activation`'s table.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as frontend
from tvm.script import tirx as T

from ..errors import ModelError
from .converters import call_kernel, shape_of

# Activations that read activation_alpha / activation_beta, with their ONNX defaults; each takes the next
# value of its list in the order of the activations, as onnxruntime reads them.
_ALPHA = {"HardSigmoid": 0.2, "LeakyRelu": 0.01}
_BETA = {"HardSigmoid": 0.5}


def _activation(name: str, alpha: float | None, beta: float | None, dtype: str):
    """ONNX's recurrent activation functions as TIR expressions (the ones real models use)."""
    c = lambda v: T.cast(v, dtype)  # noqa: E731
    table = {
        "Sigmoid": lambda x: T.sigmoid(x),
        "Tanh": lambda x: T.tanh(x),
        "Relu": lambda x: T.max(x, c(0)),
        "HardSigmoid": lambda x: T.max(T.min(c(alpha) * x + c(beta), c(1)), c(0)),
        "LeakyRelu": lambda x: T.if_then_else(x < c(0), c(alpha) * x, x),
        "Softsign": lambda x: x / (c(1) + T.fabs(x)),
    }
    if name not in table:
        raise ModelError(f"recurrent activation {name} is not supported (supported: {', '.join(table)})")
    return table[name]


def recurrent_kernel(cell: str, dtype: str, dirs: int, d: int, n_in: int, hidden: int, reverse: bool, has_lens: bool,
                     acts: list, clip: float | None, linear_before_reset: bool):
    """The kernel of direction `d` of one LSTM or GRU node, in layout 0: X (seq, batch, I) -> Y (seq, batch,
    H), Y_h and Y_c (batch, H). `acts`: the direction's f, g (and h for LSTM) as TIR functions. A GRU has no
    cell state: it gets one-element stand-ins for c0, P and Y_c (the kernel is shared)."""
    H, I, lstm = hidden, n_in, cell == "LSTM"
    gates_n = (4 if lstm else 3) * H
    f, g, h = (acts + [None])[:3]
    lim = lambda v: T.cast(v, dtype)  # noqa: E731
    clipped = (lambda x: T.max(T.min(x, lim(clip)), lim(-clip))) if clip is not None else (lambda x: x)  # noqa: E731
    F = lambda x: f(clipped(x))  # noqa: E731
    G = lambda x: g(clipped(x))  # noqa: E731

    @T.prim_func(private=True, s_tir=True)
    def recurrent(x_h: T.handle, w_h: T.handle, r_h: T.handle, b_h: T.handle, lens_h: T.handle, h0_h: T.handle,
                  c0_h: T.handle, p_h: T.handle, y_h: T.handle, yh_h: T.handle, yc_h: T.handle):
        T.func_attr({"tirx.noalias": True})
        seq, batch = T.int64(), T.int64()
        X = T.match_buffer(x_h, (seq, batch, I), dtype)
        W = T.match_buffer(w_h, (dirs, gates_n, I), dtype)
        R = T.match_buffer(r_h, (dirs, gates_n, H), dtype)
        B = T.match_buffer(b_h, (dirs, 2 * gates_n), dtype)
        lens = T.match_buffer(lens_h, (batch,) if has_lens else (1,), "int32")
        h0 = T.match_buffer(h0_h, (dirs, batch, H), dtype)
        c0 = T.match_buffer(c0_h, ((dirs, batch, H)) if lstm else (1, 1, 1), dtype)
        P = T.match_buffer(p_h, (dirs, 3 * H) if lstm else (1, 1), dtype)
        Y = T.match_buffer(y_h, (seq, batch, H), dtype)
        Yh = T.match_buffer(yh_h, (batch, H), dtype)
        Yc = T.match_buffer(yc_h, (batch, H) if lstm else (1, 1), dtype)
        gates = T.alloc_buffer((gates_n,), dtype)  # one step's pre-activations, then activations
        rec = T.alloc_buffer((H,), dtype)  # GRU: the hidden gate's recurrent term
        steps = T.alloc_buffer((2,), "int64")  # this row's length; this step's time index
        with T.sblock("recurrent"):
            for b in range(batch):
                steps[0] = T.min(T.max(T.cast(lens[b], "int64"), T.int64(0)), seq) if has_lens else seq
                for u in range(H):
                    Yh[b, u] = h0[d, b, u]
                    if lstm:
                        Yc[b, u] = c0[d, b, u]
                for s in range(seq):
                    if s < steps[0]:
                        steps[1] = steps[0] - 1 - s if reverse else s
                        # input and bias terms of every gate (GRU: the hidden gate's recurrent bias apart)
                        for q in range(gates_n):
                            gates[q] = B[d, q] + (B[d, gates_n + q] if lstm else
                                                  T.if_then_else(q < 2 * H, B[d, gates_n + q], lim(0)))
                            for k in range(I):
                                gates[q] = gates[q] + X[steps[1], b, k] * W[d, q, k]
                        for q in range(gates_n if lstm else 2 * H):
                            for k in range(H):
                                gates[q] = gates[q] + Yh[b, k] * R[d, q, k]
                        if lstm:  # gates i o f c, peepholes i o f
                            for u in range(H):
                                gates[u] = F(gates[u] + P[d, u] * Yc[b, u])
                                gates[2 * H + u] = F(gates[2 * H + u] + P[d, 2 * H + u] * Yc[b, u])
                                Yc[b, u] = gates[2 * H + u] * Yc[b, u] + gates[u] * G(gates[3 * H + u])
                                gates[H + u] = F(gates[H + u] + P[d, H + u] * Yc[b, u])
                                Yh[b, u] = gates[H + u] * h(Yc[b, u])
                                Y[steps[1], b, u] = Yh[b, u]
                        else:  # gates z r h
                            for u in range(2 * H):
                                gates[u] = F(gates[u])
                            for u in range(H):
                                rec[u] = B[d, gates_n + 2 * H + u]
                                for k in range(H):
                                    rec[u] = rec[u] + (Yh[b, k] if linear_before_reset
                                                       else gates[H + k] * Yh[b, k]) * R[d, 2 * H + u, k]
                            for u in range(H):
                                gates[2 * H + u] = G(gates[2 * H + u] + (gates[H + u] * rec[u] if linear_before_reset
                                                                         else rec[u]))
                                Yh[b, u] = (lim(1) - gates[u]) * gates[2 * H + u] + gates[u] * Yh[b, u]
                                Y[steps[1], b, u] = Yh[b, u]
                    else:
                        for u in range(H):
                            Y[s, b, u] = lim(0)

    return recurrent


class _Recurrent(frontend.OnnxOpConverter):
    """Inputs X, W, R, B, sequence_lens, initial_h (and initial_c, P for LSTM); outputs Y, Y_h (and Y_c)."""

    cell = ""
    default_acts: tuple[str, ...] = ()

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        inputs = [inputs[i] if i < len(inputs) else None for i in range(8)]
        layout = int(attr.get("layout", 0))
        if layout:  # batch-major X, initial_h and initial_c to the kernel's time-major layout
            inputs = [bb.emit(relax.op.permute_dims(v, [1, 0, 2])) if i in (0, 5, 6) and v is not None else v
                      for i, v in enumerate(inputs)]
        dtype = str(inputs[0].ty.dtype)
        dirs = int(shape_of(inputs[1])[0])
        reverse = attr.get("direction", b"forward").decode() == "reverse"
        acts = cls._activations(attr, dirs, dtype)
        args = cls._kernel_args(inputs, dtype)
        n_out = 3 if cls.cell == "LSTM" else 2
        per_dir = [cls._direction(bb, args, d, reverse or d == 1, acts[d], attr, inputs[4] is not None)[:n_out]
                   for d in range(dirs)]
        # (seq, dirs, batch, H) and (dirs, batch, H), as ONNX's layout 0 writes them
        outs = [bb.emit(relax.op.stack(list(vs), axis=1 if i == 0 else 0)) for i, vs in enumerate(zip(*per_dir))]
        if layout:  # -> (batch, seq, dirs, H) and (batch, dirs, H)
            outs = [bb.emit(relax.op.permute_dims(v, [2, 0, 1, 3] if i == 0 else [1, 0, 2]))
                    for i, v in enumerate(outs)]
        return relax.Tuple(outs)

    @classmethod
    def _kernel_args(cls, inputs, dtype: str) -> list:
        """The kernel's inputs, absent ones as zeros (GRU: one-element stand-ins for c0 and P)."""
        x, w = inputs[0], inputs[1]
        dirs, gates_n, _ = (int(v) for v in shape_of(w))
        hidden = gates_n // (4 if cls.cell == "LSTM" else 3)
        batch = shape_of(x)[1]
        lens = inputs[4] if inputs[4] is not None else relax.const(np.zeros(1, "int32"))
        state = (dirs, batch, hidden) if cls.cell == "LSTM" else (1, 1, 1)
        peep = (dirs, 3 * hidden) if cls.cell == "LSTM" else (1, 1)
        return [x, w, inputs[2], _or_zeros(inputs[3], (dirs, 2 * gates_n), dtype), lens,
                _or_zeros(inputs[5], (dirs, batch, hidden), dtype), _or_zeros(inputs[6], state, dtype),
                _or_zeros(inputs[7], peep, dtype)]

    @classmethod
    def _direction(cls, bb, args: list, d: int, reverse: bool, acts: list, attr, has_lens: bool) -> list:
        """Y (seq, batch, H), Y_h and Y_c (batch, H) of direction d."""
        (seq, batch, n_in), (dirs, _, hidden) = shape_of(args[0]), (int(v) for v in shape_of(args[2]))
        dtype = str(args[0].ty.dtype)
        kernel = recurrent_kernel(cls.cell, dtype, dirs, d, int(n_in), hidden, reverse, has_lens, acts,
                                  attr.get("clip"), bool(attr.get("linear_before_reset", 0)))
        state = (batch, hidden) if cls.cell == "LSTM" else (1, 1)
        outs = [((seq, batch, hidden), dtype), ((batch, hidden), dtype), (state, dtype)]
        res = call_kernel(bb, kernel, f"ep_{cls.cell.lower()}", args, outs)
        return [bb.emit(relax.TupleGetItem(res, i)) for i in range(3)]

    @classmethod
    def _activations(cls, attr, dirs: int, dtype: str) -> list[list]:
        """Per direction, its activation functions (attribute order: forward's, then reverse's)."""
        if attr.get("input_forget", 0):
            raise ModelError(f"{cls.cell} with input_forget=1 (coupled input and forget gates) is not supported")
        n = len(cls.default_acts)
        names = [a.decode() if isinstance(a, bytes) else a for a in attr.get("activations", cls.default_acts * dirs)]
        if len(names) != n * dirs:
            raise ModelError(f"{cls.cell} needs {n * dirs} activations, got {len(names)}")
        alphas, betas = iter(attr.get("activation_alpha", ())), iter(attr.get("activation_beta", ()))
        fns = [_activation(nm, next(alphas, _ALPHA[nm]) if nm in _ALPHA else None,
                           next(betas, _BETA[nm]) if nm in _BETA else None, dtype) for nm in names]
        return [fns[d * n:(d + 1) * n] for d in range(dirs)]


def _or_zeros(value, shape, dtype: str):
    return value if value is not None else relax.op.zeros(relax.ShapeExpr(list(shape)), dtype)


class LSTM(_Recurrent):
    cell, default_acts = "LSTM", ("Sigmoid", "Tanh", "Tanh")


class GRU(_Recurrent):
    cell, default_acts = "GRU", ("Sigmoid", "Tanh")
