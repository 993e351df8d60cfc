"""TIR integer expressions over dynamic dims -> `SymExpr` trees (model/plan.py)."""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import ModelError
from .plan import SymExpr, c_ident

# Dims are non-negative, so floordiv/floormod, and the truncating div/mod TVM's CSE writes for them, are C's
# / and % (SymExpr's "/" and "%").
_BINARY = {
    tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "/", tirx.FloorMod: "%", tirx.Div: "/", tirx.Mod: "%",
    tirx.Max: "max", tirx.Min: "min",
}


def to_sym(e) -> SymExpr:
    """Convert a TIR PrimExpr (IntImm, Var and + - * floordiv floormod min max of them) to a SymExpr.

    A Var becomes a dim named by `c_ident` of its name. Model dims reach TVM already renamed to edgepack's
    generated names (model/names.py), for which `c_ident` is the identity."""
    if isinstance(e, int):
        return SymExpr.const(e)
    if isinstance(e, tvm.tirx.IntImm):
        return SymExpr.const(e.value)
    if isinstance(e, tirx.Var):
        return SymExpr.dim(c_ident(e.name))
    for cls, op in _BINARY.items():
        if isinstance(e, cls):
            return SymExpr.apply(op, to_sym(e.a), to_sym(e.b))
    raise ModelError(f"a shape expression of kind {type(e).__name__} is not supported in a static plan; "
                     "simplify the model's shape arithmetic")
