"""LSTM, GRU, TopK and CumSum through edgepack's own converters (edgepack/model/converters.py, recurrent.py):
small models with a dynamic time dim and a dynamic batch, built for the host and run through the package's C
program, outputs compared with onnxruntime at min, max, odd and prime lengths (layout 1, which onnxruntime
refuses, with ONNX's reference implementation); and an LSTM's firmware on the Cortex-M4 stand-in."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import EXPORTS, have, sizes_for
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgepack import standin
from edgepack.board import load_board
from edgepack.check import check_against_onnxruntime, max_rel_error
from edgepack.deploy.device import Connection, open_device
from edgepack.errors import ModelError
from edgepack.deploy.local import run_local
from edgepack.pipeline import build_package

pytestmark = pytest.mark.e2e

IN, HIDDEN = 6, 5
TIME, BATCH = (1, 31), (1, 3)
F32 = TensorProto.FLOAT


def _rnn_model(cell: str, direction: str, layout: int = 0, lens: bool = False, **attrs) -> onnx.ModelProto:
    """One LSTM (with peepholes) or GRU node: X, initial_h (and initial_c) as inputs, weights as initializers."""
    gates, dirs = (4 if cell == "LSTM" else 3) * HIDDEN, 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(len(cell) + dirs + layout)
    weights = {"W": (dirs, gates, IN), "R": (dirs, gates, HIDDEN), "B": (dirs, 2 * gates)}
    if cell == "LSTM":
        weights["P"] = (dirs, 3 * HIDDEN)
    inits = [numpy_helper.from_array((0.5 * rng.standard_normal(s)).astype(np.float32), n) for n, s in weights.items()]
    tb = ["time", "batch"] if layout == 0 else ["batch", "time"]
    state = [dirs, "batch", HIDDEN] if layout == 0 else ["batch", dirs, HIDDEN]
    states = ["h0", "c0"] if cell == "LSTM" else ["h0"]
    inputs = [helper.make_tensor_value_info("x", F32, tb + [IN])]
    inputs += [helper.make_tensor_value_info("lens", TensorProto.INT32, ["batch"])] if lens else []
    inputs += [helper.make_tensor_value_info(s, F32, state) for s in states]
    outs = ["y", "y_h", "y_c"][:len(states) + 1]
    peepholes = ["P"] if cell == "LSTM" else []
    node = helper.make_node(cell, ["x", "W", "R", "B", "lens" if lens else "", *states, *peepholes], outs,
                            hidden_size=HIDDEN, direction=direction, layout=layout, **attrs)
    y_shape = tb[:1] + [dirs] + tb[1:] + [HIDDEN] if layout == 0 else ["batch", "time", dirs, HIDDEN]
    outputs = [helper.make_tensor_value_info("y", F32, y_shape)]
    outputs += [helper.make_tensor_value_info(o, F32, state) for o in outs[1:]]
    model = helper.make_model(helper.make_graph([node], "rnn", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    return model


def _feeds(model: onnx.ModelProto, dims: dict[str, int], rng) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value or dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT32:  # sequence_lens: each row its own length
            feeds[vi.name] = rng.integers(1, dims["time"] + 1, size=shape).astype(np.int32)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _reference(model: onnx.ModelProto, path):
    if any(a.name == "layout" and a.i == 1 for a in model.graph.node[0].attribute):
        ref = ReferenceEvaluator(model)  # onnxruntime refuses batch-major recurrent ops
        return lambda feeds: ref.run(None, feeds)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def _tied_feeds(model: onnx.ModelProto, dims: dict[str, int], rng) -> dict[str, np.ndarray]:
    """Small integers as floats: many ties, which onnxruntime breaks by the lower index."""
    return {k: np.round(2 * v).astype(np.float32) for k, v in _feeds(model, dims, rng).items()}


def _build_and_compare(model: onnx.ModelProto, tmp_path, ranges: dict[str, tuple[int, int]], feeds_fn=_feeds,
                       exact=(), board: str = "host", run=run_local) -> None:
    """Sweep the first dim over min, max, odd and prime sizes (the others vary too); compare every output."""
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    bundle = build_package(path, board, ranges, tmp_path / "pkg").bundle
    reference = _reference(model, path)
    rng = np.random.default_rng(0)
    first = next(iter(ranges))
    for i, v in enumerate(sizes_for(*ranges[first])):
        dims = {d: (v if d == first else hi - i % (hi - lo + 1)) for d, (lo, hi) in ranges.items()}
        feeds = feeds_fn(model, dims, rng)
        got = [np.load(p) for p in run(bundle, list(feeds.values()), tmp_path / f"out{i}")]
        for name, g, r in zip([o.name for o in model.graph.output], got, reference(feeds)):
            if name in exact:
                assert np.array_equal(g, r), f"{dims}: {name} differs"
            else:
                assert max_rel_error(g, r) < 1e-4, f"{dims}: {name} max relative error {max_rel_error(g, r):.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("cell, direction, layout, attrs", [
    ("LSTM", "forward", 0, {}),
    ("LSTM", "bidirectional", 0, {}),
    ("LSTM", "reverse", 1, {}),
    ("GRU", "forward", 0, {}),
    ("GRU", "bidirectional", 0, {"linear_before_reset": 1}),
    ("GRU", "reverse", 1, {}),
    ("GRU", "forward", 0, {"clip": 0.5}),  # onnx.reference ignores clip: compared with onnxruntime (layout 0)
])
def test_recurrent_matches_reference_at_every_length(tmp_path, cell, direction, layout, attrs):
    _build_and_compare(_rnn_model(cell, direction, layout, **attrs), tmp_path, {"time": TIME, "batch": BATCH})


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_sequence_lens_pad_with_zeros_like_onnxruntime(tmp_path, cell):
    _build_and_compare(_rnn_model(cell, "bidirectional", lens=True), tmp_path, {"time": (2, 11), "batch": (3, 4)})


def _topk_cumsum_model() -> onnx.ModelProto:
    """TopK largest and smallest along the dynamic axis and the static one, CumSum exclusive/reverse."""
    const = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("TopK", ["x", "k3"], ["top_v", "top_i"], axis=1),
             helper.make_node("TopK", ["x", "k2"], ["low_v", "low_i"], axis=-1, largest=0),
             helper.make_node("CumSum", ["x", "ax1"], ["csum"]),
             helper.make_node("CumSum", ["x", "ax2"], ["csum_er"], exclusive=1, reverse=1)]
    shapes = {"top_v": ["batch", 3, 7], "top_i": ["batch", 3, 7], "low_v": ["batch", "n", 2],
              "low_i": ["batch", "n", 2], "csum": ["batch", "n", 7], "csum_er": ["batch", "n", 7]}
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT64 if n.endswith("_i") else F32, s)
               for n, s in shapes.items()]
    graph = helper.make_graph(nodes, "topk_cumsum", [helper.make_tensor_value_info("x", F32, ["batch", "n", 7])],
                              outputs, [const("k3", [3]), const("k2", [2]), const("ax1", 1), const("ax2", -1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.slow
def test_topk_and_cumsum_match_onnxruntime_with_ties(tmp_path):
    _build_and_compare(_topk_cumsum_model(), tmp_path, {"n": (3, 17), "batch": (1, 2)}, _tied_feeds,
                       exact={"top_i", "low_i"})


@pytest.mark.hil
@pytest.mark.skipif(not (have("arm-none-eabi-gcc") and have("qemu-system-arm")),
                    reason="needs gcc-arm-none-eabi and qemu-system-arm")
def test_recurrent_kernels_run_on_cortex_m4(tmp_path, monkeypatch):
    """The kernels as C source (no vectors, one core) in firmware on the mps2-an386 stand-in."""
    monkeypatch.setenv("EDGEPACK_STATE_DIR", str(tmp_path / "standins"))
    board = load_board("mps2-an386")
    dev = open_device(board, Connection())
    try:
        def run(bundle, arrays, out):
            if dev.info is None or dev.info.fields.get("id") != bundle.manifest["firmware"]["id"]:
                dev.install(bundle)  # once
            return dev.run(bundle, arrays, out)

        _build_and_compare(_rnn_model("LSTM", "bidirectional"), tmp_path, {"time": TIME, "batch": BATCH},
                           board=board.name, run=run)
    finally:
        dev.close()
        standin.down(board)


@pytest.mark.slow
@pytest.mark.parametrize("export", ["roberta_torchscript", "roberta_dynamo"])
def test_roberta_position_ids_by_cumsum_match_onnxruntime(tmp_path, export):
    """RoBERTa exports compute position ids from the attention mask with CumSum."""
    from test_examples_e2e import _token_inputs

    path = EXPORTS / "hf" / f"{export}.onnx"
    assert any(n.op_type == "CumSum" for n in onnx.load(str(path)).graph.node)
    bundle = build_package(path, "host", {"batch": (1, 4), "seq": (2, 32)}, tmp_path / "pkg").bundle
    sizes = [{"batch": b, "seq": s} for b, s in ((1, 2), (4, 32), (3, 17), (2, 31))]
    for dims, err in check_against_onnxruntime(bundle, path, sizes, _token_inputs):
        assert err < 1e-4, f"{dims}: max relative error {err:.2e}"


def test_unsupported_variants_are_refused_with_one_line(tmp_path):
    coupled = _rnn_model("LSTM", "forward", input_forget=1)
    topk_k_input = helper.make_model(helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"])], "g",
        [helper.make_tensor_value_info("x", F32, ["n", 8]), helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", F32, ["n", 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, ["n", 2])]),
        opset_imports=[helper.make_opsetid("", 14)])
    for model, ranges, needle in [(coupled, {"time": TIME, "batch": BATCH}, "input_forget=1"),
                                  (topk_k_input, {"n": (1, 4)}, "TopK k must be a constant")]:
        path = tmp_path / "m.onnx"
        onnx.save(model, str(path))
        with pytest.raises(ModelError, match=needle) as e:
            build_package(path, "host", ranges, tmp_path / "pkg")
        assert "\n" not in str(e.value) and not (tmp_path / "pkg").exists()
