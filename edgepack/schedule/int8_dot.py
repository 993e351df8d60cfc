"""int8 dot-product instructions for integer micro-kernels, as TVM tensor intrinsics.

x86 (all on int16 pairs, each a form of `vpmaddwd`):
- `avx2`: `vpmaddwd` multiplies 16 pairs of int16 and adds each pair into an int32 lane: 16 multiply-adds per
instruction, exact for int8 operands (a pair sums to at most 2 x 128 x 128 = 2^15, no saturation, unlike
`vpmaddubsw`'s int16 sums). LLVM has no pattern that turns a plain int8 x int8 -> int32 loop into it: left to
the vectorizer the same loop becomes `vpmulld` (one int32 product per lane; measured 1.4x slower on a 64x64
pointwise kernel, znver3).
- `vnni`: AVX-VNNI's (or AVX512-VNNI's) `vpdpwssd`, the same multiply-add with the accumulation in the
  instruction: one instruction per pair where `vpmaddwd` takes two (it and a `vpaddd`).
- `avx512`, `avx512vnni`: the two on 512-bit vectors, 16 output channels per instruction. A kernel whose
  channels are no multiple of 16 (the kws net's 24) takes the 256-bit form of the same family
  (`narrower`).

The intrinsic computes 8 (or 16) output channels over a pair of input channels: C[i] += A[k] * B[i, k] for i < 8, k < 2,
A two activations (input channels c and c + 1 of one pixel, side by side in the kernel's interleaved copy of
its pixel tile: schedule/conv.py), B the weights of 8 channels x the pair, stored pairwise ([.., oc, 2] panels,
schedule/pack.py) so 16 (32) int8 weights are one load. A's pair is one 16-bit load, broadcast, and both
operands are sign-extended to int16 as `vpmaddwd` reads them.

`sdot`: Armv8.2's dot product (aarch64 boards whose file lists "+dotprod": Cortex-A55, A76, the Pi 5; not the
Pi 4's A72). `SDOT` adds 4 products of int8 into each of 4 int32 lanes: 16 multiply-adds per instruction.
The same form as AVX2's over 4 input channels: two SDOTs for 8 output channels, the weights packed in
groups of 4 ([.., oc, 4]), the 4 activations packed into one int32 and broadcast.

`smull`: aarch64 without the dot product (the Pi 4's Cortex-A72). `SMULL` multiplies 8 int8 pairs into 8
exact int16 products (4 channels x the pair of input channels), `SADALP` adds each pair of them into an int32
lane: two instructions per 8 multiply-adds, the same weight panels as AVX2's. The vectorizer's own form (one
input channel at a time: `SMULL` then two widening adds) takes 0.73 instructions a multiply-add in DS-CNN's
pointwise loop, this one 0.43.

`dsp`: the Armv7E-M DSP extension (Cortex-M4, M7, M33 with DSP) of C kernels. `SMLAD` multiplies the two int16
halves of two words and adds both products to an int32: 2 multiply-adds per instruction, where the core's
`MLA` does one. The intrinsic is a pointwise kernel's whole reduction for one pixel and `lanes` output
channels, C[i] += A[j] * B[i, j] for i < lanes, j < K, on the weights in the model's own layout ([F, C, 1, 1]:
4 weights of a channel are one word; SXTB16 sign-extends its bytes 0 and 2, and 1 and 3, into int16 halves),
as CMSIS-NN's int8 kernels read them. Its body is a call to a static inline C function of the package
(`ep_dsp_dot_<lanes>`, templates/firmware/include/ep_dsp.h): with the reduction inside the call, gcc keeps
the accumulators in registers over it. Per 4 input channels x 8 output channels: 4 byte loads and 4 ALU ops
for the activations, then 8 x (a word load, 2 SXTB16, 2 SMLAD): in gcc's code for DS-CNN 55 instructions per
32 multiply-adds, against 76 for a byte load and a multiply-add each (the DS-CNN: 4.00 M -> 3.42 M ticks).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

QUAD = 4  # DSP: input channels per word of int8 weights (the reduction a multiple of it)
DSP_LANES = (8, 4)  # DSP: output channels per call, the widest first


@dataclass(frozen=True)
class ChannelDot:
    """A channel-vector dot instruction: C[i] += A[k] * B[i, k] for i < lanes, k < group."""
    llvm: str  # the LLVM intrinsic
    lanes: int  # int32 output channels per intrinsic
    group: int  # input channels per output lane: the weights are packed in groups of it
    accumulates: bool  # the instruction adds into C itself (vpdpwssd, sdot), else C + its result

    @property
    def name(self) -> str:
        return f"ep_{self.llvm.replace('.', '_')}_{self.lanes}x{self.group}"


DOTS = {
    "avx2": ChannelDot("llvm.x86.avx2.pmadd.wd", 8, 2, False),
    "vnni": ChannelDot("llvm.x86.avx512.vpdpwssd.256", 8, 2, True),
    "avx512": ChannelDot("llvm.x86.avx512.pmaddw.d.512", 16, 2, False),
    "avx512vnni": ChannelDot("llvm.x86.avx512.vpdpwssd.512", 16, 2, True),
    "sdot": ChannelDot("llvm.aarch64.neon.sdot", 8, 4, True),
    "smull": ChannelDot("llvm.aarch64.neon.smull", 8, 2, False),
}
NARROWER = {"avx512": "avx2", "avx512vnni": "vnni"}  # the 256-bit form of a 512-bit dot


def _channel_dot(dot: ChannelDot | None, lanes: int, group: int):
    """C[i] += A[k] * B[i, k] for i < lanes, k < group, A a group of activations stored together (the
    kernel's pair-interleaved input copy), B packed [.., oc, group]: `dot` None gives the description (the
    loop tensorize matches), else its implementation. A's group is one load, broadcast."""
    bits = "" if dot is None else dot.llvm
    x86, arm = bits.startswith("llvm.x86"), bits.startswith("llvm.aarch64")
    accumulates = dot is not None and dot.accumulates
    word = {2: "int16", 4: "int32"}[group]  # A's group as one scalar

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (T.int64(group),), "int8", offset_factor=1)
        B = T.match_buffer(b, (T.int64(lanes), T.int64(group)), "int8", offset_factor=1)
        C = T.match_buffer(c, (T.int64(lanes),), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:group], B[0:lanes, 0:group])
            T.writes(C[0:lanes])
            if x86:  # Python constants: the parser keeps one branch
                # the pair broadcast as bytes, then both operands sign-extended to int16 (vpmovsxbw)
                a16 = T.Cast(f"int16x{2 * lanes}", T.reinterpret(f"int8x{2 * lanes}", T.broadcast(
                    T.reinterpret(word, A.vload([T.int64(0)], f"int8x{group}")), lanes)))
                b16 = T.Cast(f"int16x{2 * lanes}", B.vload([T.int64(0), T.int64(0)], f"int8x{2 * lanes}"))
                if accumulates:
                    C[T.ramp(T.int64(0), 1, lanes)] = T.call_llvm_pure_intrin(
                        f"int32x{lanes}", T.llvm_lookup_intrinsic_id(bits), C[T.ramp(T.int64(0), 1, lanes)], a16, b16)
                else:
                    C[T.ramp(T.int64(0), 1, lanes)] = C[T.ramp(T.int64(0), 1, lanes)] + T.call_llvm_pure_intrin(
                        f"int32x{lanes}", T.llvm_lookup_intrinsic_id(bits), a16, b16)
            elif arm and group == 2:  # smull: per 4 channels, SMULL's 8 int16 products and SADALP's pair sums
                a8 = T.reinterpret("int8x8", T.broadcast(T.reinterpret(word, A.vload([T.int64(0)], "int8x2")), 4))
                for h in T.unroll(2):
                    C[T.ramp(T.int64(4) * h, 1, 4)] = C[T.ramp(T.int64(4) * h, 1, 4)] + T.call_llvm_pure_intrin(
                        "int32x4", T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.saddlp"), T.call_llvm_pure_intrin(
                            "int16x8", T.llvm_lookup_intrinsic_id(bits),
                            B.vload([T.int64(4) * h, T.int64(0)], "int8x8"), a8))
            elif arm:  # sdot: two SDOTs of 4 channels x 4 against the 4 activations broadcast
                a8 = T.reinterpret("int8x16", T.broadcast(T.reinterpret(word, A.vload([T.int64(0)], "int8x4")), 4))
                for h in T.unroll(2):
                    C[T.ramp(T.int64(4) * h, 1, 4)] = T.call_llvm_pure_intrin(
                        "int32x4", T.llvm_lookup_intrinsic_id(bits),
                        C[T.ramp(T.int64(4) * h, 1, 4)], B.vload([T.int64(4) * h, T.int64(0)], "int8x16"), a8)
            else:
                for i, k in T.grid(T.int64(lanes), T.int64(group)):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.Cast("int32", A[vk]) * T.Cast("int32", B[vi, vk])

    return func


def dsp_intrinsic(lanes: int, k: int) -> str:
    """The DSP intrinsic of `lanes` output channels over a whole reduction of `k` input channels (a multiple
    of 4), registered on first use: the call keeps the accumulators in registers over the reduction."""
    name = f"ep_dsp_int8_dot_{lanes}x{k}"
    if name not in _REGISTERED:
        TensorIntrin.register(name, _dsp_dot(lanes, k, False), _dsp_dot(lanes, k, True))
        _REGISTERED.add(name)
    return name


def _dsp_dot(lanes: int, k: int, body: bool):
    """DSP: the description (`body` False: the loop tensorize matches) or the implementation, the call of
    `ep_dsp_dot_<lanes>(acc, acc_stride, x, x_stride, w, w_stride, k)`."""

    @T.prim_func(s_tir=True)
    def func(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sh, sb, sc = T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (T.int64(k), T.int64(1), T.int64(1)), "int8", offset_factor=1, strides=[sa, sh, 1])
        B = T.match_buffer(b, (T.int64(lanes), T.int64(k), T.int64(1), T.int64(1)), "int8", offset_factor=1,
                           strides=[sb, 1, 1, 1])
        C = T.match_buffer(c, (T.int64(lanes), T.int64(1)), "int32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:lanes, 0:1], A[0:k, 0:1, 0:1], B[0:lanes, 0:k, 0:1, 0:1])
            T.writes(C[0:lanes, 0:1])
            if body:  # a Python constant: the parser keeps one branch
                T.evaluate(T.call_extern("int32", f"ep_dsp_dot_{lanes}", C.access_ptr("rw"), sc, A.access_ptr("r"),
                                         sa, B.access_ptr("r"), sb, T.int64(k)))
            else:
                for i, j in T.grid(T.int64(lanes), T.int64(k)):
                    with T.sblock("update"):
                        vi, vj = T.axis.remap("SR", [i, j])
                        C[vi, 0] = C[vi, 0] + T.Cast("int32", A[vj, 0, 0]) * T.Cast("int32", B[vi, vj, 0, 0])

    return func


_REGISTERED: set[str] = set()
for _dot in DOTS.values():
    TensorIntrin.register(_dot.name, _channel_dot(None, _dot.lanes, _dot.group),
                          _channel_dot(_dot, _dot.lanes, _dot.group))
