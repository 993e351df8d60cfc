"""Symbolic integers for shape folding: polynomials with integer coefficients in the model's dim symbols.

Why not SymPy (installed here, but not an edgepack dependency): it is not a drop-in. What this class is for
are three operations SymPy does not have in this form: `exact_div` with ONNX's integer Div (truncation
toward zero on constants, and division only when every coefficient divides), `bound` over the declared dim
ranges for nonnegative dims, and `single_symbol` to read a dim straight off a graph input. Each would be a
wrapper around SymPy expressions, whose canonical forms, hashing of unknown symbols ("?name:k") and import
time (~0.5 s) would then have to be checked against the current behaviour; the class is ~120 lines.
"""

from __future__ import annotations

import numpy as np


class Poly:
    """An integer polynomial in dim symbols, e.g. ``2*batch*seq + 1``. Immutable."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict | None = None):
        # monomial (sorted tuple of symbol names, with repeats) -> nonzero int coefficient
        self.terms = {k: v for k, v in (terms or {}).items() if v != 0}

    @staticmethod
    def const(c: int) -> "Poly":
        return Poly({(): int(c)})

    @staticmethod
    def sym(name: str) -> "Poly":
        return Poly({(name,): 1})

    @staticmethod
    def of(x) -> "Poly":
        return x if isinstance(x, Poly) else Poly.const(int(x))

    def is_const(self) -> bool:
        return all(k == () for k in self.terms)

    @property
    def value(self) -> int:
        return self.terms.get((), 0)

    def single_symbol(self) -> str | None:
        """The symbol name if this is exactly one symbol (coefficient 1, no constant term)."""
        if len(self.terms) == 1:
            (k, v), = self.terms.items()
            if len(k) == 1 and v == 1:
                return k[0]
        return None

    def symbols(self) -> set[str]:
        return {s for k in self.terms for s in k}

    def __add__(self, o):
        o = Poly.of(o)
        t = dict(self.terms)
        for k, v in o.terms.items():
            t[k] = t.get(k, 0) + v
        return Poly(t)

    __radd__ = __add__

    def __neg__(self):
        return Poly({k: -v for k, v in self.terms.items()})

    def __sub__(self, o):
        return self + (-Poly.of(o))

    def __rsub__(self, o):
        return Poly.of(o) - self

    def __mul__(self, o):
        o = Poly.of(o)
        t: dict = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in o.terms.items():
                k = tuple(sorted(k1 + k2))
                t[k] = t.get(k, 0) + v1 * v2
        return Poly(t)

    __rmul__ = __mul__

    def exact_div(self, o: "Poly") -> "Poly | None":
        """self / o when o is a nonzero constant dividing every coefficient (else None)."""
        if not o.is_const() or o.value == 0:
            return None
        d = o.value
        if self.is_const():
            a = self.value
            q = abs(a) // abs(d)  # ONNX integer Div truncates toward zero
            return Poly.const(q if (a >= 0) == (d > 0) else -q)
        if all(v % d == 0 for v in self.terms.values()):
            return Poly({k: v // d for k, v in self.terms.items()})
        return None

    def bound(self, ranges: dict[str, tuple[int, int]], upper: bool) -> int | None:
        """Upper (or lower) bound for nonnegative symbols in ``ranges``; None if not bounded."""
        total = 0
        for k, v in self.terms.items():
            pick_max = (v > 0) == upper
            prod = 1
            for s in k:
                if s not in ranges:
                    if pick_max:
                        return None
                    lo = 0
                    prod *= lo
                    continue
                lo, hi = ranges[s]
                prod *= hi if pick_max else max(lo, 0)
            total += v * prod
        return total

    def _key(self):
        return frozenset(self.terms.items())

    def __eq__(self, o):
        if isinstance(o, (int, np.integer)):
            o = Poly.const(int(o))
        return isinstance(o, Poly) and self._key() == o._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if not self.terms:
            return "0"
        return " + ".join(f"{v}*{'*'.join(k)}" if k else str(v) for k, v in sorted(self.terms.items()))


def poly_array(a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    for idx, v in np.ndenumerate(a):
        out[idx] = Poly.const(int(v))
    return out


def all_const(a: np.ndarray) -> bool:
    return all(p.is_const() for p in a.flat)


def to_int_array(a: np.ndarray, dtype) -> np.ndarray:
    return np.array([p.value for p in a.flat], dtype=dtype).reshape(a.shape)
