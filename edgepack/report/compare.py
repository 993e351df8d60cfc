"""Runs side by side: which sizes they share, speed-ups, and the CI regression check."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompareError
from .schema import Run, SizeResult


@dataclass
class Pair:
    new: SizeResult
    old: SizeResult

    @property
    def speedup(self) -> float:
        """old median / new median: > 1 means the new run is faster."""
        return self.old.stats.median / self.new.stats.median


def pairs(new: Run, old: Run) -> list[Pair]:
    """Sizes both runs measured, in the new run's order."""
    out = []
    for s in new.sizes:
        o = old.size(s.key)
        if o is not None:
            if o.unit != s.unit:
                raise CompareError(f"{new.source} measures in {s.unit} and {old.source} in {o.unit}; "
                                   "compare runs from the same kind of device")
            out.append(Pair(s, o))
    return out


def regressions(new: Run, old: Run, factor: float) -> list[str]:
    """One line per common size whose median grew by more than `factor` (empty: no regression)."""
    if factor <= 0:
        raise CompareError(f"--fail-if-slower {factor}: the factor must be positive (e.g. 1.10 for 10% slower)")
    common = pairs(new, old)
    if not common:
        raise CompareError(f"{new.source} and {old.source} have no size in common; bench the same --sizes")
    return [f"{p.new.label()}: {fmt_time(p.new.stats.median, p.new.unit)} vs {fmt_time(p.old.stats.median, p.old.unit)}"
            f" before, x{1 / p.speedup:.2f} slower (limit x{factor:.2f})"
            for p in common if p.new.stats.median > p.old.stats.median * factor]


def fmt_time(v: float, unit: str = "ns") -> str:
    if unit != "ns":
        return f"{v:,.0f} {unit}"
    if v < 1e3:
        return f"{v:.0f} ns"
    if v < 1e6:
        return f"{v / 1e3:.1f} us"
    return f"{v / 1e6:.2f} ms"


def fmt_ratio(x: float, what: str = "") -> str:
    """x = other median / this median (> 1: this is faster): 'x2.10 faster [than what]'."""
    than = f" than {what}" if what else ""
    return f"x{x:.2f} faster{than}" if x >= 1 else f"x{1 / x:.2f} slower{than}"


def run_labels(runs: list[Run]) -> list[str]:
    """Short unique names: the file stems (run1, run0), numbered if two files share a stem."""
    from pathlib import Path

    stems = [Path(r.source).stem or f"run{i}" for i, r in enumerate(runs)]
    return [s if stems.count(s) == 1 else f"{s} #{i + 1}" for i, s in enumerate(stems)]
