"""Bad input: one clear line on stderr, exit code 2, no traceback, nothing half-written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import run_cli
from onnx import TensorProto, helper

from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e

ENCODER = EXAMPLES["encoder"].path


def assert_user_error(r, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert lines[0].startswith("edgepack: error: ")
    for n in needles:
        assert n in lines[0], lines[0]


def _tiny_model(op: str, path, dims=("n",)) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))
    node = helper.make_node(op, ["x"], ["y"], name=f"my_{op.lower()}", domain="" if op != "Custom" else "com.acme")
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("com.acme", 1)] if op == "Custom" else [])
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets), path)


def test_missing_file(tmp_path):
    assert_user_error(run_cli("build", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "out")), "does not exist")
    assert not (tmp_path / "out").exists()


def test_not_onnx(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_text("this is not a model\n")
    assert_user_error(run_cli("build", str(p), "-o", str(tmp_path / "out")), "ONNX")
    assert not (tmp_path / "out").exists()


def test_truncated_onnx(tmp_path):
    p = tmp_path / "t.onnx"
    p.write_bytes(ENCODER.read_bytes()[: ENCODER.stat().st_size // 3])
    assert_user_error(run_cli("build", str(p), "--dim", "seq=1:8", "-o", str(tmp_path / "out")), "t.onnx")
    assert not (tmp_path / "out").exists()


def test_unsupported_ops_listed_together(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
             helper.make_node("Celu", ["a"], ["b"], name="bad_celu"),
             helper.make_node("Hardmax", ["b"], ["c"], name="bad_hardmax"),
             helper.make_node("Custom", ["c"], ["y"], name="bad_custom", domain="com.acme")]
    p = tmp_path / "u.onnx"
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)])
    onnx.save(model, p)
    r = run_cli("build", str(p), "--dim", "n=1:8", "-o", str(tmp_path / "out"))
    assert_user_error(r, "3 node(s)", "Celu (bad_celu)", "Hardmax (bad_hardmax)", "com.acme::Custom (bad_custom)")
    assert not (tmp_path / "out").exists()


def test_dim_without_range(tmp_path):
    assert_user_error(run_cli("build", str(ENCODER), "-o", str(tmp_path / "out")), "seq", "--dim seq=MIN:MAX")


def test_min_greater_than_max(tmp_path):
    assert_user_error(run_cli("build", str(ENCODER), "--dim", "seq=9:3", "-o", str(tmp_path / "o")), "greater")


@pytest.mark.parametrize("arg", ["seq", "seq=1-8", "seq=a:b", "seq=0:8"])
def test_malformed_dim(tmp_path, arg):
    assert_user_error(run_cli("build", str(ENCODER), "--dim", arg, "-o", str(tmp_path / "o")), "--dim")


def test_unknown_dim(tmp_path):
    assert_user_error(run_cli("build", str(ENCODER), "--dim", "seq=1:8", "--dim", "batch=1:2",
                              "-o", str(tmp_path / "o")), "batch", "seq")


def test_unknown_board(tmp_path):
    assert_user_error(run_cli("build", str(ENCODER), "--board", "nosuch", "--dim", "seq=1:8"), "nosuch")


def test_run_bad_inputs(encoder_bundle, tmp_path):
    out = tmp_path / "out"
    good = tmp_path / "x.npy"
    np.save(good, np.zeros((1, 5, 64), np.float32))
    cases = {
        "count": ([good, good], "takes 1 input"),
        "dtype": ([tmp_path / "x64.npy"], "float32"),
        "rank": ([tmp_path / "r.npy"], "rank"),
        "static": ([tmp_path / "s.npy"], "axis 2"),
        "range": ([tmp_path / "big.npy"], "outside"),
        "notnpy": ([tmp_path / "bad.npy"], "not a .npy"),
        "missing": ([tmp_path / "none.npy"], "does not exist"),
    }
    np.save(tmp_path / "x64.npy", np.zeros((1, 5, 64), np.float64))
    np.save(tmp_path / "r.npy", np.zeros((5, 64), np.float32))
    np.save(tmp_path / "s.npy", np.zeros((1, 5, 63), np.float32))
    np.save(tmp_path / "big.npy", np.zeros((1, 257, 64), np.float32))
    (tmp_path / "bad.npy").write_text("nope")
    for name, (inputs, needle) in cases.items():
        args = ["run", str(encoder_bundle.path)] + [a for p in inputs for a in ("--input", str(p))] + ["-o", str(out)]
        assert_user_error(run_cli(*args), needle)
        assert not out.exists() or not any(out.glob("*.npy")), name


def test_run_not_a_package(tmp_path):
    assert_user_error(run_cli("run", str(tmp_path), "--input", "x.npy"), "not an edgepack package")


def test_c_program_rejects_out_of_range_dims(encoder_bundle, tmp_path):
    """The C program itself (not only the Python checks) refuses a dim outside the range: exit 3."""
    import subprocess

    np.save(tmp_path / "big.npy", np.zeros((1, 300, 64), np.float32))
    r = subprocess.run([str(encoder_bundle.path / "ep"), "run", str(tmp_path), str(tmp_path / "big.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 3 and "outside its declared range 1..256" in r.stderr, r.stderr


def test_extra_outputs_that_tvm_cannot_compute_are_refused(tmp_path):
    """TVM's importer returns placeholders for LayerNormalization's Mean/InvStdDev: refuse, don't guess."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    mean = helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["n", 1])
    g = helper.make_tensor("g", TensorProto.FLOAT, [4], [1.0] * 4)
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], name="ln")
    p = tmp_path / "ln.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y, mean], [g]),
                                opset_imports=[helper.make_opsetid("", 18)]), p)
    assert_user_error(run_cli("build", str(p), "--dim", "n=1:4", "-o", str(tmp_path / "o")),
                      "LayerNormalization with more than one output (ln)")


def test_inputs_that_disagree_on_a_dim(build_cache, tmp_path):
    """input_ids says seq = 5, attention_mask says 6: the CLI refuses it, and so does the C program."""
    import subprocess

    from conftest import EXPORT_DIMS, EXPORTS

    bundle = build_cache(EXPORTS / "bert_dynamo.onnx", EXPORT_DIMS["bert_dynamo"], "x_bert_dynamo")
    np.save(tmp_path / "ids.npy", np.ones((2, 5), np.int64))
    np.save(tmp_path / "mask.npy", np.ones((2, 6), np.int64))
    ins = [str(tmp_path / "ids.npy"), str(tmp_path / "mask.npy")]
    assert_user_error(run_cli("run", str(bundle.path), "--input", ins[0], "--input", ins[1],
                              "-o", str(tmp_path / "out")), "dim seq is 5 in one input and 6")
    r = subprocess.run([str(bundle.path / "ep"), "run", str(tmp_path), *ins], capture_output=True, text=True)
    assert r.returncode == 3 and "dim seq is 5 in one input and 6 in input 'attention_mask'" in r.stderr, r.stderr


MLP = EXAMPLES["mlp"].path


def test_package_name_must_be_a_c_identifier(tmp_path):
    """--name names files and C symbols: '../../x' once wrote x.h and x.c outside the package."""
    r = run_cli("build", str(MLP), "--dim", "batch=1:4", "--name", "../../x", "-o", str(tmp_path / "a" / "b"),
                cwd=tmp_path)
    assert_user_error(r, "not a C identifier", "--name x")
    assert list(tmp_path.iterdir()) == []


def test_run_output_is_a_file(encoder_bundle, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 5, 64), np.float32))
    (tmp_path / "out").write_text("mine\n")
    assert_user_error(run_cli("run", str(encoder_bundle.path), "--input", str(tmp_path / "x.npy"),
                              "-o", str(tmp_path / "out")), "is a file")
    assert (tmp_path / "out").read_text() == "mine\n"


@pytest.mark.parametrize("manifest", ["{}", "not json", "[1, 2]", '{"edgepack_version": "0.1", "model": {}}'])
def test_run_damaged_manifest(tmp_path, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    assert_user_error(run_cli("run", str(tmp_path), "--input", "x.npy"), "damaged manifest.json", "rebuild")


def test_bench_output_is_a_folder(encoder_bundle, tmp_path):
    (tmp_path / "runs").mkdir()
    assert_user_error(run_cli("bench", str(encoder_bundle.path), "--sizes", "seq=1", "-o", str(tmp_path / "runs")),
                      "is a folder", "runs/run.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no .runs.tmp beside it
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("args, needle", [
    (["build", str(MLP), "--dim", "batch=1:4", "--dim", "batch=1:8"], "--dim batch is given twice"),
    (["bench", "pkg", "--repeat", "0"], "argument --repeat"),
    (["bench", "pkg", "--rounds", "0"], "argument --rounds"),
    (["bench", "pkg", "--threads", "0"], "from 1 to 1024"),
    (["run", "pkg", "--threads", "1025"], "from 1 to 1024"),
    (["run", "pkg", "--threads", "two"], "from 1 to 1024"),
    (["build", "--no-such-flag"], "unrecognized arguments"),
])
def test_bad_arguments(tmp_path, args, needle):
    assert_user_error(run_cli(*args, cwd=tmp_path), needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sizes", ["seq=1,,8", "seq=1,", "seq=,8"])
def test_bench_sizes_with_empty_entries(encoder_bundle, tmp_path, sizes):
    assert_user_error(run_cli("bench", str(encoder_bundle.path), "--sizes", sizes, "-o", str(tmp_path / "r.json")),
                      "--sizes")
    assert list(tmp_path.iterdir()) == []


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("edgepack ") and "apache-tvm" in r.stdout and "onnx" in r.stdout


def _relu_model(path, opset: int = 18, **graph) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = graph.pop("nodes", [helper.make_node("Relu", ["x"], ["y"])])
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", opset)]), path)


def test_graph_without_nodes(tmp_path):
    _relu_model(tmp_path / "e.onnx", nodes=[])
    assert_user_error(run_cli("build", str(tmp_path / "e.onnx"), "--dim", "n=1:4", "-o", str(tmp_path / "o")),
                      "has no nodes")


def test_opset_newer_than_onnx(tmp_path):
    _relu_model(tmp_path / "new.onnx", opset=onnx.defs.onnx_opset_version() + 1)
    assert_user_error(run_cli("build", str(tmp_path / "new.onnx"), "--dim", "n=1:4", "-o", str(tmp_path / "o")),
                      f"opset {onnx.defs.onnx_opset_version() + 1}", "newer than the installed onnx")


def test_missing_external_data_is_named(tmp_path):
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    w = numpy_helper.from_array(np.ones((64, 4), np.float32), "W")
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.weights", size_threshold=0)
    (tmp_path / "m.weights").unlink()
    assert_user_error(run_cli("build", str(tmp_path / "m.onnx"), "--dim", "n=1:4", "-o", str(tmp_path / "o")),
                      "'m.weights'", "beside the model")


def test_range_too_large_for_memory(tmp_path):
    assert_user_error(run_cli("build", str(MLP), "--dim", "batch=1:100000000", "-o", str(tmp_path / "o")),
                      "the memory plan needs 68,000,027,688 B", "--dim")
    assert list(tmp_path.iterdir()) == []


def test_initializer_listed_as_input(tmp_path):
    """torch's keep_initializers_as_inputs lists every weight as a graph input too: they stay weights."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    wv = rng.standard_normal((4, 3)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    w_in = helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x, w_in], [y],
                              [numpy_helper.from_array(wv, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "k.onnx")
    r = run_cli("build", str(tmp_path / "k.onnx"), "--dim", "n=1:4", "-o", str(tmp_path / "k"))
    assert r.returncode == 0, r.stderr
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", xv)
    r = run_cli("run", str(tmp_path / "k"), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert np.allclose(np.load(tmp_path / "out" / "0_y.npy"), xv @ wv, atol=1e-5)


def test_data_dependent_output_shape_refused_naming_the_node(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [1, "k"])
    p = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("NonZero", ["x"], ["y"], name="find_nz")], "g",
                                                  [x], [y]), opset_imports=[helper.make_opsetid("", 13)]), p)
    r = run_cli("build", str(p), "--dim", "n=1:8", "-o", str(tmp_path / "out"))
    assert_user_error(r, "NonZero with a data-dependent output shape (find_nz)")
    assert not (tmp_path / "out").exists()
