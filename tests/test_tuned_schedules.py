"""Tuned dense schedules give the right numbers: a micro-kernel with a given tile configuration (rows, cols,
K unroll, the small-M family, packed weights) applied to a dense + bias kernel with a dynamic row count,
built for this machine and run on whole tiles, matches numpy."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import te  # noqa: E402

from edgepack.schedule.dense import DenseTiles  # noqa: E402
from edgepack.schedule.pack import pack_array, packing  # noqa: E402
from edgepack.schedule.variants import find_row_split, matmul_block  # noqa: E402
from edgepack.tune.trial import kernel_name, main_variant  # noqa: E402

pytestmark = pytest.mark.unit

K, N = 32, 64
TILES = [DenseTiles(1, 16), DenseTiles(4, 16), DenseTiles(8, 32, unroll_k=4), DenseTiles(2, 8, par_cols=True),
         DenseTiles(4, 64, unroll_k=2), DenseTiles(2, 16, serial=True), DenseTiles(1, 16, par_cols=True, serial=True)]


@pytest.fixture(scope="module")
def dense_bias():
    """y[1, m, N] = x[1, m, K] @ w[K, N] + b[N], m an int64 symbolic dim (as Relax legalizes a dense layer)."""
    m = te.var("m", "int64")
    x = te.placeholder((1, m, K), "float32", name="x")
    w = te.placeholder((K, N), "float32", name="w")
    b = te.placeholder((N,), "float32", name="b")
    k = te.reduce_axis((0, K), name="k")
    mm = te.compute((1, m, N), lambda o, i, j: te.sum(x[o, i, k] * w[k, j], axis=k), name="matmul")
    y = te.compute((1, m, N), lambda o, i, j: mm[o, i, j] + b[j], name="T_add")
    func = te.create_prim_func([x, w, b, y])
    split, block = find_row_split(func), matmul_block(func)
    assert split is not None and block == "matmul"
    return func, split, block


def _run(kernel, name: str, rows: int, tile: int, args: list[np.ndarray]) -> np.ndarray:
    lib = tvm.tirx.build(tvm.IRModule({name: kernel}), target=tvm.target.Target({"kind": "llvm"}))
    dev = tvm.cpu(0)
    y = tvm.runtime.tensor(np.zeros((1, rows, N), np.float32), dev)
    lib[name](*[tvm.runtime.tensor(a, dev) for a in args], y, rows // tile)
    return y.numpy()


@pytest.mark.parametrize("tiles", TILES, ids=kernel_name)
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
def test_tuned_dense_matches_numpy(dense_bias, tiles, packed):
    func, split, block = dense_bias
    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    lanes = 8
    kernel = main_variant(func, split, block, tiles, parallel=True, pack_lanes=lanes if packed else None)
    assert "T.where" not in kernel.script()  # whole tiles: no bounds-check predicate
    wk = pack_array(w, packing(func, block, lanes)[2]) if packed else w
    for mt in (1, 3):
        rows = mt * tiles.rows
        x = rng.standard_normal((1, rows, K)).astype(np.float32)
        got = _run(kernel, kernel_name(tiles), rows, tiles.rows, [x, wk, b])
        np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)
