"""Build a TIR kernel for a board and link it into a shared object ON THE HOST with the board's cross compiler:
boards have no compiler, and MetaSchedule's default `.tar` export would need one on the board
(docs/tvm-facts.md#rpc-export)."""

from __future__ import annotations

from pathlib import Path

from ..board import Board
from ..errors import BuildError, one_line


def export_kernel(func_or_mod, board: Board, path: str | Path, *, name: str | None = None,
                  asserts: bool = True) -> Path:
    """Build a TIR PrimFunc / IRModule (or take a built runtime Module) for `board.tvm_target()` and link it
    into a shared object on the host with the board's compiler. Returns `path`.

    Asserts stay ON by default: a kernel called with shapes or dtypes it was not built for fails with an
    error instead of reading or writing out of bounds (which would crash the server). They cost a few
    checks at kernel entry, outside every loop; packages build with asserts off (codegen/kernels.py)."""
    import tvm
    from tvm.support import cc

    path = Path(path)
    if board.toolchain.platform != "posix":
        raise BuildError(f"board '{board.name}': RPC measurement needs a board that loads shared objects "
                         f"(toolchain.platform 'posix'), this one is '{board.toolchain.platform}'")
    what = name or "kernel"
    try:
        if isinstance(func_or_mod, tvm.runtime.Module):
            lib = func_or_mod
        else:
            if isinstance(func_or_mod, tvm.tirx.PrimFunc):
                attrs = func_or_mod.attrs
                has_sym = attrs is not None and "global_symbol" in attrs
                sym = name or (str(attrs["global_symbol"]) if has_sym else "main")
                what = sym
                mod = tvm.IRModule({sym: func_or_mod.with_attr("global_symbol", sym)})
            elif isinstance(func_or_mod, tvm.IRModule):
                mod = func_or_mod
            else:
                raise TypeError(f"expected a PrimFunc, IRModule or runtime Module, got {type(func_or_mod).__name__}")
            config = {} if asserts else {"tirx.disable_assert": True}
            with tvm.transform.PassContext(opt_level=3, config=config):
                lib = tvm.tirx.build(mod, target=board.tvm_target())
        path.parent.mkdir(parents=True, exist_ok=True)
        # a fresh cross_compiler per export: it accumulates the options of every call it serves
        fcompile = cc.cross_compiler(board.toolchain.cc,
                                     options=[*board.toolchain.cflags, *board.toolchain.ldflags])
        lib.export_library(str(path), fcompile=fcompile)
    except Exception as e:  # TVM errors derive from several bases (ValueError, RuntimeError, TVMError...)
        raise BuildError(f"building {what} for board '{board.name}' failed: {one_line(e)}") from None
    return path
