"""A package holds its weights once where it matters: what goes to a board (the device program `ep` and the
manifest) is at most 1.25 x weights + 2 MB, and the code size counts no weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepack.deploy.ssh import _package_files
from edgepack.pipeline import build_package

pytestmark = pytest.mark.e2e

N = 1024  # a 1024 x 1024 float layer: 4 MiB of weights


def _big_dense(path) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((N, N)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_files_sent_hold_the_weights_once(tmp_path):
    _big_dense(tmp_path / "big.onnx")
    r = build_package(tmp_path / "big.onnx", "host", {"batch": (1, 8)}, out=tmp_path / "pkg")
    weights = r.weights_bytes
    assert weights >= N * N * 4
    sent = {rel: (r.bundle.path / rel).stat().st_size for rel in _package_files(r.bundle)}
    assert set(sent) == {"ep", "manifest.json"}
    assert sum(sent.values()) <= 1.25 * weights + 2 * 2**20, sent
    assert r.code_bytes < 1 * 2**20 and r.bundle.manifest["memory"]["code_bytes"] == r.code_bytes
