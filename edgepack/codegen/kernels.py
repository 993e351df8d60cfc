"""Compile every kernel variant of a package into ONE object file (FACTS.md: a single IRModule, so
there is one `__tvm_ffi_main` at most), and bound the workspace each kernel asks the runtime for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import s_tir

from ..errors import BuildError
from ..model.plan import DimRange, align_up
from ..model.symexpr import to_sym
from ..schedule.variants import KernelImpl


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
    # Asserts off: shapes are checked once in ep_<model>_run, and kernels shrink ~6x (FACTS.md).
    try:
        with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
            lib = tvm.tirx.build(mod, target=target)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
        raise BuildError(f"compiling kernels failed: {first}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    if target.kind.name == "llvm":
        lib.write_to_file(str(out))
    else:
        out.write_text(lib.inspect_source())
    ws = max((workspace_bound(v.func, dims, v.tile) for k in impls.values() for v in k.variants), default=0)
    return KernelObject(out, [v.symbol for k in impls.values() for v in k.variants], ws)


def workspace_bound(func, dims: list[DimRange], tile: int = 0) -> int:
    """Sum of a kernel's intermediate buffers at the upper bounds: no thread ever holds more at once
    (scheduling only moves them into loops and shrinks them)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        root = sch.get(sch.get_sblock("root"))
    except Exception:  # no root block (already lowered)
        return 0
    ub = {d.c_name: d.hi for d in dims}
    ub["mt"] = -(-max(ub.values(), default=1) // max(tile, 1))  # row tiles of a main variant
    total = 0
    for buf in root.alloc_buffers:
        n = 1
        for s in buf.shape:
            n *= to_sym(s).eval(ub)
        total += align_up(n * tvm.DataType(buf.dtype).bits // 8) + 64  # + the allocator's header
    return total
