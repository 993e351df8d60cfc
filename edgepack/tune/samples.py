"""Shape samples of a dynamic dim, with weights: what the joint search tunes for (`--samples`).

  "8"          8 values over [lo, hi], both ends included, equal weights: spread evenly when hi < 16 lo,
               geometrically when the range is wider (rows = batch x seq = 1..1024: small sizes are where
               the kernels change most, and evenly spread samples would leave seq 2..128 between 1 and 147)
  "even:8"     8 values spread evenly, whatever the range
  "geo:8"      8 values spread geometrically, whatever the range
  "all"        every value of the range (fine for small ranges)
  "hist.json"  a user's histogram of real sizes: {"17": 120, "32": 40, ...} or [[17, 120], [32, 40]]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import EdgepackError
from ..model.plan import DimRange


@dataclass(frozen=True)
class Samples:
    values: tuple[int, ...]
    weights: tuple[float, ...]  # sums to 1

    def to_json(self) -> dict:
        return {"values": list(self.values), "weights": list(self.weights)}


def make_samples(spec: str | int, dim: DimRange) -> Samples:
    spec = str(spec)
    if spec == "all":
        vals = list(range(dim.lo, dim.hi + 1))
        return Samples(tuple(vals), tuple([1.0 / len(vals)] * len(vals)))
    spacing, _, count = spec.rpartition(":") if spec.startswith(("even:", "geo:")) else ("", "", spec)
    if count.isdigit():
        n = int(count)
        if n < 1:
            raise EdgepackError(f"--samples {spec}: need at least 1 sample; pass a count like 8, 'all' or a histogram file")
        spacing = spacing or ("geo" if dim.hi >= GEOMETRIC_SPAN * dim.lo else "even")
        vals = spread(dim.lo, dim.hi, n, geometric=spacing == "geo")
        return Samples(tuple(vals), tuple([1.0 / len(vals)] * len(vals)))
    return _histogram(Path(spec), dim)


GEOMETRIC_SPAN = 16  # hi / lo from which "N" samples spread geometrically


def spread(lo: int, hi: int, n: int, geometric: bool) -> list[int]:
    """n distinct integers in [lo, hi], both ends included (fewer only when the range is smaller)."""
    n = min(n, hi - lo + 1)
    if not geometric or n < 3:
        return sorted({int(round(v)) for v in np.linspace(lo, hi, n)})
    # where rounding would repeat a value, the next integer up is taken instead (dims are >= 1)
    vals: list[int] = []
    for i, v in enumerate(np.geomspace(lo, hi, n)):
        room = hi - (n - 1 - i)  # leave one value per remaining sample
        vals.append(min(max(int(round(v)), vals[-1] + 1 if vals else lo), room))
    return vals


def _histogram(path: Path, dim: DimRange) -> Samples:
    fix = "pass a count like 8, 'all', or a JSON histogram {\"size\": count, ...}"
    if not path.exists():
        raise EdgepackError(f"--samples {path}: no such file; {fix}")
    try:
        raw = json.loads(path.read_text())
        pairs = raw.items() if isinstance(raw, dict) else raw
        hist: dict[int, float] = {}
        for v, c in pairs:
            hist[int(v)] = hist.get(int(v), 0.0) + float(c)
    except (ValueError, TypeError) as e:
        raise EdgepackError(f"--samples {path}: not a histogram ({e}); {fix}") from None
    bad = [v for v in hist if not dim.lo <= v <= dim.hi]
    if bad:
        raise EdgepackError(f"--samples {path}: sizes {sorted(bad)[:5]} are outside {dim.name}={dim.lo}:{dim.hi}; "
                            "drop them or widen the range with --dim")
    if not hist or sum(hist.values()) <= 0 or any(c < 0 for c in hist.values()):
        raise EdgepackError(f"--samples {path}: counts must be >= 0 with a positive total; {fix}")
    total = sum(hist.values())
    vals = sorted(hist)
    return Samples(tuple(vals), tuple(hist[v] / total for v in vals))
