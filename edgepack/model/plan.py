"""The data passed from lowering to code generation: a static call sequence and its memory plan.

Shapes are symbolic: each dimension is a `SymExpr` over the model's dynamic dims, kept both as C source
(for the generated runtime) and as a Python-evaluable form (for sizes at the upper bounds and for tests).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

ALIGN = 64  # bytes; every arena block starts on a cache line (and a NEON/AVX-512 vector)


def c_ident(name: str) -> str:
    """A C identifier for an ONNX name (dims, tensors): letters, digits and underscores."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class DimRange:
    """A dynamic dimension of the model and its declared range (inclusive)."""

    name: str  # as in the ONNX dim_param
    c_name: str  # a valid C identifier
    lo: int
    hi: int


@dataclass(frozen=True)
class SymExpr:
    """An integer expression over dynamic dims. `c` is C source, `py` a Python expression (// for division)."""

    c: str
    py: str

    def eval(self, dims: dict[str, int]) -> int:
        return int(eval(self.py, {"__builtins__": {}, "max": max, "min": min}, dict(dims)))  # noqa: S307

    @staticmethod
    def const(v: int) -> SymExpr:
        return SymExpr(str(int(v)), str(int(v)))

    @property
    def is_const(self) -> bool:
        return self.c.lstrip("-").isdigit()


@dataclass
class Tensor:
    """A tensor of the call sequence.

    kind: input (user buffer), output (user buffer), param (weights blob), arena (planned block),
    view (a reshape of `base`, same bytes), shape (int64 values known from the dims: `values`).
    """

    id: int
    name: str
    dtype: str
    shape: list[SymExpr]
    kind: str
    block: int | None = None  # arena block index, for kind == "arena"
    base: int | None = None  # the tensor a view aliases
    index: int | None = None  # position among inputs / outputs / params
    values: list[SymExpr] | None = None  # kind == "shape": the value of each element

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass
class Block:
    """A contiguous region of the arena. Tensors with disjoint lifetimes share one block."""

    index: int
    offset: int
    size: int
    tensors: list[int] = field(default_factory=list)


@dataclass
class KernelCall:
    """One call of a kernel, arguments in the kernel's parameter order: tensor ids (int) and int64 scalars
    (SymExpr, the dims a kernel cannot read from its buffers' shapes)."""

    kernel: str
    args: list[int | SymExpr]

    @property
    def tensors(self) -> list[int]:
        return [a for a in self.args if isinstance(a, int)]


@dataclass
class Output:
    tensor: int  # the tensor holding the result
    name: str
    copy: bool  # True when the result lives elsewhere (arena/view/input/param) and must be copied out


@dataclass
class Plan:
    """A model lowered to a static plan: kernels, calls, tensors, arena and weights."""

    name: str
    dims: list[DimRange]
    tensors: list[Tensor]
    calls: list[KernelCall]
    blocks: list[Block]
    inputs: list[int]
    outputs: list[Output]
    params: list[int]
    param_values: list[np.ndarray]
    arena_bytes: int = 0  # tensors only; kernel workspace is added by codegen

    def tensor(self, tid: int) -> Tensor:
        return self.tensors[tid]

    def max_bytes(self, t: Tensor) -> int:
        ub = {d.c_name: d.hi for d in self.dims}
        n = 1
        for s in t.shape:
            n *= s.eval(ub)
        return n * t.itemsize

    def io_bytes(self) -> int:
        """The inputs' and outputs' buffers at the upper bounds (the programs' static I/O pool)."""
        return sum(align_up(self.max_bytes(self.tensor(t))) for t in self.inputs) + sum(
            align_up(self.max_bytes(self.tensor(o.tensor))) for o in self.outputs)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "dims": [asdict(d) for d in self.dims],
            "arena_bytes": self.arena_bytes,
            "sum_of_tensor_bytes": sum(self.max_bytes(t) for t in self.tensors if t.kind == "arena"),
            "blocks": [asdict(b) for b in self.blocks],
            "tensors": [
                {
                    "id": t.id, "name": t.name, "dtype": t.dtype, "shape": [s.c for s in t.shape], "kind": t.kind,
                    "block": t.block, "offset": self.blocks[t.block].offset if t.block is not None else None,
                    "base": t.base, "max_bytes": self.max_bytes(t),
                }
                for t in self.tensors
            ],
            "calls": [{"kernel": c.kernel, "args": [a if isinstance(a, int) else a.c for a in c.args]} for c in self.calls],
        }
