"""Operators edgepack claims to compile. Each is covered by ONNX's backend node tests, built for the host
board and run through the package's C program by scripts/conformance.py (results in
benchmarks/results/conformance.json and .md; one case per op runs in tests/test_conformance_sample.py).

An op is listed when edgepack passes every node test of it that uses only common dtypes (float32,
float64, int64, int32, int8, uint8, bool), as written or with its non-data inputs (shape, axes, pads, ...)
made constants as exporters write them. Ops whose failing cases are exotic are listed too; the comments
below name those cases, one line per op. An op whose failing cases would give wrong values is listed only
when edgepack refuses those cases at build (model/op_fixes.py).
"""

# Partially passing ops kept in the set (conformance run of scripts/conformance.py):
# BatchNormalization: training_mode running-mean/var outputs are refused at build; output 0 matches in all 4 cases.
# Cast: fails only for bfloat16/float8/float4/4-bit/2-bit/string types (refused at build); common dtypes pass.
# ConstantOfShape: fails only with a run-time shape input (data-dependent shape); exports' Shape(x) input is folded.
# CumSum, TopK: axis and k must be constants (initializers, as exporters write them); their node tests feed
#   them as inputs and all pass with constant args. Both are edgepack's own kernels (model/converters.py).
# ConvInteger, DynamicQuantizeLinear, MatMulInteger, QLinearConv, QLinearMatMul: every node test passes
#   (quantised models, issue 14, model/quant.py; benchmarks/results/conformance_quant.md).
# QuantizeLinear: fails only for float8/4-bit/2-bit/float4 outputs and blocked (block_size) quantization, refused
#   at build; int8/uint8/int16/uint16 pass (edgepack's converter: round half to even on every target).
# DequantizeLinear: fails for float8/4-bit/2-bit/float4 inputs and blocked (block_size) quantization, rejected at build.
# Dropout: inference only; training_mode=1 (random values) fails, the optional mask output is refused at build.
# Einsum: fails only for bfloat16.
# Equal: fails only for strings.
# Identity: fails only for sequence/optional values (Identity nodes are removed at build anyway).
# LayerNormalization: every test asks for Mean/InvStdDev, refused at build; output 0 alone matches in all 19.
# LSTM, GRU: all node tests pass (edgepack's kernels, model/recurrent.py); LSTM input_forget=1 and activations
#   other than Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Softsign are refused at build.
# MaxPool: the optional Indices output (2 with_argmax cases) is refused at build; output 0 alone matches.
# Pow: float^float only; integer and mixed float/int exponents are rejected at build by TVM (ModelError).
# Range: fails with run-time start/limit/delta (data-dependent shape); exports' Range is rewritten at build.
# ReduceL2, ReduceLogSumExp, ReduceMax, ReduceMin, ReduceProd, ReduceSum: fail on zero-size (empty_set) inputs;
#   ReduceMax/Min on bool.
# Resize: what TVM's importer would compute wrongly is rewritten or refused at build (model/op_fixes.py):
#   antialias, half_pixel_symmetric, and scales the output/input size ratio cannot express are refused.
# Trilu: fails only on zero-size inputs.
# Reshape: fails only for a zero-size input with allowzero=1.
# Split: fails only for zero-size splits.
SUPPORTED_OPS: frozenset[str] = frozenset(
    """
    Abs Add And ArgMax AveragePool BatchNormalization Cast Ceil Clip Concat Constant ConstantOfShape Conv
    ConvInteger ConvTranspose Cos CumSum DequantizeLinear Div Dropout DynamicQuantizeLinear Einsum Elu Equal Erf
    Exp Expand Flatten Floor Gather GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual
    GroupNormalization GRU HardSigmoid HardSwish Identity InstanceNormalization IsInf IsNaN LayerNormalization
    LeakyRelu Less LessOrEqual Log LogSoftmax LSTM MatMul MatMulInteger Max MaxPool Mean Min Mod Mul Neg Not Or
    Pad Pow PRelu QLinearConv QLinearMatMul QuantizeLinear Range Reciprocal ReduceL2 ReduceLogSumExp ReduceMax
    ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize ScatterND Shape Sigmoid Sign Sin Slice Softmax
    Softplus Split Sqrt Squeeze Sub Sum Tanh Tile TopK Transpose Trilu Unsqueeze Where Xor
    """.split()
)

# onnxruntime's contrib operators (domain com.microsoft) that its quantiser writes in QOperator models
# (model/quant.py); checked against onnxruntime in tests/test_quant_import.py (no ONNX node tests exist).
MS_DOMAIN = "com.microsoft"
SUPPORTED_MS_OPS: frozenset[str] = frozenset(
    "QGemm QLinearAdd QLinearGlobalAveragePool QLinearLeakyRelu QLinearMul QLinearSigmoid".split())


ONNX_DOMAINS = ("", "ai.onnx")


def is_supported(domain: str, op_type: str) -> bool:
    if domain in ONNX_DOMAINS:
        return op_type in SUPPORTED_OPS
    return domain == MS_DOMAIN and op_type in SUPPORTED_MS_OPS


def op_label(domain: str, op_type: str) -> str:
    """An operator as messages show it: `Conv`, or `com.microsoft::QGemm` outside the ONNX domain."""
    return op_type if domain in ONNX_DOMAINS else f"{domain}::{op_type}"
