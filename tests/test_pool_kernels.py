"""Pooling windows (schedule/pool.py): planes in parallel, each padded on its own, windows unrolled;
outputs against onnxruntime at several dynamic sizes, with a dynamic batch and a dynamic image size."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from edgepack.check import check_against_onnxruntime

pytestmark = pytest.mark.e2e

pytest.importorskip("tvm")

TOL = 1e-5  # max, and averages of up to 9 values: rounding only


def _pool_net(path, spatial: list) -> None:
    """MaxPool 3x3/2 pad 1 (ResNet's), AveragePool 3x3/1 pad 1 with and without the padding counted, and a
    ceil-mode MaxPool 2x2/2, on x[batch, 8, *spatial]."""
    mk = helper.make_node
    nodes = [mk("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             mk("AveragePool", ["mp"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
             mk("AveragePool", ["ap"], ["aq"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("MaxPool", ["aq"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)]
    graph = helper.make_graph(nodes, "pools", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["batch", 8, *spatial])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, "oh", "ow"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_pools_match_onnxruntime_with_a_dynamic_batch(build_cache, tmp_path):
    path = tmp_path / "pools.onnx"
    _pool_net(path, [23, 30])
    bundle = build_cache(path, {"batch": (1, 8)}, "pools")
    for dims, err in check_against_onnxruntime(bundle, path, [{"batch": b} for b in (1, 3, 7, 8)]):
        assert err < TOL, f"at {dims}: max relative error {err:.2e}"


def test_pools_match_onnxruntime_with_a_dynamic_image(build_cache, tmp_path):
    path = tmp_path / "pools_hw.onnx"
    _pool_net(path, ["h", "w"])
    bundle = build_cache(path, {"batch": (1, 2), "h": (4, 40), "w": (4, 40)}, "pools_hw")
    sizes = [{"batch": 1, "h": 4, "w": 4}, {"batch": 2, "h": 17, "w": 31}, {"batch": 2, "h": 40, "w": 40}]
    for dims, err in check_against_onnxruntime(bundle, path, sizes):
        assert err < TOL, f"at {dims}: max relative error {err:.2e}"


def test_a_pool_is_scheduled_by_plane_with_its_window_unrolled(tmp_path):
    from edgepack.board import load_board
    from edgepack.model.frontend import lower_model, prepare
    from edgepack.schedule.defaults import schedules_for
    from edgepack.schedule.variants import make_variants

    sched = schedules_for(load_board("host"))

    def pools(spatial: list, dims: dict) -> dict:
        path = tmp_path / "pools.onnx"
        _pool_net(path, spatial)
        model, ranges = prepare(path, dims)
        kernels = lower_model("m", model, ranges).kernels
        found = {k: make_variants(k, f, sched).variants[0].func.script() for k, f in kernels.items() if "pool" in k}
        assert len(found) >= 3, sorted(kernels)
        return found

    for name, text in pools(["h", "w"], {"batch": (1, 2), "h": (4, 40), "w": (4, 40)}).items():
        assert "T.parallel(" in text and "T.unroll(" in text, name
    static = pools([112, 112], {"batch": (1, 8)})
    for name, text in static.items():
        assert "T.parallel(" in text and "T.unroll(" in text, name
    assert any("T.vectorized(" in t for k, t in static.items() if "avg" in k)  # the average's divide
    # ResNet's max pool: the padding is computed per plane, inside the parallel loop, over the window's rows
    resnet = next(t for k, t in static.items() if "max_pool" in k and "T.grid(T.int64(113), T.int64(113))" in t)
    assert resnet.index("T.parallel(") < resnet.index("T.grid(T.int64(113), T.int64(113))")


def test_pool_kernels_built_as_c_source_match_the_legalized_ones(tmp_path):
    """Cortex-M boards build kernels with TVM's C codegen, which reuses a max operand's temporary across
    stores in one scope (docs/tvm-facts.md#c-min-max): each scheduled pool kernel for mps2-an386, compiled
    from its C source with the host gcc, against the legalized kernel built by LLVM, at batch 3."""
    import numpy as np
    import tvm

    from edgepack.board import load_board
    from edgepack.model.frontend import lower_model, prepare
    from edgepack.schedule.defaults import schedules_for
    from edgepack.schedule.variants import make_variants

    path = tmp_path / "pools.onnx"
    _pool_net(path, [23, 30])
    model, ranges = prepare(path, {"batch": (1, 4)})
    kernels = {k: f for k, f in lower_model("m", model, ranges).kernels.items() if "pool" in k}
    sched = schedules_for(load_board("mps2-an386"))
    rng = np.random.default_rng(0)

    def run(name: str, func, target: str, args: list) -> np.ndarray:
        mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True}):
            lib = tvm.tirx.build(mod, target=tvm.target.Target({"kind": target}))
        so = tmp_path / f"{name}_{target}.so"  # one path per library: dlopen hands back a path it has loaded
        lib.export_library(str(so))
        out = [tvm.runtime.tensor(a.copy()) for a in args]
        tvm.runtime.load_module(str(so))["main"](*out)
        return out[-1].numpy()

    assert len(kernels) >= 3, sorted(kernels)
    for name, func in kernels.items():
        scheduled = make_variants(name, func, sched).variants[0].func
        assert "T.parallel(" not in scheduled.script()  # one core, and the plane loop outside the padding
        shapes = [[3 if not isinstance(s, tvm.tirx.IntImm) else int(s) for s in p.shape] for p in func.params]
        args = [rng.standard_normal(s).astype("float32") for s in shapes]
        want = run(name, func, "llvm", args)
        got = run(name, scheduled, "c", args)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=name)
