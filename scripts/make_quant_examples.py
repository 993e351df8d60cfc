"""Make small quantised models, as onnxruntime's quantiser writes them, into tests/data/exports/quant/.

    python scripts/make_quant_examples.py

Two float models (seeded random weights), built with onnx.helper:
  convnet: x[batch, 3, 12, 12] -> Conv 3x3 -> Relu -> MaxPool 2 -> depthwise Conv 3x3 (DS-CNN style) -> Conv 3x3
           -> LeakyRelu -> Conv 1x1 -> Sigmoid
           gate (Mul) + residual Add -> GlobalAveragePool -> Flatten -> Gemm -> y[batch, 10]
  block:   x[batch, seq, 32] -> MatMul + bias -> Gelu (erf form) -> MatMul + bias -> residual Add -> Mul -> y
and their quantised forms (tests/test_quant_import.py builds each and compares with onnxruntime):
  <m>_qdq_s8.onnx        quantize_static QDQ, int8 activations and weights, per-tensor, symmetric activations
  <m>_qdq_u8.onnx        QDQ, uint8 activations (asymmetric), int8 weights, per-tensor
  <m>_qdq_pc_s8.onnx     QDQ, int8 activations (asymmetric), int8 weights per channel
  <m>_qdq_pc_u8u8.onnx   QDQ, uint8 activations and uint8 weights, per channel
  <m>_qop_u8.onnx        quantize_static QOperator (QLinearConv, QLinearMatMul, QLinearAdd, ...), uint8 / int8
  <m>_qop_s8.onnx        QOperator, int8 activations and weights
  <m>_dyn.onnx           quantize_dynamic: DynamicQuantizeLinear + MatMulInteger (block), ConvInteger (convnet)
Dims: convnet batch 1..8, block batch 1..3 x seq 1..24 (tests/data/exports/quant/dims.json).
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "exports", "quant")
DIMS = {"convnet": {"batch": [1, 8]}, "block": {"batch": [1, 3], "seq": [1, 24]}}
OPSET = 17


def _w(rng, name, *shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else shape[0])
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def convnet() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [_w(rng, "c1_w", 8, 3, 3, 3), _w(rng, "c1_b", 8, scale=0.1), _w(rng, "c2_w", 8, 8, 3, 3),
             _w(rng, "c2_b", 8, scale=0.1), _w(rng, "c3_w", 8, 8, 1, 1), _w(rng, "c3_b", 8, scale=0.1),
             _w(rng, "dw_w", 8, 1, 3, 3), _w(rng, "dw_b", 8, scale=0.1),
             _w(rng, "fc_w", 10, 8), _w(rng, "fc_b", 10, scale=0.1)]
    mk = helper.make_node
    nodes = [
        mk("Conv", ["x", "c1_w", "c1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        mk("Relu", ["c1"], ["r1"], name="relu1"),
        mk("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        mk("Conv", ["p1", "dw_w", "dw_b"], ["dw"], name="depthwise", pads=[1, 1, 1, 1], group=8),
        mk("Relu", ["dw"], ["dwr"], name="relu_dw"),
        mk("Conv", ["dwr", "c2_w", "c2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        mk("LeakyRelu", ["c2"], ["l2"], name="leaky2", alpha=0.1),
        mk("Conv", ["l2", "c3_w", "c3_b"], ["c3"], name="conv3"),
        mk("Sigmoid", ["c3"], ["s3"], name="sigmoid3"),
        mk("Mul", ["l2", "s3"], ["g3"], name="gate3"),
        mk("Add", ["g3", "p1"], ["a3"], name="residual3"),
        mk("GlobalAveragePool", ["a3"], ["gap"], name="gap"),
        mk("Flatten", ["gap"], ["flat"], name="flatten"),
        mk("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def block() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    d, h = 32, 48
    inits = [_w(rng, "w1", d, h), _w(rng, "b1", h, scale=0.1), _w(rng, "w2", h, d), _w(rng, "b2", d, scale=0.1),
             _w(rng, "gamma", d, scale=0.5),
             numpy_helper.from_array(np.array(1 / np.sqrt(2), np.float32), "inv_sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    mk = helper.make_node
    nodes = [
        mk("MatMul", ["x", "w1"], ["m1"], name="fc1"), mk("Add", ["m1", "b1"], ["h1"], name="fc1_bias"),
        mk("Mul", ["h1", "inv_sqrt2"], ["e0"], name="gelu_scale"), mk("Erf", ["e0"], ["e1"], name="gelu_erf"),
        mk("Add", ["e1", "one"], ["e2"], name="gelu_add"), mk("Mul", ["h1", "e2"], ["e3"], name="gelu_mul"),
        mk("Mul", ["e3", "half"], ["g"], name="gelu_half"),
        mk("MatMul", ["g", "w2"], ["m2"], name="fc2"), mk("Add", ["m2", "b2"], ["h2"], name="fc2_bias"),
        mk("Add", ["h2", "x"], ["r"], name="residual"), mk("Mul", ["r", "gamma"], ["y"], name="layer_scale"),
    ]
    g = helper.make_graph(nodes, "block",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def _reader(model: onnx.ModelProto, name: str):
    from onnxruntime.quantization import CalibrationDataReader

    rng = np.random.default_rng(7)
    shape = [3, 3, 12, 12] if name == "convnet" else [2, 16, 32]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    return Reader()


def variants():
    from onnxruntime.quantization import QuantFormat, QuantType

    s8, u8 = QuantType.QInt8, QuantType.QUInt8
    return {  # suffix -> quantize_static arguments
        "qdq_s8": dict(quant_format=QuantFormat.QDQ, activation_type=s8, weight_type=s8, per_channel=False,
                       extra_options={"ActivationSymmetric": True}),
        "qdq_u8": dict(quant_format=QuantFormat.QDQ, activation_type=u8, weight_type=s8, per_channel=False),
        "qdq_pc_s8": dict(quant_format=QuantFormat.QDQ, activation_type=s8, weight_type=s8, per_channel=True),
        "qdq_pc_u8u8": dict(quant_format=QuantFormat.QDQ, activation_type=u8, weight_type=u8, per_channel=True,
                            extra_options={"WeightSymmetric": False}),
        "qop_u8": dict(quant_format=QuantFormat.QOperator, activation_type=u8, weight_type=s8, per_channel=False),
        "qop_s8": dict(quant_format=QuantFormat.QOperator, activation_type=s8, weight_type=s8, per_channel=True),
    }


def make(out_dir: str = OUT_DIR) -> list[str]:
    from onnxruntime.quantization import QuantType, quantize_dynamic, quantize_static

    os.makedirs(out_dir, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in (("convnet", convnet), ("block", block)):
            model = build()
            onnx.checker.check_model(model, full_check=True)
            src = os.path.join(tmp, f"{name}.onnx")
            onnx.save(model, src)
            for suffix, kw in variants().items():
                dst = os.path.join(out_dir, f"{name}_{suffix}.onnx")
                quantize_static(src, dst, _reader(model, name), **kw)
                written.append(dst)
            dst = os.path.join(out_dir, f"{name}_dyn.onnx")
            quantize_dynamic(src, dst, weight_type=QuantType.QUInt8 if name == "convnet" else QuantType.QInt8,
                             op_types_to_quantize=["Conv", "MatMul"])
            written.append(dst)
    with open(os.path.join(out_dir, "dims.json"), "w") as f:
        json.dump(DIMS, f, indent=1)
        f.write("\n")
    return written


if __name__ == "__main__":
    for p in make():
        m = onnx.load(p)
        ops = sorted({(n.domain + "::" if n.domain else "") + n.op_type for n in m.graph.node})
        print(f"{os.path.basename(p):26} {os.path.getsize(p):6} B  {' '.join(ops)}")
