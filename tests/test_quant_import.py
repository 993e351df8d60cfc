"""Quantised models (issue 14, step 1): onnxruntime's quantiser output builds and matches onnxruntime within
1 LSB of the output scale at several dynamic sizes.

Models: tests/data/exports/quant/ (scripts/make_quant_examples.py): a conv net (Conv, depthwise Conv, Relu, MaxPool,
LeakyRelu, Sigmoid gate, residual Add, GlobalAveragePool, Gemm; dim batch) and a transformer-like block (MatMul + bias,
erf GELU, residual, layer scale; dims batch x seq), each as QDQ (per tensor and per channel, int8 and uint8,
symmetric and asymmetric), QOperator (uint8 and int8) and quantize_dynamic. The reference is
edgepack.check's onnxruntime session (op by op; exact u8 x u8 integer GEMMs, see there).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import EXPORTS, run_cli, sizes_for
from onnx import TensorProto, helper, numpy_helper

from edgepack.check import _reference_session
from edgepack.deploy.io import random_inputs
from edgepack.deploy.local import run_local

pytestmark = pytest.mark.e2e

QUANT = EXPORTS / "quant"
DIMS = {m: {d: tuple(r) for d, r in dims.items()} for m, dims in json.loads((QUANT / "dims.json").read_text()).items()}
MODELS = sorted(p.stem for p in QUANT.glob("*.onnx"))
FORMATS = ("qdq_s8", "qdq_u8", "qdq_pc_s8", "qdq_pc_u8u8", "qop_u8", "qop_s8", "dyn")


def dims_of(name: str) -> dict:
    return DIMS[name.split("_")[0]]


def size_list(dims: dict) -> list[dict[str, int]]:
    """min, max, odd and prime sizes of every dim (zipped; every other dim runs through its sizes backwards,
    so that small and large sizes meet)."""
    per = {d: sizes_for(*r) for d, r in dims.items()}
    n = max(len(v) for v in per.values())
    return [{d: v[i % len(v)] if k % 2 == 0 else v[-1 - i % len(v)] for k, (d, v) in enumerate(per.items())}
            for i in range(n)]


def output_scales(model: onnx.ModelProto) -> dict[str, float | None]:
    """Per graph output: the scale of the DequantizeLinear that makes it (its LSB), else None."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    by_out = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for o in model.graph.output:
        n = by_out.get(o.name)
        s = consts.get(n.input[1]) if n is not None and n.op_type == "DequantizeLinear" else None
        out[o.name] = float(s.max()) if s is not None and s.size == 1 else None
    return out


def lsb_errors(bundle, model_path: Path, sizes: list[dict[str, int]]) -> list[tuple[dict, str, float]]:
    """(dims, output, error): integer outputs in LSB (|ep - ort|), dequantised outputs in LSB of their scale,
    other float outputs as max relative error."""
    model = onnx.load(str(model_path))
    scales = output_scales(model)
    sess = _reference_session(model_path)
    names = [i.name for i in sess.get_inputs()]
    outs = [o.name for o in sess.get_outputs()]
    res = []
    for k, dims in enumerate(sizes):
        arrays = random_inputs(bundle.manifest, dims, seed=k)
        arrays = [a * 2 if a.dtype.kind == "f" else a for a in arrays]  # past the calibrated range: saturation
        refs = sess.run(None, dict(zip(names, arrays)))
        with tempfile.TemporaryDirectory() as tmp:
            got = [np.load(p) for p in run_local(bundle, arrays, Path(tmp))]
        for name, g, r in zip(outs, got, refs):
            assert g.shape == r.shape and g.dtype == r.dtype, f"{name}: {g.dtype}{g.shape} != {r.dtype}{r.shape}"
            diff = np.abs(g.astype(np.float64) - r.astype(np.float64))
            if r.dtype.kind in "iu":
                err = float(diff.max())
            elif scales.get(name):
                err = float(diff.max()) / scales[name]
            else:
                err = float(diff.max()) / max(float(np.abs(r).max()), 1e-30) * 1e4  # 1 "LSB" = 1e-4 relative
            res.append((dims, name, err))
    return res


def test_every_format_is_there():
    for net in ("convnet", "block"):
        assert {f"{net}_{f}" for f in FORMATS} <= set(MODELS)
    for p in QUANT.glob("*.onnx"):
        assert p.stat().st_size < 16 << 10, f"{p.name} is {p.stat().st_size} B; keep test models small"


def test_formats_hold_the_ops_they_stand_for():
    ops = {m: {n.op_type for n in onnx.load(str(QUANT / f"{m}.onnx")).graph.node} for m in MODELS}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "MatMul"} <= ops["convnet_qdq_pc_s8"] | ops["block_qdq_pc_s8"]
    assert {"QLinearConv", "QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearSigmoid",
            "QLinearLeakyRelu"} <= ops["convnet_qop_u8"]
    assert "QLinearMatMul" in ops["block_qop_s8"]
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops["block_dyn"]
    assert "ConvInteger" in ops["convnet_dyn"]
    groups = [a.i for n in onnx.load(str(QUANT / "convnet_qop_s8.onnx")).graph.node if n.op_type == "QLinearConv"
              for a in n.attribute if a.name == "group"]
    assert groups == [8], "the conv net's depthwise layer (DS-CNN style) is quantised too"


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_quantised_model_within_one_lsb(build_cache, name):
    bundle = build_cache(QUANT / f"{name}.onnx", dims_of(name), f"quant_{name}")
    errs = lsb_errors(bundle, QUANT / f"{name}.onnx", size_list(dims_of(name)))
    worst = max(errs, key=lambda e: e[2])
    print(f"{name}: max {worst[2]:.3g} LSB ({worst[1]} at {worst[0]})")
    assert worst[2] <= 1.0, f"{name}: {worst[2]:.3g} LSB off onnxruntime for {worst[1]} at {worst[0]}"


def with_quantised_outputs(src: Path, dst: Path) -> list[str]:
    """A copy of the model whose every int8/uint8 tensor is also a graph output (shapes from onnxruntime's
    symbolic inference, which knows its com.microsoft ops)."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    m = onnx.load(str(src))
    info = {v.name: v for v in SymbolicShapeInference.infer_shapes(m, auto_merge=True).graph.value_info}
    ints = (TensorProto.INT8, TensorProto.UINT8)
    names = [o for n in m.graph.node for o in n.output[:1]
             if o in info and info[o].type.tensor_type.elem_type in ints]
    m.graph.output.extend(info[o] for o in names)
    onnx.save(m, str(dst))
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", ["block_qop_u8", "block_qop_s8", "convnet_qdq_pc_u8u8", "block_qdq_s8"])
def test_every_quantised_tensor_within_one_lsb(build_cache, tmp_path, monkeypatch, name):
    """Not only the output: each quantised layer's int8/uint8 result, so that errors cannot hide in a
    later requantisation. (onnxruntime's symbolic shape inference gives up on the QOperator conv nets.)"""
    monkeypatch.chdir(tmp_path)  # where a failing symbolic inference leaves its sym_shape_infer_temp.onnx
    path = tmp_path / f"{name}_all.onnx"
    names = with_quantised_outputs(QUANT / f"{name}.onnx", path)
    assert len(names) >= 8
    bundle = build_cache(path, dims_of(name), f"quant_all_{name}")
    sizes = size_list(dims_of(name))
    errs = lsb_errors(bundle, path, [sizes[0], sizes[-1], sizes[len(sizes) // 2]])
    bad = [e for e in errs if e[2] > 1.0]
    assert not bad, f"{name}: {len(bad)} tensor(s) more than 1 LSB off onnxruntime, e.g. {bad[0]}"


# -- QuantizeLinear's rounding and saturation, exactly ----------------------------------------------------

def quantize_model(path: Path) -> None:
    """y8 = QuantizeLinear(x, per-channel scale, int8 zp, axis 1); yu = QuantizeLinear(x, scale, uint8 zp);
    x[n, 4] with a dynamic n."""
    scale = numpy_helper.from_array(np.array([0.5, 0.25, 1.0, 0.1], np.float32), "scale")
    zp8 = numpy_helper.from_array(np.array([0, -3, 7, 1], np.int8), "zp8")
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    zpu = numpy_helper.from_array(np.array(128, np.uint8), "zpu")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp8"], ["y8"], name="q8", axis=1),
             helper.make_node("QuantizeLinear", ["x", "s", "zpu"], ["yu"], name="qu")]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y8", TensorProto.INT8, ["n", 4]),
                           helper.make_tensor_value_info("yu", TensorProto.UINT8, ["n", 4])], [scale, zp8, s, zpu])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_quantize_linear_rounds_half_to_even_and_saturates(build_cache, tmp_path):
    path = tmp_path / "quantize.onnx"
    quantize_model(path)
    bundle = build_cache(path, {"n": (1, 1024)}, "quant_quantize")
    scale = np.array([0.5, 0.25, 1.0, 0.1], np.float32)
    k = np.arange(-200, 200, dtype=np.float32)[:, None]
    ties = (k + 0.5) * scale  # exactly half-way for the power-of-two scales
    x = np.concatenate([ties, ties * 3.7 + 0.01, np.full((1, 4), 1e9, np.float32), np.full((1, 4), -1e9, np.float32),
                        np.full((1, 4), np.float32(-0.0))]).astype(np.float32)
    refs = _reference_session(path).run(None, {"x": x})
    with tempfile.TemporaryDirectory() as tmp:
        got = [np.load(p) for p in run_local(bundle, [x], Path(tmp))]
    for g, r in zip(got, refs):
        np.testing.assert_array_equal(g, r)
    want = np.clip(np.rint(x / scale) + np.array([0, -3, 7, 1]), -128, 127).astype(np.int8)  # numpy: half to even
    np.testing.assert_array_equal(got[0], want)


# -- edgepack inspect -----------------------------------------------------------------------------------------

def test_inspect_says_how_each_quantised_node_runs():
    r = run_cli("inspect", str(QUANT / "convnet_qop_u8.onnx"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "all operators are supported" in out
    assert "com.microsoft::QLinearAdd" in out and "NOT SUPPORTED" not in out
    lines = {ln.split()[0]: ln for ln in out.splitlines()[out.splitlines().index(
        next(ln for ln in out.splitlines() if ln.strip().startswith("quantised nodes"))) + 1:] if ln.startswith("    ")}
    assert "int32 accumulation" in lines["conv1_quant"]
    assert "float fallback" in lines["residual3_quant"]
    assert "integer (on the quantised values)" in lines["pool1"]  # MaxPool on uint8
    r = run_cli("inspect", str(QUANT / "block_qdq_pc_s8.onnx"))
    assert r.returncode == 0, r.stderr
    fc1 = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("fc1 "))
    assert "float fallback (dequantize -> float op -> quantize)" in fc1
