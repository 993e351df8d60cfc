"""Dense layers whose rows are several leading dims (batch x seq, a static batch, unit axes): flattened into
one row axis, split into whole tiles on the main kernel and the rest on the edge kernel, dispatched on the
row count, and checked against onnxruntime."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_predicate_free_split
from onnx import TensorProto, helper, numpy_helper

from edgepack.board import load_board
from edgepack.check import check_against_onnxruntime
from edgepack.model.plan import DimRange
from edgepack.pipeline import build_package, lower_model, prepare, schedules_for
from edgepack.schedule.rows import ROWS
from edgepack.schedule.variants import make_variants, matmul_block
from edgepack.tune.dispatch_tree import TreeDispatcher
from edgepack.tune.tasks import extract_tasks

pytestmark = pytest.mark.e2e

DIMS = {"batch": (1, 4), "seq": (1, 37), "n": (1, 29)}
SIZES = [{"batch": 1, "seq": 1, "n": 1}, {"batch": 4, "seq": 37, "n": 29},  # min, max
         {"batch": 3, "seq": 13, "n": 7}, {"batch": 2, "seq": 31, "n": 17}]  # odd, prime
EXPORTS = Path(__file__).parent / "data" / "exports"


def _model(path: Path) -> Path:
    """x[batch, seq, 32] -> MatMul + bias + Relu -> MatMul + bias + residual; y[3, seq, 32] (static batch 3)
    -> MatMul; z[n, 16] -> Gemm with transposed B and bias."""
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.2, f"w{len(inits)}")  # noqa: E731
    inits: list = []
    for shape in [(32, 64), (64,), (64, 32), (32,), (32, 48), (24, 16), (24,)]:
        inits.append(w(*shape))
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h0"]), helper.make_node("Add", ["h0", "w1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "w3"], ["h4"]), helper.make_node("Add", ["h4", "x"], ["out_x"]),
        helper.make_node("MatMul", ["y", "w4"], ["out_y"]),
        helper.make_node("Gemm", ["z", "w5", "w6"], ["out_z"], transB=1),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "rows",
        [helper.make_tensor_value_info("x", f, ["batch", "seq", 32]), helper.make_tensor_value_info("y", f, [3, "seq", 32]),
         helper.make_tensor_value_info("z", f, ["n", 16])],
        [helper.make_tensor_value_info("out_x", f, ["batch", "seq", 32]),
         helper.make_tensor_value_info("out_y", f, [3, "seq", 48]), helper.make_tensor_value_info("out_z", f, ["n", 24])],
        inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return _model(tmp_path_factory.mktemp("rows") / "rows.onnx")


@pytest.fixture(scope="module")
def lowered(model):
    m, dims = prepare(model, DIMS)
    return lower_model("rows", m, dims)


def test_every_dense_layer_is_split_predicate_free(lowered):
    sched = schedules_for(load_board("host"))
    dense = {k: f for k, f in lowered.kernels.items() if matmul_block(f)}
    assert len(dense) >= 4
    for name, func in dense.items():
        impl = make_variants(name, func, sched)
        assert impl.split is not None, f"{name} was not split"
        assert_predicate_free_split(impl)
        assert all(len(v.func.params[0].shape) == 2 for v in impl.variants)  # rows flattened: [rows, K]


def test_package_matches_onnxruntime_with_row_products(model, tmp_path):
    built = build_package(model, "host", DIMS, tmp_path / "pkg")
    src = (built.bundle.path / "src" / "rows.c").read_text()
    # dims reach C by their generated names: batch, seq, n -> ep_d0, ep_d1, ep_d2
    assert "const int64_t rows = (ep_d0 * ep_d1);" in src
    assert "const int64_t rows = (3 * ep_d1);" in src
    assert "const int64_t rows = ep_d2;" in src
    for dims, err in check_against_onnxruntime(built.bundle, model, SIZES):
        assert err < 1e-5, f"{dims}: max rel. error {err}"


def test_tuner_finds_the_dense_layers_of_an_export():
    m, dims = prepare(EXPORTS / "bert_torchscript.onnx", {"batch": (1, 4), "seq": (1, 64)})
    tasks = extract_tasks(lower_model("bert", m, dims), dims)
    dense = [t for t in tasks if t.kind == "dense"]
    assert dense, "no dense task in a TorchScript export with rows = batch x seq"
    assert all(t.dim.name == ROWS for t in dense)
    ranges = sorted((t.op.lo, t.op.hi) for t in dense)
    assert ranges.count((1, 4 * 64)) >= 4 and (1, 4) in ranges  # encoder layers: batch x seq; pooler: batch


HARNESS = """
#include <stdint.h>
#include <stdio.h>
int ep_m_dispatch_k(const int64_t* dims);
%s
int main(void) {
  long long batch, seq;
  while (scanf("%%lld %%lld", &batch, &seq) == 2) {
    const int64_t rows = 3 * (int64_t)batch * (int64_t)seq; /* as a generated call computes it */
    printf("%%d\\n", ep_m_dispatch_k(&rows));
  }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_dispatcher_on_a_row_product_matches_python(tmp_path):
    rows = DimRange(ROWS, ROWS, 3, 3 * 4 * 37)
    samples = [{ROWS: v} for v in (3, 9, 24, 48, 111, 222, 444)]
    td = TreeDispatcher.fit([rows], samples, [0, 0, 1, 2, 1, 2, 3])
    src = tmp_path / "d.c"
    src.write_text(HARNESS % td.emit_c("ep_m_dispatch_k", [rows]))
    exe = tmp_path / "d"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", str(src), "-o", str(exe)], check=True)
    rng = random.Random(0)
    pairs = [(rng.randint(1, 4), rng.randint(1, 37)) for _ in range(300)] + [(1, 1), (4, 37), (3, 13)]
    out = subprocess.run([str(exe)], input="".join(f"{b} {s}\n" for b, s in pairs), capture_output=True, text=True,
                         check=True).stdout.split()
    assert [int(v) for v in out] == [td.choose({ROWS: 3 * b * s}) for b, s in pairs]


def test_tuned_row_products_match_onnxruntime(model, tmp_path):
    from edgepack.tune.farm import LocalRPC
    from edgepack.tune.rpc_measurer import RPCMeasurer
    from edgepack.tune.tuner import TuneOptions, tune_model

    host = load_board("host")
    db = tmp_path / "t.db"
    with LocalRPC(key=host.rpc_key, servers=1) as farm, RPCMeasurer.local(host, farm) as m:
        rep = tune_model(model, host, DIMS, db, m, TuneOptions(trials=8, samples="3", max_kernels=2, batch=4,
                                                               progress=False))
    assert len(rep.tasks) >= 4 and rep.failed == 0
    built = build_package(model, "host", DIMS, tmp_path / "tuned", db=db)
    assert built.bundle.manifest["tuned"]
    for dims, err in check_against_onnxruntime(built.bundle, model, SIZES):
        assert err < 1e-5, f"{dims}: max rel. error {err}"


def test_flatten_refuses_rows_that_are_not_leading_dims():
    """Attention's Q.K^T has seq as a column too: its rows cannot be flattened (generic schedule instead)."""
    from tvm import te, tirx

    from edgepack.schedule.rows import flatten_rows

    i64 = lambda v: tirx.IntImm("int64", v)  # noqa: E731
    b, s = tirx.Var("batch", "int64"), tirx.Var("seq", "int64")
    q = te.placeholder((b, i64(2), s, i64(8)), name="q")
    kt = te.placeholder((b, i64(2), i64(8), s), name="kt")
    r = te.reduce_axis((i64(0), i64(8)), name="r")
    qk = te.compute((b, i64(2), s, s), lambda n, h, i, j: te.sum(q[n, h, i, r] * kt[n, h, r, j], axis=r), name="matmul")
    assert flatten_rows(te.create_prim_func([q, kt, qk])) is None
    x = te.placeholder((b, s, i64(8)), name="x")
    w = te.placeholder((i64(8), i64(4)), name="w")
    y = te.compute((b, s, i64(4)), lambda n, i, j: te.sum(x[n, i, r] * w[r, j], axis=r), name="matmul")
    flat = flatten_rows(te.create_prim_func([x, w, y]))
    assert flat is not None and flat.lead == 2 and len(flat.func.params[0].shape) == 2
