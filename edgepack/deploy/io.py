"""Inputs and outputs of a package run, checked against its manifest before anything runs on a board."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DimError, RunError
from ..model.plan import SymExpr


def load_inputs(paths: list[str | Path]) -> list[np.ndarray]:
    arrays = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise RunError(f"input file '{p}' does not exist")
        try:
            arrays.append(np.load(p, allow_pickle=False))
        except Exception as e:
            raise RunError(f"input file '{p}' is not a .npy array ({type(e).__name__}); save it with numpy.save") from None
    return arrays


def dims_of(manifest: dict, arrays: list[np.ndarray]) -> dict[str, int]:
    """Check count, dtype, rank and static extents; return the dims the shapes imply (within range)."""
    ins = manifest["inputs"]
    if len(arrays) != len(ins):
        names = ", ".join(i["name"] for i in ins)
        raise RunError(f"package '{manifest['model']['name']}' takes {len(ins)} input(s) ({names}), got {len(arrays)}; "
                       "pass one --input per model input, in that order")
    c_to_name = {d["c_name"]: d for d in manifest["dims"]}
    dims: dict[str, int] = {}
    for spec, a in zip(ins, arrays):
        if a.dtype.name != spec["dtype"]:
            raise RunError(f"input '{spec['name']}' must be {spec['dtype']}, got {a.dtype.name}; "
                           f"convert it with .astype(numpy.{spec['dtype']})")
        if a.ndim != len(spec["shape"]):
            raise RunError(f"input '{spec['name']}' must have rank {len(spec['shape'])} "
                           f"(shape {shape_text(manifest, spec['shape'])}), got shape {list(a.shape)}")
        for axis, (s, n) in enumerate(zip(spec["shape"], a.shape)):
            if isinstance(s, int):
                if s != n:
                    raise RunError(f"input '{spec['name']}' axis {axis} must be {s}, got {n}")
            elif isinstance(s, str) and s in c_to_name:
                d = c_to_name[s]
                if d["name"] in dims and dims[d["name"]] != n:
                    raise DimError(f"dim {d['name']} is {dims[d['name']]} in one input and {n} in '{spec['name']}'")
                dims[d["name"]] = n
    for d in manifest["dims"]:
        if d["name"] in dims:
            _check_range(d, dims[d["name"]])
    return dims


def full_dims(manifest: dict, dims: dict[str, int]) -> dict[str, int]:
    """Every dim of the package, given and within its range, in the manifest's order."""
    out = {}
    for d in manifest["dims"]:
        if d["name"] not in dims:
            raise DimError(f"no size given for dim {d['name']}; pass it like {d['name']}={d['min']}")
        out[d["name"]] = _check_range(d, int(dims[d["name"]]))
    return out


def _check_range(d: dict, v: int) -> int:
    if not d["min"] <= v <= d["max"]:
        raise DimError(f"dim {d['name']} = {v} is outside the package's range {d['min']}..{d['max']}; "
                       f"rebuild with --dim {d['name']}=MIN:MAX covering it")
    return v


def shape_of(manifest: dict, spec_shape: list, dims: dict[str, int]) -> list[int]:
    """A manifest shape (ints, dim C names, [op, a, b] trees: SymExpr.to_json) at the given dims (by name)."""
    env = {d["c_name"]: dims[d["name"]] for d in manifest["dims"] if d["name"] in dims}
    return [SymExpr.from_json(s).eval(env) for s in spec_shape]


def shape_text(manifest: dict, spec_shape: list) -> str:
    """A manifest shape for messages, with the dims' own names: [batch, (batch * seq), 64]."""
    names = {d["c_name"]: d["name"] for d in manifest["dims"]}
    return "[" + ", ".join(_expr_text(s, names) for s in spec_shape) + "]"


def _expr_text(j, names: dict[str, str]) -> str:
    if isinstance(j, list):
        a, b = (_expr_text(x, names) for x in j[1:])
        return f"{j[0]}({a}, {b})" if j[0] in ("max", "min") else f"({a} {j[0]} {b})"
    return names.get(j, str(j)) if isinstance(j, str) else str(j)


# The C run program applies the same rule to the UTF-8 bytes of the name (templates/programs/ep_run.c).
_FILE_NAME_MAX = 64


def output_file(index: int, name: str) -> str:
    """`<k>_<output name>.npy`: every UTF-8 byte of the name outside [A-Za-z0-9.-] becomes '_', and the
    name is cut to 64 bytes."""
    safe = bytes(b if chr(b).isascii() and (chr(b).isalnum() or chr(b) in ".-") else ord("_")
                 for b in name.encode("utf-8", "surrogatepass")[:_FILE_NAME_MAX])
    return f"{index}_{safe.decode('ascii')}.npy"


def random_inputs(manifest: dict, dims: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Inputs of the manifest's shapes at `dims`: normal floats, random bools, ints 0 or 1 (valid ids and masks)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in manifest["inputs"]:
        shape = shape_of(manifest, spec["shape"], dims)
        dt = np.dtype(spec["dtype"])
        if dt.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            arrays.append(rng.random(shape) > 0.5)
        else:
            arrays.append(rng.integers(0, 2, size=shape).astype(dt))  # ids/masks: small valid values
    return arrays
