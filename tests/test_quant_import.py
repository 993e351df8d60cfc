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
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import EXPORTS, have, run_cli, sizes_for
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
    assert "integer (int8 x int8 -> int32, fixed-point requantisation)" in lines["conv1_quant"]
    assert "float fallback" in lines["residual3_quant"]
    assert "integer (on the quantised values)" in lines["pool1"]  # MaxPool on uint8
    qdq = quant_lines("block_qdq_pc_s8")
    assert "integer (int8 x int8 -> int32, fixed-point requantisation)" in qdq["fc1"]  # DQ, DQ -> MatMul -> Q
    assert "folded into the integer op" in qdq["m1_QuantizeLinear"]
    assert "float fallback (dequantize -> float op -> quantize)" in qdq["gelu_erf"]
    qdq = quant_lines("convnet_qdq_pc_u8u8")  # asymmetric uint8 weights: integer sums, float requantisation
    assert "int32 accumulation" in qdq["conv1"] and "integer (on the quantised values)" in qdq["pool1"]


def quant_lines(name: str) -> dict[str, str]:
    """`edgepack inspect`'s quantised-node lines of a test model, by node name."""
    r = run_cli("inspect", str(QUANT / f"{name}.onnx"))
    assert r.returncode == 0, r.stderr
    return {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("    ") and len(ln.split()) > 2}


# -- integer kernels end to end (issue 14, step 2) ----------------------------------------------------------

def kws_model(rng: np.random.Generator, pw: int = 24) -> onnx.ModelProto:
    """A DS-CNN-shaped float net: Conv 3x3/2 + Relu, depthwise 3x3 + Relu6, pointwise 1x1 (`pw` channels) + Relu,
    MaxPool, GlobalAveragePool, Flatten, Gemm; x[batch, 1, 12, 10]."""
    w = lambda name, *shape: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32), name)
    inits = [w("c1_w", 16, 1, 3, 3), w("c1_b", 16), w("dw_w", 16, 1, 3, 3), w("dw_b", 16), w("pw_w", pw, 16, 1, 1),
             w("pw_b", pw), w("fc_w", 6, pw), w("fc_b", 6),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "c1_w", "c1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             mk("Relu", ["c1"], ["r1"], name="relu1"),
             mk("Conv", ["r1", "dw_w", "dw_b"], ["dw"], name="dw", pads=[1, 1, 1, 1], group=16),
             mk("Clip", ["dw", "lo", "hi"], ["dwr"], name="relu6"),
             mk("Conv", ["dwr", "pw_w", "pw_b"], ["pw"], name="pw"),
             mk("Relu", ["pw"], ["pwr"], name="relu_pw"),
             mk("MaxPool", ["pwr"], ["mp"], name="pool", kernel_shape=[2, 2], strides=[1, 1]),
             mk("GlobalAveragePool", ["mp"], ["gap"], name="gap"),
             mk("Flatten", ["gap"], ["flat"], name="flatten"),
             mk("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "kws", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 12, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def quantize_kws(tmp_path: Path, pw: int = 24) -> Path:
    """kws_model through onnxruntime's quantize_static as the issue tried it: QDQ, per-channel int8 weights,
    int8 activations."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(5)
    src, dst = tmp_path / "kws.onnx", tmp_path / "kws_qdq.onnx"
    onnx.save(kws_model(rng, pw), str(src))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.standard_normal((2, 1, 12, 10)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return dst


@pytest.mark.slow
def test_qdq_cnn_runs_as_integer_kernels_end_to_end(build_cache, tmp_path):
    from edgepack.model.qdq_fuse import fusions, integer_ops

    path = quantize_kws(tmp_path)
    model = onnx.load(str(path))
    fused = {f.op.name for f in fusions(model)}
    assert fused == {"conv1", "dw", "pw", "pool", "gap", "flatten", "fc"}, fused
    ops = [n.op_type for n in integer_ops(model).graph.node]
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1, ops  # the model's edges only
    dims = {"batch": (1, 6)}
    bundle = build_cache(path, dims, "quant_kws_integer")
    errs = lsb_errors(bundle, path, size_list(dims))
    worst = max(errs, key=lambda e: e[2])
    assert worst[2] <= 1.0, f"{worst[2]:.3g} LSB off onnxruntime at {worst[0]}"
    plan = json.loads((bundle.path / "plan.json").read_text())
    between = [t for t in plan["tensors"] if t["kind"] == "arena"]
    kinds = {t["dtype"] for t in between}  # no float round trip (int32: the pooling's sum before requantisation)
    assert "int8" in kinds and kinds <= {"int8", "int32"}, kinds
    mem = bundle.manifest["memory"]
    assert mem["float_build"]["tensor_bytes"] >= 3.5 * mem["tensor_bytes"], mem  # int8 tensors against float ones


def test_int8_plan_shares_blocks_across_dtypes(tmp_path):
    """Relax plans its storages one dtype at a time; edgepack's plan puts the kws net's int32 pooling sums in a
    block of int8 tensors dead by then (model/lower.py), so the arena is smaller than Relax's storages, and no
    two tensors of one block are live in the same call."""
    from edgepack.pipeline import lower_model, prepare

    model, dims = prepare(quantize_kws(tmp_path), {"batch": (1, 8)})
    plan = lower_model("kws", model, dims).plan
    mixed = [b for b in plan.blocks if {"int8", "int32"} <= {plan.tensor(t).dtype for t in b.tensors}]
    assert mixed, [(b.size, [plan.tensor(t).dtype for t in b.tensors]) for b in plan.blocks]
    arena = [t for t in plan.tensors if t.kind == "arena"]
    assert plan.arena_bytes < sum(plan.max_bytes(t) for t in arena)
    spans: dict[int, list[int]] = {}
    for i, call in enumerate(plan.calls):
        for tid in call.tensors:
            while plan.tensor(tid).kind == "view":
                tid = plan.tensor(tid).base
            spans.setdefault(tid, [i, i])[1] = i
    for b in plan.blocks:
        lives = sorted(spans[t] for t in b.tensors if t in spans)
        assert all(e0 < s1 for (_, e0), (s1, _) in zip(lives, lives[1:])), (b.index, lives)


def test_int8_conv_quantises_its_float_input_in_its_padding_copy(tmp_path):
    """The kws net's first layer reads QuantizeLinear(x): the quantisation runs inside the conv's padded copy
    (model/input_quantize.py), so no kernel writes an int8 copy of x into the arena and the conv kernel takes
    x, in float, itself; its outputs match onnxruntime (the 1 LSB tests above build the same net)."""
    from edgepack.pipeline import lower_model, prepare
    from edgepack.schedule.conv import ConvTiles, conv_block, extents_of

    model, dims = prepare(quantize_kws(tmp_path), {"batch": (1, 8)})
    lowered = lower_model("kws", model, dims)
    plan = lowered.plan
    x = next(t for t in plan.tensors if t.kind == "input")
    int8_x = [t for t in plan.tensors if t.kind == "arena" and t.dtype == "int8" and t.shape == x.shape]
    assert not int8_x, [t.name for t in int8_x]
    first = [k for k, f in lowered.kernels.items()
             if any(p.name.startswith("ep_qin") and str(p.dtype) == "float32" for p in f.params
                    if getattr(p, "shape", None) is not None)]
    assert len(first) == 1 and "conv2d" in first[0], list(lowered.kernels)
    text = lowered.kernels[first[0]].script()
    assert text.count('T.sblock("pad_temp') == 1 and "T.floor(ep_qin0" in text  # quantised in the copy
    # an int8 stem takes channel vectors whatever its input channels (its 5-column rows fill no vector)
    func = lowered.kernels[first[0]]
    assert ConvTiles.default(extents_of(func, conv_block(func)), 8, 16).cvec


def test_int8_pointwise_kernel_uses_the_board_dot_instruction(tmp_path):
    """The kws net's int8 pointwise conv: channel vectors on the board's dot (int8_dot.DOTS): a form of
    vpmaddwd on the host (its weights packed in pairs; the kws net's 24 channels take a 512-bit board's 256-bit
    form), SDOT on a Cortex-A76 (in groups of 4), SMULL + SADALP on the Pi 4's A72 (pairs); the input is copied
    with each group's channels side by side; the compiled host kernel holds the instruction."""
    import tvm

    from edgepack.board import load_board
    from edgepack.schedule.conv import conv_block, extents_of
    from edgepack.schedule.defaults import schedules_for
    from edgepack.schedule.int8_dot import DOTS, NARROWER
    from edgepack.schedule.variants import make_variants

    name, func = kws_pointwise_kernel(quantize_kws(tmp_path), 6)
    assert extents_of(func, conv_block(func)).integer
    host = load_board("host")
    for board in (host, load_board("rpi4"), load_board("rpi5")):
        impl = make_variants(name, func, schedules_for(board))
        kernel = impl.variants[0].func
        used = [d for d, dot in DOTS.items() if dot.llvm in kernel.script()]
        want = NARROWER.get(board.int8_dot, board.int8_dot)  # 24 channels: no 512-bit form
        assert used == ([want] if want else []), (board.name, used)
        (panel, pair), = impl.packed.values()
        assert pair == (DOTS[want].group if want else 1) and panel % 8 == 0, impl.packed
        if want:  # the input copied with each group of input channels together: one load per group and pixel
            copy = re.search(r'pad_temp = T.sblock_alloc_buffer\(\((.*)\), "int8"\)', kernel.script()).group(1)
            assert copy.endswith(f"T.int64({pair})") and f"T.match_buffer(pad_temp[" in kernel.script(), copy
        if board is host and want:
            lib = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}), target=host.tvm_target())
            assert ("\tvpdpwssd\t" if DOTS[want].accumulates else "\tvpmaddwd\t") in lib.mod.inspect_source("asm")
    assert load_board("rpi4").int8_dot == "smull" and load_board("rpi5").int8_dot == "sdot"


@pytest.mark.slow
def test_every_x86_dot_the_host_cpu_runs_matches_onnxruntime(tmp_path):
    """The kws net with a 32-channel pointwise layer, built for the host with that layer on each x86 dot form
    this machine's cpu can run (int8_dot.DOTS; a 512-bit one on 16-channel tiles, a 256-bit one on 8), within
    1 LSB of onnxruntime at batch 1, 2 and 3. Forms the cpu lacks are named in the skip reason, not run."""
    from dataclasses import replace

    from tvm.target import codegen

    from edgepack.board import load_board
    from edgepack.deploy.local import run_local
    from edgepack.pipeline import build_package
    from edgepack.schedule.conv import ConvTiles
    from edgepack.schedule.defaults import schedules_for
    from edgepack.schedule.int8_dot import DOTS

    host = load_board("host")
    if host.int8_dot not in DOTS:
        pytest.skip(f"the host has no x86 int8 dot (int8_dot {host.int8_dot!r})")
    needs = {"avx2": ["avx2"], "vnni": ["avxvnni"], "avx512": ["avx512bw"], "avx512vnni": ["avx512bw", "avx512vnni"]}
    runs = [d for d, feats in needs.items() if all(codegen.target_has_features(f, host.tvm_target()) for f in feats)
            or (d == "vnni" and codegen.target_has_features("avx512vnni", host.tvm_target()))]
    path = quantize_kws(tmp_path, pw=32)
    pw, _ = kws_pointwise_kernel(path, 3)
    for dot in runs:
        tiles = ConvTiles(oc=DOTS[dot].lanes, oh=1, ow=5, cvec=True, dot=dot)
        bundle = build_package(path, "host", {"batch": (1, 3)}, tmp_path / dot, name="kws",
                               schedules=replace(schedules_for(host), conv={pw: tiles})).bundle
        run = lambda b, x: np.load(run_local(bundle, [x], tmp_path / f"out_{dot}{b}")[0])  # noqa: E731
        assert kws_lsb_error(path, run, [1, 2, 3]) <= 1.0, dot
    if missing := sorted(set(needs) - set(runs)):
        pytest.skip(f"checked {runs}; this cpu cannot run {missing}")


def test_int8_pointwise_c_kernel_uses_smlad_where_the_core_has_dsp(tmp_path):
    """On a Cortex-M4 (board feature "+dsp") the kws net's int8 pointwise kernel is a call of the package's
    SMLAD dot per pixel and 4 or 8 channels over the whole reduction; on the Cortex-M3 the plain multiply-add."""
    from edgepack.board import load_board
    from edgepack.schedule.defaults import schedules_for
    from edgepack.schedule.variants import make_variants

    name, func = kws_pointwise_kernel(quantize_kws(tmp_path), 3)
    for board, dot in (("mps2-an386", "dsp"), ("mps2-an385", "")):
        assert load_board(board).int8_dot == dot
        text = make_variants(name, func, schedules_for(load_board(board))).variants[0].func.script()
        assert ('"ep_dsp_dot_' in text) == bool(dot), board
        assert "T.where" not in text


def kws_pointwise_kernel(path: Path, max_batch: int):
    """(name, PrimFunc) of the quantised kws net's pointwise conv kernel, lowered with batch 1..max_batch."""
    from edgepack.pipeline import lower_model, prepare
    from edgepack.schedule.conv import conv_block, extents_of

    model, dims = prepare(path, {"batch": (1, max_batch)})
    kernels = lower_model("kws", model, dims).kernels
    return next((k, f) for k, f in kernels.items() if (b := conv_block(f)) and extents_of(f, b).flat)


def kws_lsb_error(path: Path, run, sizes: list[int]) -> float:
    """The largest |edgepack - onnxruntime| of the quantised kws net's output over batch `sizes`, in LSB of
    its scale; run(batch, x) -> edgepack's output on some device."""
    scale = output_scales(onnx.load(str(path)))["y"]
    sess = _reference_session(path)
    worst = 0.0
    for k, b in enumerate(sizes):
        x = np.random.default_rng(k).standard_normal((b, 1, 12, 10)).astype(np.float32) * 2
        worst = max(worst, float(np.abs(run(b, x).astype(np.float64) - sess.run(None, {"x": x})[0]).max()) / scale)
    return worst


@pytest.mark.slow
@pytest.mark.skipif(not have("qemu-aarch64"), reason="needs qemu-user (apt-get install qemu-user)")
@pytest.mark.parametrize("board", ["qemu-aarch64", "rpi5"])
def test_qdq_cnn_integer_kernels_on_aarch64(tmp_path, board):
    """The same integer kernels cross-compiled for the Cortex-A72 stand-in (NEON: SMULL + SADALP) and for the
    Pi 5's A76 (SDOT), run under qemu-aarch64 (its default CPU has the dot product)."""
    from edgepack.pipeline import build_package

    path = quantize_kws(tmp_path)
    bundle = build_package(path, board, {"batch": (1, 6)}, tmp_path / "kws").bundle
    dis = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(bundle.path / "kernels" / "kernels.o")],
                         capture_output=True, text=True, check=True).stdout
    assert ("\tsdot\t" in dis) == (board == "rpi5")
    assert ("\tsadalp\t" in dis) == (board == "qemu-aarch64")

    def run(b: int, x: np.ndarray) -> np.ndarray:
        np.save(tmp_path / "x.npy", x)
        out = tmp_path / f"out{b}"
        out.mkdir()
        subprocess.run(["qemu-aarch64", str(bundle.path / "ep"), "run", str(out), str(tmp_path / "x.npy")],
                       check=True, timeout=300)
        return np.load(next(out.glob("0_*.npy")))

    err = kws_lsb_error(path, run, sizes_for(1, 6))
    assert err <= 1.0, f"{err:.3g} LSB off onnxruntime on qemu-aarch64 ({board})"


def test_fixed_point_multiplier_is_exact_and_rounds_half_to_even():
    from fractions import Fraction

    from edgepack.model.qdq_fuse import fixed_point, requantize_reference

    rng = np.random.default_rng(3)
    mults = np.concatenate([rng.uniform(1e-6, 2.0, 200), [0.5, 0.25, 1.0, 2.0**-40, 3.0]]).astype(np.float32)
    m0, shift = fixed_point(mults)
    for m, a, s in zip(mults, m0, shift):
        assert 0 < s <= 62 and a < 2**31
        if s < 62:  # no low bits dropped: m0 / 2^shift is the float32 multiplier exactly
            assert Fraction(int(a), 2**int(s)) == Fraction(float(m))
    acc = np.array([1, 3, 5, -1, -3, -5, 7, 2**20 + 1], np.int64)
    got = requantize_reference(acc, *fixed_point(np.float32(0.5)))  # x.5 exactly: to the even neighbour
    np.testing.assert_array_equal(got, np.rint(acc * 0.5).astype(np.int64))
    acc = rng.integers(-2**24, 2**24, 1000)
    m = np.float32(0.0123)
    want = [round(Fraction(int(a)) * Fraction(float(m))) for a in acc]  # Python's round: half to even
    np.testing.assert_array_equal(requantize_reference(acc, *fixed_point(m)), want)
    assert fixed_point(np.float32(-0.5)) is None and fixed_point(np.float32(2.0**31)) is None


@pytest.mark.parametrize("high_word", [False, True])
def test_kernel_requantisation_is_the_reference_arithmetic(high_word):
    """model/quant.py's requantisation kernel (int32 constants; the rounding shift on uint64, or in 32 bits on
    the product's high word when every shift is >= 33) compiled for the host equals `requantize_reference` bit
    for bit: every shift 1..62 (33..62), ties, extreme accumulators, saturation."""
    import tvm
    from tvm import te

    from edgepack.model.qdq_fuse import fixed_point, requantize_reference
    from edgepack.model.quant import _requantize_te

    rng = np.random.default_rng(7)
    mults = np.concatenate([2.0 ** -np.arange(0, 62, dtype=np.float64), rng.uniform(1e-9, 4.0, 64)]).astype(np.float32)
    if high_word:
        mults = np.concatenate([mults[fixed_point(mults)[1] >= 33], rng.uniform(1e-7, 0.24, 32).astype(np.float32)])
    m0, shift = fixed_point(mults)
    ch = len(mults)
    lim = 2**31 - 1001  # acc + bias within int32, as a kernel's are
    acc = np.concatenate([rng.integers(-lim, lim, (200, ch)), np.full((1, ch), -lim), np.full((1, ch), lim),
                          np.arange(-8, 8)[:, None].repeat(ch, 1)]).astype(np.int32)
    bias = rng.integers(-1000, 1000, ch).astype(np.int32)
    tensors = [te.placeholder(acc.shape, "int32"), *(te.placeholder((ch,), "int32") for _ in range(3))]
    out = _requantize_te(*tensors, zp=3, dtype="int8", high_word=high_word)
    lib = tvm.compile(te.create_prim_func([*tensors, out]), target="llvm")
    got = tvm.runtime.tensor(np.zeros(acc.shape, np.int8))
    lib(*(tvm.runtime.tensor(a) for a in (acc, bias, m0.astype(np.int32), shift.astype(np.int32))), got)
    q = requantize_reference(acc.astype(np.int64) + bias, m0, shift) + 3
    np.testing.assert_array_equal(got.numpy(), np.clip(q, -128, 127).astype(np.int8))
    assert (np.abs(q) < 128).mean() > 0.3  # not all saturated


def test_float_twin_is_the_model_before_quantisation(tmp_path):
    from edgepack.model.float_twin import float_twin

    path = quantize_kws(tmp_path)
    twin = float_twin(onnx.load(str(path)))
    source = onnx.load(str(tmp_path / "kws.onnx"))
    folded = ("Relu", "Clip")  # the quantiser drops these: the output's quantisation range clamps at 0 (and 6)
    ops = lambda m, drop: sorted(n.op_type for n in m.graph.node if n.op_type not in drop)  # noqa: E731
    assert ops(twin, ("Identity",)) == ops(source, folded)
    onnx.checker.check_model(twin, full_check=True)
    values = lambda m: {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}  # noqa: E731
    src, got = values(source), values(twin)
    for n in twin.graph.node:
        if n.op_type in ("Conv", "Gemm"):  # the dequantised int8 weight: within half a step of the float one
            want = src[next(i for i in source.graph.node if i.name == n.name).input[1]]
            step = np.abs(want).reshape(len(want), -1).max(1) / 127
            assert np.all(np.abs(got[n.input[1]] - want).reshape(len(want), -1).max(1) <= step * 0.51), n.name
    assert float_twin(onnx.load(str(QUANT / "convnet_qop_u8.onnx"))) is None  # QOperator: no twin
    assert float_twin(source) is None  # nothing to undo
