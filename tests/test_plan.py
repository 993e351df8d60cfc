"""Lowering and scheduling, checked without compiling C: the static plan, shared memory, kernel variants."""

from __future__ import annotations

import json

import pytest
import tvm
from conftest import assert_predicate_free_split
from tvm import s_tir

from edgepack.board import load_board
from edgepack.examples import EXAMPLES
from edgepack.model.symexpr import to_sym
from edgepack.pipeline import lower_model, prepare, schedules_for
from edgepack.schedule.variants import make_variants

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def encoder_lowered():
    ex = EXAMPLES["encoder"]
    model, dims = prepare(ex.path, dict(ex.dims))
    return lower_model("encoder", model, dims)


def test_plan_shares_memory_by_lifetime(encoder_lowered):
    plan = encoder_lowered.plan
    arena = [t for t in plan.tensors if t.kind == "arena"]
    unshared = sum(plan.max_bytes(t) for t in arena)
    assert plan.arena_bytes < unshared
    assert any(len(b.tensors) > 1 for b in plan.blocks)
    # blocks are disjoint, aligned, and each holds its largest tensor
    end = 0
    for b in sorted(plan.blocks, key=lambda b: b.offset):
        assert b.offset >= end and b.offset % 64 == 0
        assert b.size >= max(plan.max_bytes(plan.tensor(t)) for t in b.tensors)
        end = b.offset + b.size
    assert end == plan.arena_bytes


def test_plan_tensors_in_one_block_never_live_at_once(encoder_lowered):
    plan = encoder_lowered.plan
    first, last = {}, {}
    for i, c in enumerate(plan.calls):
        for a in c.tensors:
            root = a
            while plan.tensor(root).kind == "view":
                root = plan.tensor(root).base
            first.setdefault(root, i)
            last[root] = i
    for b in plan.blocks:
        spans = sorted((first[t], last[t]) for t in b.tensors if t in first)
        for (s0, e0), (s1, _) in zip(spans, spans[1:]):
            assert e0 <= s1, f"block {b.index}: overlapping lifetimes {spans}"


def test_manifest_checksums_every_file(encoder_bundle):
    from edgepack.codegen.bundle import verify

    files = encoder_bundle.manifest["files"]
    assert "kernels/kernels.o" in files and "weights.bin" in "".join(files) and "ep" in files
    assert verify(encoder_bundle) == []


def test_plan_json_records_offsets(encoder_bundle):
    pj = json.loads((encoder_bundle.path / "plan.json").read_text())
    assert pj["arena_bytes"] > 0 and pj["workspace_per_thread"] >= 0
    arena = [t for t in pj["tensors"] if t["kind"] == "arena"]
    assert arena and all(isinstance(t["offset"], int) for t in arena)
    assert pj["sum_of_tensor_bytes"] >= pj["arena_bytes"]


def test_dense_kernels_get_predicate_free_variants(encoder_lowered):
    sched = schedules_for(load_board("host"))
    split = [make_variants(k, f, sched) for k, f in encoder_lowered.kernels.items()]
    split = [s for s in split if s.split]
    assert len(split) >= 4  # q, k, v, out projection, ffn1, ffn2 (some fused together)
    for impl in split:
        assert_predicate_free_split(impl)


def test_naive_symbolic_tiling_would_carry_a_predicate(encoder_lowered):
    """The contrast the variants avoid: tiling the symbolic row loop directly adds T.where."""
    name = next(k for k in encoder_lowered.kernels if k.startswith("fused_matmul"))
    sch = s_tir.Schedule(tvm.IRModule({"main": encoder_lowered.kernels[name]}))
    blk = sch.get_sblock("matmul")
    loops = sch.get_loops(blk)
    sch.split(loops[1], [None, 8])
    assert "T.where" in sch.mod["main"].script()


def test_symexpr_c_and_python_agree():
    n = tvm.tirx.Var("seq", "int64")
    e = to_sym(tvm.tirx.floordiv(n * 3 + 1, 2) - tvm.tirx.floormod(n, 4))
    for v in (1, 7, 256):
        assert e.eval({"seq": v}) == (v * 3 + 1) // 2 - v % 4
    assert "seq" in e.c and "//" not in e.c


def test_weights_are_packed_in_panels_unless_shared(tmp_path):
    """A weight read by one dense kernel is stored in column panels (and the kernel reads it so); a weight
    that two different kernels read stays in its own layout. Outputs match onnxruntime either way."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgepack.check import check_against_onnxruntime
    from edgepack.pipeline import build_package

    rng = np.random.default_rng(0)
    w, v = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((32, 128)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y1"]),
             helper.make_node("MatMul", ["x", "w"], ["xw2"]), helper.make_node("Relu", ["xw2"], ["y2"]),
             helper.make_node("MatMul", ["x", "v"], ["xv"]), helper.make_node("Add", ["xv", "c"], ["y3"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v"),
             numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "c")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["m", k]) for n, k in (("y1", 64), ("y2", 64), ("y3", 128))]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", 32])], outs, inits)
    path = tmp_path / "tied.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    r = build_package(path, "host", {"m": (1, 40)}, tmp_path / "tied")
    plan = json.loads((r.bundle.path / "plan.json").read_text())
    ranks = sorted(len(t["shape"]) for t in plan["tensors"] if t["kind"] == "param" and len(t["shape"]) > 1)
    assert ranks == [2, 3]  # w shared by two kernels: as it was; v: [N / panel, K, panel]
    for size, err in check_against_onnxruntime(r.bundle, path, [{"m": m} for m in (1, 7, 16, 40)]):
        assert err < 1e-4, size
