"""TIR integer expressions over dynamic dims -> `SymExpr` (C source + Python form)."""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import ModelError
from .plan import SymExpr, c_ident

_BINARY = {
    tirx.Add: ("+", "+"),
    tirx.Sub: ("-", "-"),
    tirx.Mul: ("*", "*"),
}


def to_sym(e) -> SymExpr:
    """Convert a TIR PrimExpr (IntImm, Var and + - * floordiv floormod min max of them) to a SymExpr."""
    if isinstance(e, int):
        return SymExpr.const(e)
    if isinstance(e, tvm.tirx.IntImm):
        return SymExpr.const(e.value)
    if isinstance(e, tirx.Var):
        n = c_ident(e.name)
        return SymExpr(n, n)
    for cls, (cop, pyop) in _BINARY.items():
        if isinstance(e, cls):
            a, b = to_sym(e.a), to_sym(e.b)
            return SymExpr(f"({a.c} {cop} {b.c})", f"({a.py} {pyop} {b.py})")
    # Dims are non-negative, so C's truncating / and % equal floordiv / floormod here.
    if isinstance(e, tirx.FloorDiv):
        a, b = to_sym(e.a), to_sym(e.b)
        return SymExpr(f"({a.c} / {b.c})", f"({a.py} // {b.py})")
    if isinstance(e, tirx.FloorMod):
        a, b = to_sym(e.a), to_sym(e.b)
        return SymExpr(f"({a.c} % {b.c})", f"({a.py} % {b.py})")
    if isinstance(e, (tirx.Max, tirx.Min)):
        a, b = to_sym(e.a), to_sym(e.b)
        f = "max" if isinstance(e, tirx.Max) else "min"
        return SymExpr(f"ep_{f}_i64({a.c}, {b.c})", f"{f}({a.py}, {b.py})")
    raise ModelError(f"shape expression '{e}' is not supported in a static plan; simplify the model's shape arithmetic")
