"""Which sizes to measure: `--sizes seq=1,8,32` once per dim, the grid is their product; dims not named take
their minimum. Without --sizes, a few sizes spread geometrically over each dim's range."""

from __future__ import annotations

import itertools

from ..errors import DimError


def parse_sizes(args: list[str] | None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for a in args or []:
        name, sep, values = a.partition("=")
        name = name.strip()
        try:
            vals = [int(v) for v in values.split(",")]  # an empty entry (seq=1,,8) is a typo, not a skip
        except ValueError:
            vals = []
        if not sep or not name or not vals:
            raise DimError(f"--sizes '{a}' is not NAME=V1,V2,... (e.g. --sizes seq=1,8,32)")
        if name in out:
            raise DimError(f"--sizes names dim '{name}' twice; give all its values in one --sizes {name}=...")
        out[name] = sorted(set(vals))
    return out


def geometric(lo: int, hi: int, n: int) -> list[int]:
    """n sizes from lo to hi, evenly spaced on a log scale (1..256, 5 -> 1, 4, 16, 64, 256)."""
    if n <= 1 or lo == hi:
        return sorted({lo, hi})
    base = max(lo, 1)
    return sorted({lo, hi} | {round(base * (hi / base) ** (i / (n - 1))) for i in range(n)})


def grid(manifest: dict, sizes: dict[str, list[int]]) -> list[dict[str, int]]:
    """The sizes to measure, in order, each a value for every dim of the package (checked against its range)."""
    dims = manifest["dims"]
    known = {d["name"]: d for d in dims}
    for name, vals in sizes.items():
        if name not in known:
            raise DimError(f"--sizes names dim '{name}', but package '{manifest['model']['name']}' has dims: "
                           f"{', '.join(known) or 'none'}")
        d = known[name]
        bad = [v for v in vals if not d["min"] <= v <= d["max"]]
        if bad:
            raise DimError(f"--sizes {name}: {', '.join(map(str, bad))} outside the package's range "
                           f"{d['min']}..{d['max']}; rebuild with --dim {name}=MIN:MAX covering it")
    if not sizes:  # default: 5 sizes for one dim, 3 per dim for more (the grid is their product)
        n = 5 if len(dims) == 1 else 3
        sizes = {d["name"]: geometric(d["min"], d["max"], n) for d in dims}
    axes = [sizes.get(d["name"], [d["min"]]) for d in dims]
    return [dict(zip(known, combo)) for combo in itertools.product(*axes)]
