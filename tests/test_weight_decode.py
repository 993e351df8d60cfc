"""Int8 weights stay int8 (model/weight_decode.py): a weight-only int8 dense layer, its weight behind a
DequantizeLinear (per tensor, per channel, Gemm with transB) or a Cast + Mul, builds to one kernel that reads
the int8 weight and decodes it in registers. No float copy of the weight in the arena, no decode kernel, and
outputs that match onnxruntime at several sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import sizes_for
from onnx import TensorProto, helper, numpy_helper

from edgepack.check import check_against_onnxruntime

pytestmark = pytest.mark.e2e

K, N, SEQ = 96, 160, (1, 64)


def _model(path: Path, form: str) -> Path:
    rng = np.random.default_rng(0)
    w8 = rng.integers(-127, 128, (N, K) if form == "gemm_transb" else (K, N)).astype(np.int8)
    per_channel = form in ("per_channel", "gemm_transb", "cast_mul")
    scale = (rng.uniform(0.002, 0.02, N) if per_channel else np.array(0.01)).astype(np.float32)
    inits = [numpy_helper.from_array(w8, "w8"), numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")]
    if form == "cast_mul":
        inits.append(numpy_helper.from_array(scale, "s"))
        decode = [helper.make_node("Cast", ["w8"], ["wf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["wf", "s"], ["w"])]
    else:
        inits.append(numpy_helper.from_array(scale, "s"))
        axis = {"gemm_transb": 0, "per_channel": 1}.get(form)
        decode = [helper.make_node("DequantizeLinear", ["w8", "s"], ["w"], **({"axis": axis} if axis is not None else {}))]
    if form == "gemm_transb":
        layer = [helper.make_node("Gemm", ["x", "w", "b"], ["y0"], transB=1)]
    else:
        layer = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y0"])]
    nodes = decode + layer + [helper.make_node("Relu", ["y0"], ["y"])]
    g = helper.make_graph(nodes, "w8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", N])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("form", ["per_tensor", "per_channel", "gemm_transb", "cast_mul"])
def test_int8_weight_is_decoded_inside_the_dense_kernel(build_cache, tmp_path, form):
    model = _model(tmp_path / f"{form}.onnx", form)
    bundle = build_cache(model, {"seq": SEQ}, f"w8_{form}")
    m = bundle.manifest
    assert list(m["kernels"]) and len(m["kernels"]) == 1, m["kernels"]  # no separate decode kernel
    mem = m["memory"]
    assert mem["arena_bytes"] < K * N * 4, mem  # the float weight is nowhere in the arena
    assert mem["weights_bytes"] < K * N * 4 / 2, mem  # int8 weight + scales + bias, not a float copy
    checks = check_against_onnxruntime(bundle, model, [{"seq": s} for s in sizes_for(*SEQ)])
    assert max(e for _, e in checks) < 1e-5, checks
