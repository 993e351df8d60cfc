"""Shape dispatchers: per split kernel, which main variant covers the whole-tile rows at the run's dims.

A split kernel's dispatcher sees one dim, its row count (`schedule.rows.ROWS`, e.g. batch * seq for a
dense layer on [batch, seq, K]): the generated call computes it and passes `&rows` as the dims array.

`FixedChoice` is what untuned packages use (one main variant). The tuner's table + decision tree plugs in
as another `Dispatcher` with the same two methods: `choose` (Python, for tests) and `emit_c`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..model.plan import DimRange


class Dispatcher(Protocol):
    """dims: keyed by DimRange.name (or c_name). The result is a position in the kernel's main variants
    (`KernelImpl.variants[:-1]`); -1 means no variant covers these dims, which the generated call turns
    into EP_ERR_SHAPE (`choose` raises DimError instead)."""

    def choose(self, dims: dict[str, int]) -> int: ...

    def emit_c(self, fn_name: str, dims: list[DimRange]) -> str: ...


@dataclass(frozen=True)
class FixedChoice:
    variant: int = 0

    def choose(self, dims: dict[str, int]) -> int:
        return self.variant

    def emit_c(self, fn_name: str, dims: list[DimRange]) -> str:
        return f"int {fn_name}(const int64_t* dims) {{\n  (void)dims;\n  return {self.variant};\n}}\n"
