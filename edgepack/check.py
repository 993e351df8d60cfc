"""Compare a built package with onnxruntime on random inputs (used by `edgepack build` and the tests)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from .codegen.bundle import Bundle
from .deploy.io import shape_of
from .deploy.local import run_local


def random_inputs(manifest: dict, dims: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in manifest["inputs"]:
        shape = shape_of(manifest, spec["shape"], dims)
        dt = np.dtype(spec["dtype"])
        if dt.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            arrays.append(rng.random(shape) > 0.5)
        else:
            arrays.append(rng.integers(0, 2, size=shape).astype(dt))  # ids/masks: small valid values
    return arrays


def max_rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape} != reference {ref.shape}")
    if got.size == 0:
        return 0.0
    scale = max(float(np.abs(ref).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max() / scale)


def check_against_onnxruntime(bundle: Bundle, model: Path, sizes: list[dict[str, int]],
                              inputs_fn=random_inputs) -> list[tuple[dict[str, int], float]]:
    import onnxruntime as ort

    # Graph optimizations off: ORT's fused rewrites (e.g. DequantizeLinear+MatMul -> MatMulNBits with int8
    # activations) change the numerics; op-by-op execution is the ONNX semantics we must match.
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    results = []
    for dims in sizes:
        arrays = inputs_fn(bundle.manifest, dims)
        refs = sess.run(None, dict(zip(names, arrays)))
        with tempfile.TemporaryDirectory() as tmp:
            outs = [np.load(p) for p in run_local(bundle, arrays, Path(tmp))]
        results.append((dims, max(max_rel_error(o, r) for o, r in zip(outs, refs))))
    return results
