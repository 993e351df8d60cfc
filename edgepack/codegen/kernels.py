"""Compile every kernel variant of a package into ONE object file (a single IRModule, docs/tvm-facts.md#one-irmodule, so
there is one `__tvm_ffi_main` at most), and bound the workspace each kernel asks the runtime for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import s_tir, tirx

from ..errors import BuildError, last_line
from ..model.plan import ALIGN, DimRange, align_up, c_ident
from ..schedule.variants import KernelImpl, root_block


@dataclass
class KernelObject:
    path: Path
    symbols: list[str]
    workspace_per_thread: int  # bytes; an upper bound for any one kernel at the dims' upper bounds


def kernel_module(impls: dict[str, KernelImpl]) -> tvm.IRModule:
    funcs = {}
    for impl in impls.values():
        for v in impl.variants:
            funcs[v.symbol] = v.func.with_attr("global_symbol", v.symbol)
    return tvm.IRModule(funcs)


def compile_kernels(impls: dict[str, KernelImpl], target: tvm.target.Target, out: Path,
                    dims: list[DimRange]) -> KernelObject:
    mod = kernel_module(impls)
    # Asserts off: shapes are checked once in ep_<model>_run, and kernels shrink ~6x (docs/tvm-facts.md#disable-assert).
    try:
        with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
            lib = tvm.tirx.build(mod, target=target)
    except Exception as e:
        raise BuildError(f"compiling kernels failed: {last_line(str(e), type(e).__name__)}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    if target.kind.name == "llvm":
        lib.write_to_file(str(out))
    else:
        out.write_text(lib.inspect_source())
    ws = max((workspace_bound(v.func, dims + ([k.rows] if k.rows else []), target, v.tile)
              for k in impls.values() for v in k.variants), default=0)
    return KernelObject(out, [v.symbol for k in impls.values() for v in k.variants], ws)


def workspace_bound(func: tirx.PrimFunc, dims: list[DimRange], target: tvm.target.Target, tile: int = 0) -> int:
    """Bytes of workspace one thread may hold while running `func` at the dims' upper bounds.

    The kernel is specialized to the upper bounds and lowered (which moves each intermediate buffer
    into the loop that uses it and shrinks it to its footprint there); TVM then sums its allocations.
    Each allocation also costs the LIFO allocator up to 2 * EP_ALIGN bytes (header + alignment).
    """
    ub = {d.c_name: d.hi for d in dims}  # kernels name dims by their generated C names
    ub["mt"] = -(-max(ub.values(), default=1) // max(tile, 1))  # row tiles of a main variant
    mod = tvm.IRModule({"main": _at_upper_bounds(func, ub).with_attr("global_symbol", "main")})
    mod = tvm.tirx.transform.BindTarget(target.with_host(target))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
        mod = pipeline(mod)
    per_scope = s_tir.analysis.calculate_allocated_bytes(mod)["main"]
    root = root_block(func)
    n_allocs = len(root.alloc_buffers) if root is not None else 0
    bound = align_up(sum(int(v) for v in per_scope.values()) + 2 * ALIGN * n_allocs)
    # At fixed shapes StorageRewrite may merge buffers that the symbolic kernel allocates separately (seen: a
    # bert attention kernel's bool mask on Cortex-M, RoBERTa's mask kernel on the host): also count what the
    # symbolic one asks for
    bound = max(bound, _symbolic_allocations(func, target, ub) or 0)
    return bound


def _symbolic_allocations(func: tirx.PrimFunc, target: tvm.target.Target, ub: dict[str, int]) -> int | None:
    """Workspace bytes the lowered symbolic kernel allocates, extents evaluated at the upper bounds (with
    the LIFO allocator's 2 * EP_ALIGN per allocation); None if an extent cannot be evaluated."""
    from ..model.symexpr import to_sym

    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    mod = tvm.tirx.transform.BindTarget(target.with_host(target))(mod)
    pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
    with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
        body = pipeline(mod)["main"].body
    env = {c_ident(k): v for k, v in ub.items()}
    total = 0
    stack = [body]
    while stack:  # statements in program order: a Bind comes before the allocations that use its var
        s = stack.pop()
        try:
            if isinstance(s, tirx.stmt.Bind) and c_ident(s.var.name) not in env:
                env[c_ident(s.var.name)] = to_sym(s.value).eval(env)
            elif isinstance(s, tirx.stmt.AllocBuffer):
                dt = tvm.DataType(s.buffer.dtype)  # a vector type ("float32x36"): lanes elements each
                n = dt.bits * dt.lanes // 8 or 1
                for e in s.buffer.shape:
                    n *= to_sym(e).eval(env)
                total += align_up(n) + 2 * ALIGN
        except Exception:  # an expression that is no shape arithmetic (a load, a cast): unused, or give up
            if isinstance(s, tirx.stmt.AllocBuffer):
                return None
        children = list(getattr(s, "seq", None) or [])
        children += [getattr(s, k, None) for k in ("body", "then_case", "else_case")]
        stack.extend(reversed([c for c in children if c is not None]))
    return align_up(total)


def _at_upper_bounds(func: tirx.PrimFunc, ub: dict[str, int]) -> tirx.PrimFunc:
    """`func` with every dynamic dim (scalar params and plain-var buffer dims) fixed to its upper bound."""
    pm: dict = {}
    bound: set[str] = set()
    for p in func.params:
        if getattr(p, "shape", None) is None and p.name in ub:
            pm[p] = tirx.IntImm("int64", ub[p.name])
            bound.add(p.name)
    for p in func.params:
        shape = getattr(p, "shape", None)
        if shape is None or not all(isinstance(s, (tirx.IntImm, tirx.Var)) for s in shape):
            continue  # e.g. mt * tile: bound through the scalar mt above
        # vars that are no dim (edgepack's own kernels name theirs, e.g. outer) stay: no allocation uses them
        free = {s.name for s in shape if isinstance(s, tirx.Var) and s.name in ub} - bound
        if free:
            fixed = [tirx.IntImm("int64", ub[s.name]) if isinstance(s, tirx.Var) and s.name in ub else s
                     for s in shape]
            pm[p] = tirx.decl_buffer(fixed, p.dtype, name=p.name)
            bound |= free
    return func.specialize(pm) if pm else func
