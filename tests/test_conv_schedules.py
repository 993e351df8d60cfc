"""Convolution micro-kernels (schedule/conv.py): every kind a real CNN has, in one small onnx.helper model,
built with the board's default tiles and checked against onnxruntime at batch min, max, odd and prime sizes;
their TIR has no bounds-check predicate and vectorizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import have
from onnx import TensorProto, helper, numpy_helper

from edgepack.check import check_against_onnxruntime

pytestmark = pytest.mark.e2e

BATCH = (1, 8)
TOL = 1e-4

# (name, out channels, kernel, stride, groups): the layers of MobileNetV2 / ResNet / DS-CNN, small
LAYERS = [
    ("std7s2", 8, 7, 2, 1),  # [3, 28, 28] -> [8, 14, 14], ResNet's stem
    ("std3s1", 16, 3, 1, 1),  # ResNet's 3x3 layers: channel vectors x 7 columns, weight panels innermost
    ("pw196", 16, 1, 1, 1),  # 14x14 = 196 pixels: no multiple of the vector width divides them
    ("dw3s1", 16, 3, 1, 16),
    ("grouped", 16, 3, 1, 4),
    ("dw3s2", 16, 3, 2, 16),  # -> 7x7
    ("pw49", 32, 1, 1, 1),
    ("dw5s1", 32, 5, 1, 32),
    ("dw5s2", 32, 5, 2, 32),  # -> 4x4
    ("std3s2", 16, 3, 2, 1),  # -> 2x2
]


def _conv_zoo(path) -> None:
    rng = np.random.default_rng(0)
    inits, nodes, x, c = [], [], "x", 3
    for name, f, k, s, g in LAYERS:
        inits += [numpy_helper.from_array((rng.standard_normal((f, c // g, k, k)) / np.sqrt(c * k * k / g))
                                          .astype(np.float32), f"{name}_w"),
                  numpy_helper.from_array(rng.standard_normal(f).astype(np.float32), f"{name}_b")]
        nodes += [helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_y"], kernel_shape=[k, k],
                                   strides=[s, s], pads=[k // 2] * 4, group=g),
                  helper.make_node("Clip", [f"{name}_y", "lo", "hi"], [f"{name}_a"])]
        x, c = f"{name}_a", f
    inits += [numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    graph = helper.make_graph(nodes, "conv_zoo", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                ["batch", 3, 28, 28])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", c, 2, 2])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def conv_zoo(tmp_path_factory):
    path = tmp_path_factory.mktemp("conv") / "conv_zoo.onnx"
    _conv_zoo(path)
    return path


def test_every_conv_kind_matches_onnxruntime(build_cache, conv_zoo):
    bundle = build_cache(conv_zoo, {"batch": BATCH}, "conv_zoo")
    for dims, err in check_against_onnxruntime(bundle, conv_zoo, [{"batch": b} for b in (1, 3, 7, 8)]):
        assert err < TOL, f"at {dims}: max relative error {err:.2e}"


@pytest.mark.parametrize("lanes,registers", [(16, 32), (8, 16), (4, 32)])  # AVX-512, AVX2, NEON
def test_default_tiles_fit_the_board_and_stay_predicate_free(conv_zoo, lanes, registers):
    from edgepack.pipeline import lower_model, prepare
    from edgepack.schedule.conv import ConvTiles, conv_block, extents_of, schedule_conv, vectors

    model, dims = prepare(conv_zoo, {"batch": BATCH})
    convs = [(f, b) for f in lower_model("conv_zoo", model, dims).kernels.values() if (b := conv_block(f))]
    assert len(convs) == len(LAYERS)
    kinds = set()
    for func, block in convs:
        ext = extents_of(func, block)
        t = ConvTiles.default(ext, lanes, registers)
        assert ext.f % t.oc == 0 and ext.h % t.oh == 0 and ext.cols % t.ow == 0
        if t.cvec:  # channel vectors x unrolled pixels (49, 196 pixels; 7, 14 columns)
            assert t.oc % lanes == 0 and t.ow * (t.oc // lanes) <= registers - 4
        else:
            assert t.ow <= lanes or t.ow % lanes == 0  # wider odd vectors are slow in LLVM
            assert t.oc * t.oh * vectors(t.ow, lanes) <= registers - 4
        # channel vectors: pointwise whose pixels fill no whole vectors; depthwise with stride 2 or rows of no
        # whole vectors; standard convs with whole channel vectors
        depthwise = ext.own and ext.c == 1 and (ext.stride > 1 or ext.w % lanes != 0)
        standard = not (ext.flat or ext.own) and ext.f % lanes == 0 and ext.c >= 8  # not the 3-channel stem
        assert t.cvec == ((ext.flat and ext.cols % lanes != 0) or depthwise or standard), (ext, t)
        text = schedule_conv(func, block, t, parallel=True).script()
        assert "T.where" not in text and "T.vectorized" in text and "T.parallel" in text, block
        assert "if_then_else" not in text  # padding: zero fill and interior copy, no per-element check
        kinds.add(("flat" if ext.flat else "own" if ext.own else "std", ext.kh))
    assert kinds == {("std", 7), ("flat", 1), ("own", 3), ("own", 5), ("std", 3)}


def test_standard_conv_runs_channel_vectors_of_packed_weights(conv_zoo):
    """A 3x3 conv with whole channel vectors: the weights are read as [F / oc, C, KH, KW, oc] panels, the
    channels vectorized, the columns unrolled, the accumulators [n, y, x, f]; the one-row tile order depends on
    whether the weights outweigh the image."""
    from edgepack.pipeline import lower_model, prepare
    from edgepack.schedule.conv import ConvTiles, conv_block, extents_of, schedule_conv, weight_panels

    model, dims = prepare(conv_zoo, {"batch": BATCH})
    std = [(f, b) for f in lower_model("conv_zoo", model, dims).kernels.values()
           if (b := conv_block(f)) and not (e := extents_of(f, b)).flat and not e.own and e.f == 16]
    assert len(std) == 2  # std3s1 (image larger than its weights) and std3s2 (weights larger)
    for func, block in std:
        ext = extents_of(func, block)
        tiles = ConvTiles.default(ext, 8, 16)
        assert tiles.cvec and tiles.oc % 8 == 0 and ext.w % tiles.ow == 0, tiles
        assert list(weight_panels(func, block, tiles).values()) == [(tiles.oc, 1)]
        text = schedule_conv(func, block, tiles, True).script()
        panel = f"T.Buffer((T.int64({ext.f // tiles.oc}), T.int64({ext.c}), T.int64(3), T.int64(3), T.int64({tiles.oc}))"
        assert panel in text, text[:600]
        assert f"T.vectorized(T.int64({tiles.oc}))" in text and f"T.unroll(T.int64({tiles.ow}))" in text
        assert "T.where" not in text
        assert 'T.sblock("T_add")' not in text  # the bias computed in the Clip's pass: no tile buffer between


def test_strided_conv_reads_deinterleaved_columns(conv_zoo):
    """Stride 2: the padded copy stores even and odd columns apart, so tiles read contiguous vectors."""
    from edgepack.pipeline import lower_model, prepare
    from edgepack.schedule.conv import ConvTiles, conv_block, extents_of, schedule_conv

    model, dims = prepare(conv_zoo, {"batch": BATCH})
    for func in lower_model("conv_zoo", model, dims).kernels.values():
        if (block := conv_block(func)) and int(func.params[0].shape[3]) == 2 * int(func.params[-1].shape[3]):
            tiles = ConvTiles.default(extents_of(func, block), 16, 32)
            if tiles.cvec:  # depthwise channel vectors: the copy is [y, x, c], every tap a contiguous vector
                continue
            text = schedule_conv(func, block, tiles, True).script()
            assert "% T.int64(2), " in text, block  # [.., y, x % 2, x // 2]


def test_single_channel_rectangular_stem_matches_onnxruntime(build_cache, tmp_path):
    """DS-CNN's stem: one input channel (its loop vanishes from the padding copy), a 10x4 kernel, stride 2,
    padding 5 rows x 1 column."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 1, 10, 4)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[10, 4], strides=[2, 2], pads=[5, 1, 5, 1])
    graph = helper.make_graph([node], "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 49, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 25, 5])], [w])
    path = tmp_path / "stem.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    bundle = build_cache(path, {"batch": BATCH}, "conv_stem")
    for dims, err in check_against_onnxruntime(bundle, path, [{"batch": b} for b in (1, 5, 8)]):
        assert err < TOL, f"at {dims}: max relative error {err:.2e}"


def test_float_3x3_stem_takes_two_channel_vectors_on_512_bit_boards(tmp_path):
    """MobileNetV2's 3->32 stride-2 stem: 2 channel vectors x 2 columns on AVX-512 (ConvTiles.stem_vectors),
    the column form on AVX2 and NEON and for 7x7 and int8 stems. That tile on this host's lanes, built into a
    package, matches onnxruntime at batch 1, 3 and 8."""
    from dataclasses import replace

    from edgepack.board import load_board
    from edgepack.pipeline import build_package, lower_model, prepare
    from edgepack.schedule.conv import ConvExtents, ConvTiles, conv_block
    from edgepack.schedule.defaults import schedules_for

    stem = ConvExtents(f=32, h=112, w=112, c=3, kh=3, kw=3, flat=False, stride=2)
    assert ConvTiles.default(stem, 16, 32) == ConvTiles(oc=32, oh=1, ow=2, cvec=True)
    for other, lanes, registers in ((stem, 8, 16), (stem, 4, 32), (replace(stem, f=64, kh=7, kw=7), 16, 32),
                                    (replace(stem, integer=True), 16, 32)):
        assert ConvTiles.default(other, lanes, registers) != ConvTiles(oc=2 * lanes, oh=1, ow=2, cvec=True)

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 3, 3, 3)) / 5).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    graph = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"])], "stem3",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 32, 16, 16])], inits)
    path = tmp_path / "stem3.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model, dims = prepare(path, {"batch": BATCH})
    (name,) = [n for n, f in lower_model("stem3", model, dims).kernels.items() if conv_block(f)]
    host = load_board("host")
    tiles = ConvTiles(oc=2 * host.vector_lanes_f32, oh=1, ow=2, cvec=True)
    bundle = build_package(path, "host", {"batch": BATCH}, tmp_path / "stem3", name="stem3",
                           schedules=replace(schedules_for(host), conv={name: tiles})).bundle
    for dims, err in check_against_onnxruntime(bundle, path, [{"batch": b} for b in (1, 3, 8)]):
        assert err < TOL, f"at {dims}: max relative error {err:.2e}"


@pytest.mark.slow
@pytest.mark.skipif(not have("qemu-aarch64"), reason="needs qemu-user (apt-get install qemu-user)")
def test_every_conv_kind_matches_onnxruntime_on_aarch64(conv_zoo, tmp_path):
    """The same layers with NEON's 4-lane tiles (stride-2 depthwise as channel vectors, the rest as columns),
    cross-compiled for the Cortex-A72 stand-in and run under qemu-aarch64 at batch min, odd, prime, max."""
    from edgepack.pipeline import build_package

    bundle = build_package(conv_zoo, "qemu-aarch64", {"batch": BATCH}, tmp_path / "conv_zoo").bundle
    for dims, err in check_against_onnxruntime(bundle, conv_zoo, [{"batch": b} for b in (1, 3, 7, 8)],
                                               launcher=["qemu-aarch64"]):
        assert err < TOL, f"{dims}: max relative error {err:.2e} on qemu-aarch64"