"""Int8 weights stay int8: their decoding (DequantizeLinear, or Cast + Mul) runs inside the kernel that
reads the weight (a matmul, a conv, an embedding's gather), not as a kernel of its own that writes a float
copy into the arena at every call.

TVM's FuseOps never fuses an elementwise producer into a matmul or conv (only the consumers that follow
one), so a weight-only int8 layer lowers to two kernels: `dequantize(w8) -> w` (a float32 buffer of the
weight's size in the arena) and `fused_matmul_add(x, w, b)`. Two steps join them:

- `fuse_weight_decode` (a Relax pass between FuseOps and FuseTIR): when a fused function's argument is the
  single-use result of an elementwise kernel, or of a fused group of them (Cast + Mul), whose inputs are all
  weights (model parameters or constants), one of them int8 or uint8, that call moves into the fused
  function, which takes the int8 weight (and its scales) instead. FuseTIR then makes one PrimFunc of them.
- `inline_weight_decode` (TIR, per kernel): the decode block is computed inline where the reduction reads
  it, so the kernel reads W8[k, j] and converts it in registers; the float weight never exists.
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx

from .tir import region_tensor

INJECTIVE = 2  # TVM's OpPatternKind: 0 elementwise, 1 broadcast, 2 injective
CALL_TIR = tvm.ir.Op.get("relax.call_tir")
QUANTISED = ("int8", "uint8")  # a decode reads at least one of these: the stored weight
DECODE_INPUT = "ep_wdec"  # name of the parameters fuse_weight_decode adds (TVM's own are t<i>, lv<i>, ...)


def is_call_tir(value) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(CALL_TIR)


def _primitive(value, mod: tvm.IRModule) -> relax.Function | None:
    """The fused function (FuseOps' group) `value` calls, if it calls one."""
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
        fn = mod[value.op]
        if isinstance(fn, relax.Function) and fn.attrs and "Primitive" in fn.attrs:
            return fn
    return None


def op_pattern(call, mod: tvm.IRModule) -> int | None:
    """The OpPatternKind AnnotateTIROpPattern gave a call_tir's kernel."""
    attrs = mod[call.args[0]].attrs
    pattern = attrs.get("op_pattern") if attrs else None
    return None if pattern is None else int(pattern)


def _elementwise_tir(call, mod: tvm.IRModule) -> bool:
    """A call_tir of an injective kernel with static shapes (no tir_vars)."""
    pattern = op_pattern(call, mod)
    return pattern is not None and pattern <= INJECTIVE and len(call.args) <= 2


def elementwise_inputs(value, mod: tvm.IRModule) -> list | None:
    """The inputs of `value` when it is an injective call_tir, or a fused group of them; else None."""
    if is_call_tir(value):
        return list(value.args[1].fields) if _elementwise_tir(value, mod) else None
    if (fn := _primitive(value, mod)) is not None:
        calls = [b.value for blk in fn.body.blocks for b in blk.bindings]
        return list(value.args) if all(is_call_tir(c) and _elementwise_tir(c, mod) for c in calls) else None
    return None


def _decode_inputs(value, mod: tvm.IRModule, weights: set) -> list | None:
    """The inputs of `value` when it decodes weights: an elementwise group whose tensor inputs are all weights
    (parameters or constants), one of them int8 or uint8. None otherwise."""
    inputs = elementwise_inputs(value, mod)
    weight = lambda a: isinstance(a, tvm.ir.expr.Constant) or (isinstance(a, relax.Var) and a in weights)  # noqa: E731
    quantised = inputs is not None and any(dtype(a) in QUANTISED for a in inputs)  # float models stay as they were
    return inputs if quantised and all(weight(a) for a in inputs) else None


def dtype(e) -> str:
    return str(getattr(e.ty, "dtype", ""))


def _as_primitive(call) -> relax.Function | None:
    """A lone call_tir (FuseOps leaves a group of one op unwrapped) as a one-call primitive function."""
    if len(call.args) > 2 or not isinstance(call.ty, relax.TensorType):  # tir_vars, or a tuple (Split): not wrapped
        return None
    params = [relax.Var(f"a{i}", a.ty) for i, a in enumerate(call.args[1].fields)]
    out = relax.Var("out", call.ty)
    body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(out, relax.call_tir(
        call.args[0], relax.Tuple(params), call.ty))])], out)
    return relax.Function(params, body, call.ty, True).with_attr("Primitive", True)


def _reads_weight(call, mod: tvm.IRModule) -> bool:
    """A call_tir that reads a weight a little at a time: a reduction kernel (matmul, conv: OpPatternKind 3
    or 4) or a gather (`take`: an embedding table, of which each call reads a few rows)."""
    pattern = op_pattern(call, mod)
    return (pattern is not None and pattern > INJECTIVE) or call.args[0].name_hint.startswith("take")


def _reads_weights(fn: relax.Function, mod: tvm.IRModule) -> bool:
    """A fused group with such a call in it."""
    return any(is_call_tir(b.value) and _reads_weight(b.value, mod) for blk in fn.body.blocks for b in blk.bindings)


def _bare(name: str) -> str:
    return name.removeprefix("fused_")


def _decode_name(value) -> str:
    return _bare((value.args[0] if is_call_tir(value) else value.op).name_hint)


def _uses(func: relax.Function) -> dict:
    counts: dict = {}

    def visit(e):
        if isinstance(e, relax.Var):
            counts[e] = counts.get(e, 0) + 1
    relax.analysis.post_order_visit(func.body, visit)
    return counts


def _decode_bindings(value, mod: tvm.IRModule, params: list, ty) -> tuple[list, relax.Var]:
    """`value` recomputed from `params` as bindings inside another function, and the var of its result."""
    if is_call_tir(value):
        local = relax.DataflowVar("decoded", ty)
        return [relax.VarBinding(local, relax.call_tir(value.args[0], relax.Tuple(params), ty))], local
    fn = _primitive(value, mod)
    body = fn.bind_params(dict(zip(fn.params, params))).body
    return [b for blk in body.blocks for b in blk.bindings], body.body


def with_producer(func: relax.Function, index: int, decode, inputs: list, mod: tvm.IRModule,
                  prefix: str = DECODE_INPUT) -> relax.Function:
    """`func` with its parameter `index` computed inside by `decode` from new parameters, one per input."""
    # a primitive function takes no constant; the names (`prefix`) mark the decode's inputs for the TIR pass
    new_params = [relax.Var(f"{prefix}{i}", a.ty) for i, a in enumerate(inputs)]
    bindings, result = _decode_bindings(decode, mod, new_params, func.params[index].ty)
    inner = func.bind_params({func.params[index]: result})
    block = inner.body.blocks[0]
    body = relax.SeqExpr([relax.DataflowBlock([*bindings, *block.bindings]), *inner.body.blocks[1:]],
                         inner.body.body)
    return relax.Function(list(inner.params) + new_params, body, inner.ret_ty, inner.is_pure, inner.attrs)


@tvm.transform.module_pass(opt_level=0, name="EdgepackFuseWeightDecode")
def fuse_weight_decode(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    main = mod["main"]
    n_in = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(main.params)
    weights = set(main.params[n_in:])
    return fuse_producers(mod, lambda fn, i, value: _decode_inputs(value, mod, weights), DECODE_INPUT)


def fuse_producers(mod: tvm.IRModule, pick, prefix: str, label: str = "") -> tvm.IRModule:
    """Each call of a kernel that reads weights (a matmul, conv or gather) takes in the producer of its first
    single-use argument i for which `pick(fused function, i, producer's value)` gives the producer's inputs;
    the kernel then takes those inputs, as parameters named `prefix`..., instead of the argument, and is named
    fused_<label or the producer's name>_<its name>."""
    main, bb = mod["main"], relax.BlockBuilder(mod)  # the builder gives new functions their types
    uses = _uses(main)
    bound = {b.var: b.value for blk in main.body.blocks for b in blk.bindings}
    blocks = []
    for blk in main.body.blocks:
        bindings = []
        for b in blk.bindings:
            v = b.value
            fn = _primitive(v, mod) or (_as_primitive(v) if is_call_tir(v) and _reads_weight(v, mod) else None)
            if fn is not None and _reads_weights(fn, mod):
                args = list(v.args) if isinstance(v.op, tvm.ir.GlobalVar) else list(v.args[1].fields)
                name = (v.op if isinstance(v.op, tvm.ir.GlobalVar) else v.args[0]).name_hint
                for i, a in enumerate(args):
                    inputs = pick(fn, i, bound.get(a)) if uses.get(a) == 1 else None
                    if inputs is not None:
                        fn = with_producer(fn, i, bound[a], inputs, mod, prefix)
                        gv = bb.add_func(fn, f"fused_{label or _decode_name(bound[a])}_{_bare(name)}")
                        v = relax.Call(gv, [x for j, x in enumerate(args) if j != i] + inputs)
                        break  # one producer per kernel: a matmul or conv reads one weight
            bindings.append(relax.VarBinding(b.var, v) if v is not b.value else b)
        blocks.append(type(blk)(bindings))
    bb.update_func(mod.get_global_var("main"), relax.Function(
        main.params, relax.SeqExpr(blocks, main.body.body), main.ret_ty, main.is_pure, main.attrs))
    return bb.get()


def inline_weight_decode(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Inline into each block the spatial blocks it reads that compute from the decode's inputs only (the
    parameters fuse_weight_decode added), directly or through other such blocks (a Cast then a Mul): the
    weight's decode, now read where it is used. Other blocks of parameters (an input's padding, a reshape
    of batch-norm statistics) stay: the schedules rely on them."""
    return inline_producers(func, DECODE_INPUT, lambda sch, b, params: not decodes(sch, b, params))


def inline_producers(func: tirx.PrimFunc, prefix: str, is_reader) -> tirx.PrimFunc:
    """Inline the blocks computing from the parameters named `prefix`.. only (`decodes`) into the blocks
    `is_reader(sch, block, params)` accepts."""
    params = {p.name for p in func.params if getattr(p, "shape", None) is not None and p.name.startswith(prefix)}
    if not params:
        return func
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    changed = False
    readers = [b for b in sch.get_child_blocks(sch.get_sblock("root")) if is_reader(sch, b, params)]
    for blk in readers:
        while decode := [p for p in sch.get_producers(blk) if decodes(sch, p, params)]:
            try:
                for p in decode:
                    sch.compute_inline(p)  # its producers become the reader's: the loop takes them next
                    changed = True
            except Exception:  # ScheduleError: not inlinable; the kernel stays correct with a workspace buffer
                break
    return sch.mod["main"] if changed else func


def decodes(sch: s_tir.Schedule, blk, params: set) -> bool:
    """A spatial block whose inputs are decode inputs (`params`), or outputs of such blocks."""
    st = sch.get(blk)
    if any(iv.iter_type != 0 for iv in st.iter_vars) or any(region_tensor(w) in params for w in st.writes):
        return False
    produced = {region_tensor(w) for p in sch.get_producers(blk) for w in sch.get(p).writes}
    return all(region_tensor(r) in params or region_tensor(r) in produced for r in st.reads) and \
        all(decodes(sch, p, params) for p in sch.get_producers(blk))
