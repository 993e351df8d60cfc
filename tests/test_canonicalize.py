"""edgepack.model.canonicalize on real exporter output (tests/data/exports, made by
scripts/make_torch_exports.py) and on small hand-built graphs.

For each export: canonicalize -> TVM 0.27 from_onnx(keep_params_in_input=True) -> the static Relax
lowering edgepack uses must leave only kernel calls, allocations, reshape views and shape matching in
main; and the compiled Relax VM must match onnxruntime running the ORIGINAL export at the min, max,
odd and prime dynamic sizes.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime as ort
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from edgepack.errors import DimError
from edgepack.model.canonicalize import canonicalize, canonicalize_with_report

pytestmark = pytest.mark.unit

EXPORTS = os.path.join(os.path.dirname(__file__), "data", "exports")
BERT_RANGES = {"batch": (1, 4), "seq": (1, 64)}
CNN_RANGES = {"batch": (1, 4)}
# name -> dim ranges, (batch, seq) sizes to run: min, max, odd, prime, plus a few in between
CASES = {
    "bert_dynamo": (BERT_RANGES, [(1, 1), (4, 64), (3, 7), (1, 16), (3, 64), (2, 13)]),
    "bert_torchscript": (BERT_RANGES, [(1, 1), (4, 64), (3, 7), (1, 16), (3, 64), (2, 13)]),
    "bert_int8": (BERT_RANGES, [(1, 1), (4, 64), (3, 7), (1, 16), (3, 64), (2, 13)]),
    "cnn": (CNN_RANGES, [(1, None), (4, None), (3, None), (2, None)]),
}
TOL = 1e-4  # max |tvm - ort| / max |ort|

ALLOWED_OPS = {
    "relax.memory.alloc_storage", "relax.memory.alloc_tensor", "relax.builtin.alloc_tensor",
    "relax.memory.kill_storage", "relax.memory.kill_tensor", "relax.reshape",
}


def static_pipeline(mod: tvm.IRModule, upper: dict[str, int]) -> tvm.IRModule:
    mod = tvm.IRModule(dict(mod.functions_items()))
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", upper)
    seq = tvm.transform.Sequential([
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
        relax.transform.FuseOps(), relax.transform.FuseTIR(), relax.transform.RewriteDataflowReshape(),
        relax.transform.ToNonDataflow(), relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(),
        relax.transform.StaticPlanBlockMemory(),
    ])
    return seq(mod)


def non_static_bindings(mod: tvm.IRModule) -> list[str]:
    """Everything in main that is not a PrimFunc call, an allocation, a reshape view, a tuple or a
    match_cast of a shape; plus any Relax function other than main."""
    bad = []
    for gv, f in mod.functions_items():
        if gv.name_hint != "main" and not isinstance(f, tvm.tirx.PrimFunc):
            bad.append(f"non-PrimFunc function {gv.name_hint}")
    main = mod["main"]
    body = main.body
    assert isinstance(body, relax.SeqExpr)
    for block in body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(b, relax.MatchCast):
                if isinstance(v, relax.Call):
                    bad.append(f"match_cast of a call: {b.var.name}")
                continue
            if isinstance(v, relax.Call):
                op = v.op
                if isinstance(op, tvm.ir.GlobalVar):
                    if not isinstance(mod[op], tvm.tirx.PrimFunc):
                        bad.append(f"call to non-PrimFunc {op.name_hint}")
                elif isinstance(op, tvm.ir.Op):
                    if op.name not in ALLOWED_OPS:
                        bad.append(f"{b.var.name} = {op.name}")
                elif isinstance(op, relax.ExternFunc):
                    bad.append(f"{b.var.name} = extern {op.global_symbol}")
                else:
                    bad.append(f"{b.var.name} = call of {type(op).__name__}")
            elif isinstance(v, (relax.If, relax.SeqExpr, relax.Function)):
                bad.append(f"{b.var.name} = {type(v).__name__}")
    return bad


@functools.lru_cache(maxsize=None)
def load(name: str) -> onnx.ModelProto:
    path = os.path.join(EXPORTS, name + ".onnx")
    assert os.path.exists(path), f"{path} missing: run scripts/make_torch_exports.py"
    return onnx.load(path)


@functools.lru_cache(maxsize=None)
def canonical(name: str) -> onnx.ModelProto:
    return canonicalize(load(name), CASES[name][0])


@functools.lru_cache(maxsize=None)
def imported(name: str) -> tvm.IRModule:
    return from_onnx(canonical(name), keep_params_in_input=True)


@functools.lru_cache(maxsize=None)
def compiled(name: str):
    mod = imported(name)
    params = list(mod["main"].attrs["params"])
    mod = tvm.IRModule(dict(mod.functions_items()))
    mod["main"] = mod["main"].with_attr("tir_var_upper_bound", {k: v[1] for k, v in CASES[name][0].items()})
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(ex, tvm.cpu()), params


@functools.lru_cache(maxsize=None)
def reference(name: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    # ORT's level-2 optimizer turns DequantizeLinear->MatMul into MatMulNBits with int8 activations
    # (1e-2 off the ONNX semantics); run the graph op by op.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(load(name).SerializeToString(), so, providers=["CPUExecutionProvider"])


def make_feeds(model: onnx.ModelProto, batch: int, seq: int | None, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = {"batch": batch, "seq": seq}
    feeds = {}
    for vi in model.graph.input:
        dims = [sizes[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, 128, dims, dtype=np.int64)
        elif vi.name == "attention_mask":
            m = np.ones(dims, np.int64)
            if batch > 1 and seq > 2:
                m[-1, (seq + 1) // 2:] = 0  # padded last row
            feeds[vi.name] = m
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


# --------------------------------------------------------------------------------------------------
# Real exports
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_export_is_small_and_dynamic(name):
    path = os.path.join(EXPORTS, name + ".onnx")
    assert os.path.getsize(path) < 2 * 1024 * 1024
    dims = {d.dim_param for vi in load(name).graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
    assert dims == set(CASES[name][0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_keeps_inputs_outputs_and_dim_params(name):
    orig, canon = load(name), canonical(name)
    assert [vi.SerializeToString() for vi in canon.graph.input] == \
        [vi.SerializeToString() for vi in orig.graph.input]
    assert [o.name for o in canon.graph.output] == [o.name for o in orig.graph.output]
    onnx.checker.check_model(canon)


@pytest.mark.parametrize("name", sorted(CASES))
def test_canonical_graph_is_equivalent_in_ort(name):
    """The rewrite itself preserves semantics (checked with ORT on both graphs, beyond the TVM run)."""
    ranges, sizes = CASES[name]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(canonical(name).SerializeToString(), so, providers=["CPUExecutionProvider"])
    for b, s in sizes[:3]:
        feeds = make_feeds(load(name), b, s, seed=7)
        for got, ref in zip(sess.run(None, feeds), reference(name).run(None, feeds)):
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowers_to_static_call_sequence(name):
    ranges = CASES[name][0]
    mod = imported(name)
    main = mod["main"]
    # weights stay function inputs
    assert int(main.attrs["num_input"]) == len(load(name).graph.input)
    assert len(main.params) == int(main.attrs["num_input"]) + len(main.attrs["params"])
    low = static_pipeline(mod, {k: v[1] for k, v in ranges.items()})
    assert non_static_bindings(low) == []
    text = low["main"].script()
    assert "tensor_to_shape" not in text and "vm.builtin" not in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_tvm_matches_onnxruntime(name):
    vm, params = compiled(name)
    model = load(name)
    ranges, sizes = CASES[name]
    for k, (b, s) in enumerate(sizes):
        feeds = make_feeds(model, b, s, seed=k)
        refs = reference(name).run(None, feeds)
        got = vm["main"](*[tvm.runtime.tensor(feeds[vi.name]) for vi in model.graph.input], *params)
        got = [got] if hasattr(got, "numpy") else list(got)
        assert len(got) == len(refs)
        for g, r in zip(got, refs):
            g = g.numpy()
            assert g.shape == r.shape, (name, b, s)
            err = float(np.abs(g - r).max() / max(float(np.abs(r).max()), 1e-12))
            assert err < TOL, f"{name} batch={b} seq={s}: rel err {err:.2e}"


def test_int8_weights_stay_int8():
    canon = canonical("bert_int8")
    assert sum(n.op_type == "DequantizeLinear" for n in canon.graph.node) == 15
    int8 = [t for t in canon.graph.initializer if t.data_type == TensorProto.INT8 and len(t.dims) == 2]
    assert len(int8) == 15
    params = imported("bert_int8")["main"].attrs["params"]
    assert sum(str(p.dtype) == "int8" and len(p.shape) == 2 for p in params) == 15


def test_fold_dequantize_option():
    m, rep = canonicalize_with_report(load("bert_int8"), BERT_RANGES, fold_dequantize=True)
    assert not any(n.op_type == "DequantizeLinear" for n in m.graph.node)
    assert rep.counts["fold DequantizeLinear"] == 15
    feeds = make_feeds(load("bert_int8"), 2, 9, seed=3)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(m.SerializeToString(), so).run(None, feeds)
    for g, r in zip(got, reference("bert_int8").run(None, feeds)):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-5)


def test_raw_exports_need_canonicalize():
    """What TVM 0.27 does with the exports as written (documents why canonicalize exists)."""
    with pytest.raises(Exception, match="no value in Constant"):
        from_onnx(load("cnn"), keep_params_in_input=True)
    low = static_pipeline(from_onnx(load("bert_dynamo"), keep_params_in_input=True), {"batch": 4, "seq": 64})
    assert any("relax.tensor_to_shape" in b for b in non_static_bindings(low))


# --------------------------------------------------------------------------------------------------
# Small hand-built graphs
# --------------------------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _run(m, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_noop_on_simple_helper_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "b")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
                helper.make_node("Relu", ["a"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w, b])
    c, rep = canonicalize_with_report(m, {"batch": (1, 8)})
    assert not rep.counts
    assert c.graph.SerializeToString() == m.graph.SerializeToString()
    # and with no ranges at all
    assert canonicalize(m, {}).graph.SerializeToString() == m.graph.SerializeToString()


def test_shape_chain_range_identity_and_constant_forms():
    """TorchScript-style Shape->Gather->Unsqueeze->Concat->Reshape, Range(0, seq), Identity, Dropout,
    Constant(value_ints), a scalar float initializer: all rewritten, outputs unchanged."""
    rng = np.random.default_rng(1)
    tab = numpy_helper.from_array(rng.standard_normal((16, 6)).astype(np.float32), "tab")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")

    def c(name, arr):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name))

    nodes = [
        helper.make_node("Shape", ["ids"], ["shp"]),
        c("i0", np.int64(0)), c("i1", np.int64(1)), c("ax0", np.array([0], np.int64)),
        helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
        helper.make_node("Range", ["i0", "s", "i1"], ["pos"]),
        helper.make_node("Gather", ["tab", "ids"], ["e1"]),
        helper.make_node("Gather", ["tab", "pos"], ["e2"]),
        helper.make_node("Add", ["e1", "e2"], ["e"]),
        helper.make_node("Identity", ["e"], ["e_id"]),
        helper.make_node("Dropout", ["e_id"], ["e_do"]),
        helper.make_node("Mul", ["e_do", "half"], ["e_half"]),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Constant", [], ["tail"], value_ints=[2, 3]),
        helper.make_node("Concat", ["b1", "s1", "tail"], ["tgt"], axis=0),
        helper.make_node("Reshape", ["e_half", "tgt"], ["y"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 2, 3])], [tab, half])
    c_, rep = canonicalize_with_report(m, {"batch": (1, 3), "seq": (1, 16)})
    ops = [n.op_type for n in c_.graph.node]
    assert "Range" not in ops and "Identity" not in ops and "Dropout" not in ops
    assert rep.counts["Range(symbolic limit) -> Slice(arange(0, upper bound))"] == 1
    assert rep.counts["Reshape shape -> constant (0/-1)"] == 1
    reshape = next(n for n in c_.graph.node if n.op_type == "Reshape")
    const = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in c_.graph.node if n.op_type == "Constant"}
    # 0 copies a dim shape inference proved equal; -1 takes the one it could not
    assert const[reshape.input[1]].tolist() in ([0, 0, 2, 3], [0, -1, 2, 3])
    assert [i.name for i in c_.graph.initializer] == ["tab"]  # the scalar became a Constant node
    for b, s in [(1, 1), (3, 16), (2, 7)]:
        feeds = {"ids": rng.integers(0, 16, (b, s), dtype=np.int64)}
        np.testing.assert_array_equal(_run(c_, feeds)[0], _run(m, feeds)[0])
    low = static_pipeline(from_onnx(c_, keep_params_in_input=True), {"batch": 3, "seq": 16})
    assert non_static_bindings(low) == []


def test_range_without_upper_bound_is_left_alone():
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], start=1, end=2),
        helper.make_node("Squeeze", ["shp"], ["n"]),
        helper.make_node("Constant", [], ["z"], value=numpy_helper.from_array(np.int64(0))),
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.int64(1))),
        helper.make_node("Range", ["z", "n", "one"], ["y"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
               [helper.make_tensor_value_info("y", TensorProto.INT64, ["seq"])])
    c, rep = canonicalize_with_report(m, {"batch": (1, 2)})
    assert any(n.op_type == "Range" for n in c.graph.node)
    assert any("no upper bound" in note for note in rep.notes)
    c, rep = canonicalize_with_report(m, {"seq": (1, 5)})
    assert not any(n.op_type == "Range" for n in c.graph.node)
    for s in (1, 5):
        x = np.zeros((2, s), np.float32)
        np.testing.assert_array_equal(_run(c, {"x": x})[0], np.arange(s))


def test_identity_feeding_graph_output_keeps_output_name():
    m = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    c = canonicalize(m, {"n": (1, 4)})
    assert [n.op_type for n in c.graph.node] == ["Relu"] and c.graph.node[0].output[0] == "y"
    # Identity of a graph input straight to the output must stay
    m2 = _model([helper.make_node("Identity", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    assert [n.op_type for n in canonicalize(m2, {}).graph.node] == ["Identity"]


def test_bad_dim_ranges():
    m = load("cnn")
    with pytest.raises(DimError):
        canonicalize(m, {"batch": (4, 1)})
    with pytest.raises(DimError):
        canonicalize(m, {"batch": "big"})


@pytest.mark.parametrize("opset", [13, 17])
def test_reshape_back_from_flattened_rows(opset):
    """[batch*seq, 4] -> [batch, seq, 4] cannot be written with 0/-1 alone: the target is rebuilt from
    Shape(graph input) slices, which TVM turns into a symbolic R.shape (also on opsets without
    Shape(start, end), and with Range read the same way)."""
    def c(name, arr):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name))

    nodes = [
        c("flat", np.array([-1, 4], np.int64)), c("i0", np.int64(0)), c("i1", np.int64(1)),
        c("ax0", np.array([0], np.int64)), c("four", np.array([4], np.int64)),
        helper.make_node("Reshape", ["x", "flat"], ["rows"]),
        helper.make_node("Relu", ["rows"], ["r"]),
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "four"], ["tgt"], axis=0),
        helper.make_node("Reshape", ["r", "tgt"], ["y"]),
        helper.make_node("Range", ["i0", "s", "i1"], ["pos"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4]),
                helper.make_tensor_value_info("pos", TensorProto.INT64, ["seq"])], opset=opset)
    c_ = canonicalize(m, {"batch": (1, 2), "seq": (1, 8)})
    assert not any(n.op_type in ("Gather", "Unsqueeze", "Range") for n in c_.graph.node)
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    for got, ref in zip(_run(c_, {"x": x}), _run(m, {"x": x})):
        np.testing.assert_array_equal(got, ref)
    low = static_pipeline(from_onnx(c_, keep_params_in_input=True), {"batch": 2, "seq": 8})
    assert non_static_bindings(low) == []
