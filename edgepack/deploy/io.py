"""Inputs and outputs of a package run, checked against its manifest before anything runs on a board."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..errors import DimError, RunError


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
                           f"(shape [{', '.join(spec['shape'])}]), got shape {list(a.shape)}")
        for axis, (s, n) in enumerate(zip(spec["shape"], a.shape)):
            if re.fullmatch(r"\d+", s):
                if int(s) != n:
                    raise RunError(f"input '{spec['name']}' axis {axis} must be {s}, got {n}")
            elif s in c_to_name:
                d = c_to_name[s]
                if d["name"] in dims and dims[d["name"]] != n:
                    raise DimError(f"dim {d['name']} is {dims[d['name']]} in one input and {n} in '{spec['name']}'")
                dims[d["name"]] = n
    for d in manifest["dims"]:
        v = dims.get(d["name"])
        if v is not None and not d["min"] <= v <= d["max"]:
            raise DimError(f"dim {d['name']} = {v} is outside the package's range {d['min']}..{d['max']}; "
                           f"rebuild with --dim {d['name']}=MIN:MAX covering it")
    return dims


def output_file(index: int, name: str) -> str:
    """`<k>_<output name>.npy`, the name made file-safe (same rule as the C run program)."""
    return f"{index}_{re.sub(r'[^A-Za-z0-9.-]', '_', name)}.npy"
