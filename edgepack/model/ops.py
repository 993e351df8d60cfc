"""Operators edgepack claims to compile. Each is covered by ONNX's backend node tests in
scripts/conformance.py (results in benchmarks/results/conformance.json and the README)."""

SUPPORTED_OPS: frozenset[str] = frozenset(
    """
    Abs Add And ArgMax AveragePool BatchNormalization Cast Ceil Clip Concat Constant ConstantOfShape Conv Cos
    DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand Flatten Floor Gather Gelu Gemm GlobalAveragePool
    GlobalMaxPool Greater HardSigmoid HardSwish Identity InstanceNormalization LayerNormalization LeakyRelu Less
    Log LogSoftmax MatMul Max MaxPool Mean Min Mul Neg Not Or Pad Pow PRelu Range Reciprocal ReduceL2 ReduceMax
    ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize Shape Sigmoid Sign Sin Slice Softmax Softplus
    Split Sqrt Squeeze Sub Sum Tanh Tile Transpose Unsqueeze Where Xor
    """.split()
)
