"""An int8 conv quantises its float input in its own padded copy: the int8 copy of the input never exists.

A QDQ model's first layer reads QuantizeLinear(x): FuseOps makes that a kernel of its own, which writes an
int8 copy of x into the arena for the conv to read and pad. In DS-CNN that copy (3,968 B at batch 8) was all
that kept the int8 build's tensors from a quarter of the float build's. Two steps, as for int8 weights
(weight_decode.py):

- `fuse_input_quantize` (Relax, after fuse_weight_decode): a reduction kernel whose argument is the single-use
  result of an elementwise group that writes int8 or uint8 from float tensors takes that group in, when the
  kernel's only TIR block reading the argument is its zero-padding copy (convs with padding; a pointwise
  conv reads its input in place, so the quantisation would run once per output channel tile).
- `inline_input_quantize` (TIR, per kernel): the quantisation blocks are computed inline in the padding copy,
  so each input element is quantised once per image, as it is copied.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx

from .tir import region_tensor
from .weight_decode import (
    INJECTIVE,
    QUANTISED,
    dtype,
    elementwise_inputs,
    fuse_producers,
    inline_producers,
    is_call_tir,
    op_pattern,
)

QUANTISE_INPUT = "ep_qin"  # name of the parameters fuse_input_quantize adds
PAD = "pad_temp"  # the block TVM's conv2d legalization pads its input in


def _quantise_inputs(fn: relax.Function, index: int, value, mod: tvm.IRModule) -> list | None:
    """The inputs of `value` when it quantises float tensors (an elementwise group, int8/uint8 out, float in)
    into an argument `fn` pads first."""
    inputs = elementwise_inputs(value, mod)
    if inputs is None or dtype(value) not in QUANTISED:
        return None
    tensors = [a for a in inputs if not isinstance(a, tvm.ir.expr.Constant)]  # scales and zero points aside
    if not (tensors and all(dtype(a).startswith("float") for a in tensors)) or not _pads(fn, index, mod):
        return None
    return inputs


def _pads(fn: relax.Function, index: int, mod: tvm.IRModule) -> bool:
    """Whether fused function `fn` passes its parameter `index` to a reduction kernel that pads it."""
    for blk in fn.body.blocks:
        for b in blk.bindings:
            call = b.value
            if not (is_call_tir(call) and (op_pattern(call, mod) or 0) > INJECTIVE):
                continue
            j = next((k for k, a in enumerate(call.args[1].fields) if a.same_as(fn.params[index])), None)
            if j is not None:
                return _only_padding_reads(mod[call.args[0]], mod[call.args[0]].params[j].name)
    return False


def _only_padding_reads(func: tirx.PrimFunc, param: str) -> bool:
    """Whether the blocks of a legalized kernel that read `param` are its padding copy only."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # ScheduleError: no root block
        return False
    readers = [b.name_hint for b in blocks if any(region_tensor(r) == param for r in b.reads)]
    return bool(readers) and all(r.startswith(PAD) for r in readers)


@tvm.transform.module_pass(opt_level=0, name="EdgepackFuseInputQuantize")
def fuse_input_quantize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return fuse_producers(mod, lambda fn, i, value: _quantise_inputs(fn, i, value, mod), QUANTISE_INPUT,
                          "quantize")


def inline_input_quantize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The quantisation blocks inlined into the padding copy that reads them."""
    return inline_producers(func, QUANTISE_INPUT,
                            lambda sch, b, params: sch.get(b).name_hint.startswith(PAD))
