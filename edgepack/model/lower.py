"""ONNX -> Relax -> a static plan: ordered kernel calls over tensors with symbolic shapes, and an arena.

Relax's own passes do the heavy lifting (legalize to TIR, fuse, plan storage at the dims' upper bounds);
`_PlanWalker` turns the resulting flat `main` into a `Plan` (docs/tvm-facts.md#relax-static-lowering).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import tvm
from tvm import relax

from ..errors import ModelError, last_line
from .input_quantize import fuse_input_quantize, inline_input_quantize
from .plan import ALIGN, Block, DimRange, KernelCall, Output, Plan, SymExpr, Tensor, align_up
from .symexpr import c_ident, to_sym
from .weight_decode import fuse_weight_decode, inline_weight_decode

# Element types the C runtime moves and the .npy programs read and write.
SUPPORTED_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                              "uint8", "uint16", "uint32", "uint64", "bool"})


@dataclass
class Lowered:
    """The plan plus the TIR kernels it calls (by name)."""

    plan: Plan
    kernels: dict[str, tvm.tirx.PrimFunc]


def _tvm_failure(e: BaseException) -> str:
    """TVM puts what failed on the last line of its message, after its own traceback."""
    return last_line(str(e), f"{type(e).__name__} inside TVM, with no message")


def import_relax(model: onnx.ModelProto) -> tvm.IRModule:
    from tvm.relax.frontend.onnx import from_onnx  # must be imported explicitly (docs/tvm-facts.md#onnx-import)

    from .custom_ops import registered

    try:
        with registered():
            return from_onnx(model, keep_params_in_input=True)
    except ModelError:
        raise
    except Exception as e:  # the frontend raises many types; the last line names the problem
        raise ModelError(f"TVM's ONNX importer failed: {_tvm_failure(e)}") from None


def relax_pipeline() -> tvm.transform.Pass:
    t = relax.transform
    return tvm.transform.Sequential([
        # exp/erf/tanh/softmax as polynomial (vectorisable) code instead of scalar libm calls: softmax and
        # GELU were most of a transformer's run time; the error stays ~1e-6 relative (tests compare with ORT)
        t.FastMathTransform(),
        # int8 weights are decoded inside the kernel that reads them (weight_decode.py), a float input is
        # quantised inside the int8 conv that pads it (input_quantize.py)
        t.LegalizeOps(), t.AnnotateTIROpPattern(), t.FoldConstant(), t.FuseOps(), fuse_weight_decode,
        fuse_input_quantize, t.FuseTIR(),
        t.DeadCodeElimination(), t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(),
        t.CallTIRRewrite(), t.StaticPlanBlockMemory(),
    ])


def lower(name: str, mod: tvm.IRModule, dims: list[DimRange]) -> Lowered:
    main = mod["main"]
    # TVM's vars carry the dims' generated names (model/names.py rename_model)
    ub = {d.c_name: d.hi for d in dims}
    mod["main"] = main.with_attr("tir_var_upper_bound", ub).with_attr("tir_var_lower_bound", {d.c_name: d.lo for d in dims})
    try:
        with tvm.transform.PassContext(opt_level=3):
            mod = relax_pipeline()(mod)
    except Exception as e:
        raise ModelError(f"lowering the model failed: {_tvm_failure(e)}") from None
    plan = _PlanWalker(name, mod, dims).walk()
    kernels = {c.kernel: inline_input_quantize(inline_weight_decode(mod[c.kernel])) for c in plan.calls}
    return Lowered(plan, kernels)


class _PlanWalker:
    """One pass over the lowered `main`: bindings become tensors, kernel calls and arena blocks."""

    def __init__(self, name: str, mod: tvm.IRModule, dims: list[DimRange]):
        self.name, self.mod, self.dims = name, mod, dims
        self.main = mod["main"]
        self.tensors: list[Tensor] = []
        self.calls: list[KernelCall] = []
        self.storages: dict = {}  # relax storage Var -> byte size
        self.storage_tensors: dict = {}
        self.by_var: dict = {}  # relax Var (by identity: names can repeat) -> tensor id
        self.unplanned: list[int] = []  # builtin.alloc_tensor tensors
        self.tuples: dict = {}  # relax Var -> relax.Tuple it is bound to
        self.param_values: list = []
        self.params: list[int] = []
        self.inputs: list[int] = []
        self.known_dims = {d.c_name for d in dims}

    # -- helpers --------------------------------------------------------------------------------------
    def _new(self, name: str, ty, kind: str, **kw) -> int:
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise ModelError(f"value '{name}' is not a tensor of known rank; the model needs static ranks")
        if str(ty.dtype) not in SUPPORTED_DTYPES:
            raise ModelError(f"tensor '{name}' has dtype {ty.dtype}, which edgepack does not support "
                             f"(supported: {', '.join(sorted(SUPPORTED_DTYPES))})")
        shape = [self._sym(s) for s in ty.shape.values]
        t = Tensor(len(self.tensors), c_ident(name), str(ty.dtype), shape, kind, **kw)
        self.tensors.append(t)
        return t.id

    def _sym(self, e) -> SymExpr:
        s = to_sym(e)
        free = s.free_dims() - self.known_dims
        if free:
            raise ModelError(
                f"a shape depends on values computed at run time ({', '.join(sorted(free))}); "
                "edgepack needs shapes that follow from the input dims"
            )
        return s

    def _arg(self, a) -> int:
        if isinstance(a, relax.Var):
            if a not in self.by_var:
                raise ModelError(f"internal: use of unknown value '{a.name}'")
            return self.by_var[a]
        if isinstance(a, tvm.ir.GenericConst) and isinstance(a.ty, relax.TensorType):
            tid = self._new(f"const{len(self.params)}", a.ty, "param", index=len(self.params))
            self.params.append(tid)
            self.param_values.append(a.value.numpy())
            return tid
        raise ModelError(f"a value of kind {type(a).__name__} cannot be used here in a static plan")

    # -- the walk -------------------------------------------------------------------------------------
    def walk(self) -> Plan:
        n_in = int(self.main.attrs["num_input"]) if "num_input" in self.main.attrs else len(self.main.params)
        values = list(self.main.attrs["params"]) if "params" in self.main.attrs else []
        for i, p in enumerate(self.main.params):
            if i < n_in:
                tid = self._new(p.name, p.ty, "input", index=i)
                self.inputs.append(tid)
            else:
                tid = self._new(p.name, p.ty, "param", index=len(self.params))
                self.params.append(tid)
                self.param_values.append(values[i - n_in].numpy())
            self.by_var[p] = tid
        body = self.main.body
        for block in body.blocks:
            for b in block.bindings:
                self._binding(b)
        outputs = self._outputs(body.body)
        return self._finish(outputs)

    def _binding(self, b) -> None:
        v, var = b.value, b.var.name
        if isinstance(b, relax.MatchCast):
            self.by_var[b.var] = self._arg(v)
            return
        if isinstance(v, relax.Var):
            self.by_var[b.var] = self._arg(v)
            return
        if isinstance(v, relax.ShapeExpr):  # e.g. a model returning Shape(x): values follow from the dims
            tid = len(self.tensors)
            values = [self._sym(x) for x in v.values]
            self.tensors.append(Tensor(tid, c_ident(var), "int64", [SymExpr.const(len(values))], "shape",
                                       values=values))
            self.by_var[b.var] = tid
            return
        if isinstance(v, relax.Tuple):
            self.tuples[b.var] = v  # only used for outputs; resolved in _outputs
            return
        if isinstance(v, relax.TupleGetItem) and v.tuple_value in self.tuples:
            self.by_var[b.var] = self._arg(self.tuples[v.tuple_value].fields[v.index])
            return
        if not isinstance(v, relax.Call):
            raise ModelError(f"unexpected value in lowered model: {type(v).__name__}")
        op = v.op
        if isinstance(op, tvm.ir.GlobalVar):
            self._kernel_call(op.name_hint, v.args)
            return
        opname = op.name if isinstance(op, tvm.ir.Op) else str(op)
        if opname == "relax.memory.alloc_storage":
            size = v.args[0].values[0]
            if not isinstance(size, tvm.tirx.IntImm):
                raise ModelError("a buffer size does not follow from the declared dim ranges; narrow the --dim ranges")
            self.storages[b.var] = int(size.value)
            self.storage_tensors[b.var] = []
        elif opname == "relax.memory.alloc_tensor":
            storage = v.args[0]
            if int(v.args[1].value) != 0:
                raise ModelError("internal: tensor at a non-zero storage offset")
            tid = self._new(var, b.var.ty, "arena")
            self.storage_tensors[storage].append(tid)
            self.by_var[b.var] = tid
        elif opname == "relax.builtin.alloc_tensor":
            tid = self._new(var, b.var.ty, "arena")
            self.unplanned.append(tid)
            self.by_var[b.var] = tid
        elif opname in ("relax.reshape", "relax.memory.view"):
            base = self._root(self._arg(v.args[0]))
            self.by_var[b.var] = self._new(var, b.var.ty, "view", base=base)
        elif opname in ("relax.memory.kill_tensor", "relax.memory.kill_storage"):
            return
        elif opname == "relax.tensor_to_shape":
            raise ModelError("a shape depends on tensor values computed at run time (e.g. Range, Reshape or "
                             "ConstantOfShape fed by a run-time input); edgepack needs shapes that follow from the dims")
        else:
            raise ModelError(f"operator '{opname}' was left unlowered; it is not supported in a static plan")

    def _root(self, tid: int) -> int:
        while self.tensors[tid].kind == "view":
            tid = self.tensors[tid].base
        return tid

    def _kernel_call(self, kernel: str, args) -> None:
        out: list = []
        for a in args:
            if isinstance(a, relax.ShapeExpr):
                out.extend(self._sym(x) for x in a.values)
            elif tvm.ir.is_prim_expr(a):
                out.append(self._sym(a))
            else:
                out.append(self._arg(a))
        self.calls.append(KernelCall(kernel, out))

    def _outputs(self, ret) -> list[tuple[int, str]]:
        if isinstance(ret, relax.Var) and ret in self.tuples:
            ret = self.tuples[ret]
        items = list(ret.fields) if isinstance(ret, relax.Tuple) else [ret]
        if any(isinstance(x, relax.Tuple) or x in self.tuples for x in items):
            raise ModelError("models returning a nested tuple are not supported")
        return [(self._arg(x), x.name if isinstance(x, relax.Var) else f"out{i}") for i, x in enumerate(items)]

    def _share_across_dtypes(self, groups: list[tuple[int, list[int]]], outputs: list[Output]):
        """Relax plans one storage per dtype at a time (an int8 model's int32 sums never reuse its int8 blocks):
        storages whose lifetimes (first to last call using one of their tensors; a copied-out output lives to
        the end) are disjoint share one block, largest first into the first block free over its lifetime, so
        no block grows and the arena is at most the storages' sum. -> [(size, tensor ids)]"""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, call in enumerate(self.calls):
            for tid in call.tensors:
                root = self._root(tid)
                first.setdefault(root, i)
                last[root] = i
        for o in outputs:
            last[self._root(o.tensor)] = len(self.calls)
        blocks: list[tuple[int, int, list[int], list[tuple[int, int]]]] = []  # order, size, tensors, lifetimes
        for order, (size, tids) in sorted(enumerate(groups), key=lambda g: -g[1][0]):
            used = [t for t in tids if t in first]
            span = (min(first[t] for t in used), max(last[t] for t in used)) if used else (0, len(self.calls))
            free = next((b for b in blocks if all(span[1] < s0 or e0 < span[0] for s0, e0 in b[3])), None)
            if free is None:
                blocks.append((order, size, list(tids), [span]))
            else:
                free[2].extend(tids)
                free[3].append(span)
        return [(size, tids) for _, size, tids, _ in sorted(blocks)]  # Relax's order where nothing is shared

    def _finish(self, outs: list[tuple[int, str]]) -> Plan:
        # A tensor Relax left to the runtime (builtin.alloc_tensor) becomes the user's output buffer when it
        # is returned directly, and otherwise gets a block of its own at its upper-bound size.
        outputs: list[Output] = []
        direct: set[int] = set()
        for i, (tid, _) in enumerate(outs):
            t = self.tensors[tid]
            if tid in self.unplanned and tid not in direct:
                t.kind, t.index = "output", i
                direct.add(tid)
                outputs.append(Output(tid, "", False))
            else:
                outputs.append(Output(tid, "", True))
        plan = Plan(self.name, self.dims, self.tensors, self.calls, [], self.inputs, outputs, self.params,
                    self.param_values)
        groups = [(align_up(self.storages[st]), tids) for st, tids in self.storage_tensors.items() if tids]
        groups += [(align_up(plan.max_bytes(self.tensors[tid])), [tid]) for tid in self.unplanned if tid not in direct]
        offset = 0
        for size, tids in self._share_across_dtypes(groups, outputs):
            plan.blocks.append(Block(len(plan.blocks), offset, size, tids))
            offset += size
        for b in plan.blocks:
            for tid in b.tensors:
                self.tensors[tid].block = b.index
        plan.arena_bytes = offset
        assert offset % ALIGN == 0
        return plan
