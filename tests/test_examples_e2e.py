"""Each bundled example and committed export: build, run the C program at several sizes, compare with
onnxruntime (max relative error < 1e-4)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import EXPORT_DIMS, EXPORTS, sizes_for

from edgepack.check import check_against_onnxruntime, random_inputs
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e

TOL = 1e-4


def _grid(dims: dict[str, tuple[int, int]]) -> list[dict[str, int]]:
    """>= 5 sizes per dynamic dim; other dims vary alongside rather than as a full product."""
    names = list(dims)
    per = {n: sizes_for(*dims[n]) for n in names}
    n_rows = max(len(v) for v in per.values())
    return [{n: per[n][i % len(per[n])] for n in names} for i in range(n_rows)]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_onnxruntime(build_cache, name):
    ex = EXAMPLES[name]
    bundle = build_cache(ex.path, dict(ex.dims), name)
    sizes = _grid(dict(ex.dims))
    assert all(len(sizes_for(*r)) >= 5 for r in ex.dims.values())
    for dims, err in check_against_onnxruntime(bundle, ex.path, sizes):
        assert err < TOL, f"{name} at {dims}: max relative error {err:.2e}"


def _token_inputs(manifest: dict, dims: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Token ids within the tiny vocabulary and a padding mask with at least one real token per row."""
    rng = np.random.default_rng(seed)
    arrays = random_inputs(manifest, dims, seed)
    for spec, a in zip(manifest["inputs"], arrays):
        if "mask" in spec["name"]:
            a[...] = 1
            a[..., a.shape[-1] // 2 + 1:] = rng.integers(0, 2, size=a[..., a.shape[-1] // 2 + 1:].shape)
        elif spec["dtype"].startswith("int"):
            a[...] = rng.integers(0, 100, size=a.shape)
    return arrays


@pytest.mark.parametrize("name", sorted(EXPORT_DIMS))
def test_pytorch_export_matches_onnxruntime(build_cache, name):
    dims = EXPORT_DIMS[name]
    model = EXPORTS / f"{name}.onnx"
    bundle = build_cache(model, dims, f"x_{name}")
    names = list(dims)
    per = {n: sizes_for(*dims[n]) for n in names}
    # every size of each dim at least once, paired with min and max of the others
    sizes = []
    for n in names:
        others = [n2 for n2 in names if n2 != n]
        for v, combo in itertools.product(per[n], itertools.product(*[(dims[o][0], dims[o][1]) for o in others]) or [()]):
            sizes.append({n: v, **dict(zip(others, combo))})
    sizes = [dict(t) for t in {tuple(sorted(s.items())) for s in sizes}]
    for d, err in check_against_onnxruntime(bundle, model, sorted(sizes, key=str), inputs_fn=_token_inputs):
        assert err < TOL, f"{name} at {d}: max relative error {err:.2e}"
