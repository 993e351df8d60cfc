"""Build edgepack's bundled example models (encoder, mlp, cnn) with onnx.helper only.

Run:  python -m edgepack.examples.make_examples [--out DIR] [--no-verify]

Every model has one real dynamic dim (dim_param "seq" or "batch"), fixed random weights
(seed 0), opset 18, and is a few tens of KB. By default each model is verified after writing:
onnx.checker (full_check), onnxruntime at several sizes, TVM's Relax ONNX import keeping the dim
symbolic, and a TVM llvm build compared against onnxruntime at those sizes.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
IR_VERSION = 8  # opset 18 needs IR >= 8; keeps the files loadable by older runtimes
SEED = 0
HERE = Path(__file__).resolve().parent


class _Builder:
    """Collects nodes and initializers; names are made unique with a counter."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def const(self, prefix: str, array: np.ndarray) -> str:
        n = self.name(prefix)
        # np.array (not ascontiguousarray, which makes 0-d arrays 1-d) keeps scalars 0-d.
        self.inits.append(numpy_helper.from_array(np.array(array, order="C"), n))
        return n

    def weight(self, prefix: str, shape, fan_in: int) -> str:
        w = self.rng.normal(0.0, 1.0 / math.sqrt(fan_in), size=shape).astype(np.float32)
        return self.const(prefix, w)

    def bias(self, prefix: str, n: int, scale: float = 0.02) -> str:
        return self.const(prefix, self.rng.normal(0.0, scale, size=(n,)).astype(np.float32))

    def op(self, op_type: str, inputs, prefix: str | None = None, out: str | None = None, **attrs) -> str:
        o = out or self.name(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [o], name=self.name(op_type), **attrs))
        return o

    def model(self, graph_name: str, inputs, outputs, doc: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, graph_name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(
            g,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="edgepack.examples.make_examples",
            ir_version=IR_VERSION,
        )
        m.doc_string = doc
        return m


# --------------------------------------------------------------------------- models

def make_encoder(d_model: int = 64, heads: int = 4, d_ff: int = 128, seed: int = SEED) -> onnx.ModelProto:
    """One post-norm transformer encoder block: x [1, seq, 64] -> y [1, seq, 64]."""
    assert d_model % heads == 0
    dh = d_model // heads
    b = _Builder(seed)
    x = "x"

    def linear(inp: str, n_in: int, n_out: int, tag: str) -> str:
        h = b.op("MatMul", [inp, b.weight(f"{tag}_w", (n_in, n_out), n_in)], f"{tag}_mm")
        return b.op("Add", [h, b.bias(f"{tag}_b", n_out)], tag)

    # [1, seq, d] -> [1, seq, heads, dh]; 0 copies the input dim, so seq stays symbolic.
    split_shape = b.const("shape_heads", np.array([0, 0, heads, dh], dtype=np.int64))
    merge_shape = b.const("shape_merge", np.array([0, 0, d_model], dtype=np.int64))

    def heads_of(t: str, perm, tag: str) -> str:
        r = b.op("Reshape", [t, split_shape], f"{tag}_r")
        return b.op("Transpose", [r], f"{tag}_t", perm=perm)

    q = heads_of(linear(x, d_model, d_model, "q"), [0, 2, 1, 3], "q")  # [1, h, seq, dh]
    kt = heads_of(linear(x, d_model, d_model, "k"), [0, 2, 3, 1], "k")  # [1, h, dh, seq]
    v = heads_of(linear(x, d_model, d_model, "v"), [0, 2, 1, 3], "v")  # [1, h, seq, dh]

    scores = b.op("MatMul", [q, kt], "scores")  # [1, h, seq, seq]
    scale = b.const("scale", np.array(1.0 / math.sqrt(dh), dtype=np.float32))
    scores = b.op("Mul", [scores, scale], "scores_scaled")
    probs = b.op("Softmax", [scores], "probs", axis=-1)
    ctx = b.op("MatMul", [probs, v], "ctx")  # [1, h, seq, dh]
    ctx = b.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])  # [1, seq, h, dh]
    ctx = b.op("Reshape", [ctx, merge_shape], "ctx_r")  # [1, seq, d]
    attn = linear(ctx, d_model, d_model, "o")

    def layer_norm(t: str, tag: str, out: str | None = None) -> str:
        gamma = b.const(f"{tag}_g", (1.0 + b.rng.normal(0, 0.05, d_model)).astype(np.float32))
        beta = b.const(f"{tag}_beta", b.rng.normal(0, 0.05, d_model).astype(np.float32))
        return b.op("LayerNormalization", [t, gamma, beta], tag, out=out, axis=-1, epsilon=1e-5)

    h1 = layer_norm(b.op("Add", [x, attn], "res1"), "ln1")

    # FFN with exact Gelu spelled out: x * 0.5 * (1 + erf(x / sqrt(2)))
    f = linear(h1, d_model, d_ff, "ff1")
    sqrt2 = b.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = b.const("half", np.array(0.5, dtype=np.float32))
    one = b.const("one", np.array(1.0, dtype=np.float32))
    e = b.op("Erf", [b.op("Div", [f, sqrt2], "gelu_div")], "gelu_erf")
    g = b.op("Mul", [b.op("Mul", [f, half], "gelu_half"), b.op("Add", [e, one], "gelu_1p")], "gelu")
    f2 = linear(g, d_ff, d_model, "ff2")
    h2 = b.op("Add", [h1, f2], "res2")
    layer_norm(h2, "ln2", out="y")

    return b.model(
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", d_model])],
        f"One transformer encoder block, d_model={d_model}, {heads} heads of {dh}, FFN {d_ff}, "
        "post-norm, Gelu(erf). Dynamic dim: seq.",
    )


def make_mlp(seed: int = SEED) -> onnx.ModelProto:
    """x [batch, 32] -> Gemm 64 + Relu -> Gemm 64 + Relu -> Gemm 10 -> logits [batch, 10]."""
    b = _Builder(seed)
    h = "x"
    dims = [32, 64, 64, 10]
    for i, (n_in, n_out) in enumerate(zip(dims[:-1], dims[1:])):
        # transB=1: weight stored [out, in] like torch.nn.Linear exports.
        w = b.weight(f"fc{i}_w", (n_out, n_in), n_in)
        last = i == len(dims) - 2
        h = b.op("Gemm", [h, w, b.bias(f"fc{i}_b", n_out)], f"fc{i}",
                 out="logits" if last else None, transB=1)
        if not last:
            h = b.op("Relu", [h], f"relu{i}")
    return b.model(
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        "MLP 32-64-64-10 with Relu. Dynamic dim: batch.",
    )


def make_cnn(seed: int = SEED) -> onnx.ModelProto:
    """image [batch, 3, 16, 16] -> 2x (Conv, BN, Relu) with a MaxPool, GAP, Flatten, Gemm -> [batch, 10]."""
    b = _Builder(seed)

    def conv_bn_relu(inp: str, c_in: int, c_out: int, tag: str) -> str:
        w = b.weight(f"{tag}_w", (c_out, c_in, 3, 3), c_in * 9)
        c = b.op("Conv", [inp, w, b.bias(f"{tag}_b", c_out)], f"{tag}",
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
        scale = b.const(f"{tag}_bn_scale", (1.0 + b.rng.normal(0, 0.1, c_out)).astype(np.float32))
        shift = b.const(f"{tag}_bn_bias", b.rng.normal(0, 0.1, c_out).astype(np.float32))
        mean = b.const(f"{tag}_bn_mean", b.rng.normal(0, 0.1, c_out).astype(np.float32))
        var = b.const(f"{tag}_bn_var", b.rng.uniform(0.5, 1.5, c_out).astype(np.float32))
        bn = b.op("BatchNormalization", [c, scale, shift, mean, var], f"{tag}_bn", epsilon=1e-5)
        return b.op("Relu", [bn], f"{tag}_relu")

    h = conv_bn_relu("image", 3, 8, "conv1")  # [b, 8, 16, 16]
    h = b.op("MaxPool", [h], "pool1", kernel_shape=[2, 2], strides=[2, 2])  # [b, 8, 8, 8]
    h = conv_bn_relu(h, 8, 16, "conv2")  # [b, 16, 8, 8]
    h = b.op("GlobalAveragePool", [h], "gap")  # [b, 16, 1, 1]
    h = b.op("Flatten", [h], "flat", axis=1)  # [b, 16]
    w = b.weight("fc_w", (10, 16), 16)
    b.op("Gemm", [h, w, b.bias("fc_b", 10)], out="logits", transB=1)
    return b.model(
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        "Small CNN: Conv3x3(3->8)+BN+Relu, MaxPool2, Conv3x3(8->16)+BN+Relu, GAP, Flatten, Gemm(16->10). "
        "Dynamic dim: batch.",
    )


BUILDERS = {"encoder": make_encoder, "mlp": make_mlp, "cnn": make_cnn}
# Sizes used by verify(): the dim's value in each onnxruntime run.
VERIFY_SIZES = {"encoder": ("seq", [1, 7, 64, 256]), "mlp": ("batch", [1, 3, 64]), "cnn": ("batch", [1, 2, 16])}


# --------------------------------------------------------------------------- verification

def _ort_check(model_path: Path, dim: str, sizes) -> list[str]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    rng = np.random.default_rng(1)
    lines = []
    for n in sizes:
        shape = [n if d == dim else d for d in inp.shape]
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {inp.name: x})
        want = [n if d == dim else d for d in out.shape]
        if list(y.shape) != want or not np.isfinite(y).all():
            raise AssertionError(f"{model_path.name}: {dim}={n} gave {y.shape} (want {want})")
        lines.append(f"{dim}={n}->{list(y.shape)}")
    return lines


def _tvm_check(model: onnx.ModelProto, dim: str, sizes, run: bool = True) -> str:
    """Import with TVM's Relax frontend; the dim must stay symbolic. With run, also compile for the
    host and compare against onnxruntime at the given sizes."""
    from tvm.relax.frontend.onnx import from_onnx  # must be imported explicitly in TVM 0.27

    mod = from_onnx(model, keep_params_in_input=True)
    main = mod["main"]
    x_sinfo = main.params[0].ty
    if dim not in [str(d) for d in x_sinfo.shape]:
        raise AssertionError(f"TVM import lost the symbolic dim {dim!r}: input is {x_sinfo}")
    if dim not in [str(d) for d in main.ret_ty.shape]:
        raise AssertionError(f"TVM output shape {main.ret_ty} does not carry {dim!r}")
    params = list(main.attrs["params"])
    msg = f"relax main({main.params[0].name}: {x_sinfo}, +{len(params)} params) -> {main.ret_ty}"
    if not run:
        return msg

    import onnxruntime as ort
    import tvm
    from tvm import relax

    exe = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(exe, tvm.cpu())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    rng = np.random.default_rng(2)
    worst = 0.0
    for n in sizes:
        x = rng.standard_normal([n if d == dim else d for d in inp.shape]).astype(np.float32)
        (want,) = sess.run(None, {inp.name: x})
        got = vm["main"](tvm.runtime.tensor(x), *params).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        worst = max(worst, float(np.abs(got - want).max()))
    return msg + f"; compiled, matches onnxruntime at {dim}={list(sizes)} (max |diff| {worst:.1e})"


def verify(name: str, path: Path, tvm: bool = True, tvm_run: bool = True) -> None:
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    dim, sizes = VERIFY_SIZES[name]
    ort_lines = _ort_check(path, dim, sizes)
    print(f"  onnxruntime ok: {', '.join(ort_lines)}")
    if tvm:
        print(f"  tvm ok: {_tvm_check(model, dim, sizes, run=tvm_run)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="output directory (default: next to this file)")
    ap.add_argument("--no-verify", action="store_true", help="skip checker/onnxruntime/TVM checks")
    ap.add_argument("--no-tvm", action="store_true", help="skip the TVM import check")
    ap.add_argument("--no-tvm-run", action="store_true", help="import with TVM but do not compile and run")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        model = build()
        path = args.out / f"{name}.onnx"
        onnx.save(model, str(path))
        print(f"{path}: {path.stat().st_size / 1024:.1f} KB, {len(model.graph.node)} nodes")
        if not args.no_verify:
            verify(name, path, tvm=not args.no_tvm, tvm_run=not args.no_tvm_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
