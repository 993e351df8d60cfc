"""int8 dot-product instructions for integer micro-kernels, as TVM tensor intrinsics.

`avx2`: `vpmaddwd` multiplies 16 pairs of int16 and adds each pair into an int32 lane: 16 multiply-adds per
instruction, exact for int8 operands (a pair sums to at most 2 x 128 x 128 = 2^15, no saturation, unlike
`vpmaddubsw`'s int16 sums). LLVM has no pattern that turns a plain int8 x int8 -> int32 loop into it: left to
the vectorizer the same loop becomes `vpmulld` (one int32 product per lane; measured 1.4x slower on a 64x64
pointwise kernel, znver3).

The intrinsic computes 8 output channels over a pair of input channels: C[i] += A[k] * B[i, k] for i < 8, k < 2,
A two activations (input channels c and c + 1 of one pixel, any stride apart), B the weights of 8 channels x
the pair, stored pairwise ([.., oc, 2] panels, schedule/pack.py) so 16 int8 weights are one load. A's pair is
packed into one int32 and broadcast, as `vpmaddwd` reads it.
"""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

AVX2_PAIR_DOT = "ep_avx2_int8_pair_dot_8x2"
LANES = 8  # int32 outputs per instruction
PAIR = 2  # input channels per instruction


def _pair_dot(body: bool):
    """The description (the plain loop tensorize matches) or the implementation (the instruction)."""

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb = T.int64(), T.int64()
        A = T.match_buffer(a, (T.int64(2), T.int64(1), T.int64(1)), "int8", offset_factor=1, strides=[sa, sb, 1])
        B = T.match_buffer(b, (T.int64(8), T.int64(2)), "int8", offset_factor=1)
        C = T.match_buffer(c, (T.int64(8),), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:8], A[0:2, 0:1, 0:1], B[0:8, 0:2])
            T.writes(C[0:8])
            for i, k in T.grid(T.int64(8), T.int64(2)):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.Cast("int32", A[vk, 0, 0]) * T.Cast("int32", B[vi, vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb = T.int64(), T.int64()
        A = T.match_buffer(a, (T.int64(2), T.int64(1), T.int64(1)), "int8", offset_factor=1, strides=[sa, sb, 1])
        B = T.match_buffer(b, (T.int64(8), T.int64(2)), "int8", offset_factor=1)
        C = T.match_buffer(c, (T.int64(8),), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:8], A[0:2, 0:1, 0:1], B[0:8, 0:2])
            T.writes(C[0:8])
            pair = T.bitwise_or(T.bitwise_and(T.Cast("int32", A[0, 0, 0]), 0xFFFF),
                                T.shift_left(T.Cast("int32", A[1, 0, 0]), 16))
            a16 = T.reinterpret("int16x16", T.broadcast(pair, 8))
            b16 = T.Cast("int16x16", B.vload([T.int64(0), T.int64(0)], "int8x16"))
            C[T.ramp(T.int64(0), 1, 8)] = C[T.ramp(T.int64(0), 1, 8)] + T.call_llvm_pure_intrin(
                "int32x8", T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"), a16, b16)

    return impl if body else desc


TensorIntrin.register(AVX2_PAIR_DOT, _pair_dot(False), _pair_dot(True))
INTRINSICS = {"avx2": AVX2_PAIR_DOT}  # ConvTiles.dot -> the intrinsic
