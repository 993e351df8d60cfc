"""Compare a built package with onnxruntime on random inputs (used by `edgepack build` and the tests), and the
package's own test cases: a few inputs with onnxruntime's outputs, kept in the package at build time (as
ExecuTorch's BundledProgram does), so that a board can prove it computes right (`flash`, `verify`)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .codegen.bundle import Bundle
from .deploy.io import random_inputs
from .deploy.local import run_local


def max_rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape} != reference {ref.shape}")
    if got.size == 0:
        return 0.0
    scale = max(float(np.abs(ref).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max() / scale)


def check_against_onnxruntime(bundle: Bundle, model: Path, sizes: list[dict[str, int]], inputs_fn=random_inputs,
                              launcher: Sequence[str] = ()) -> list[tuple[dict[str, int], float]]:
    """(dims, max relative error over the outputs) per size, on random inputs; `launcher` as in `run_local`."""
    sess = _reference_session(model)
    names = [i.name for i in sess.get_inputs()]
    results = []
    for dims in sizes:
        arrays = inputs_fn(bundle.manifest, dims)
        refs = sess.run(None, dict(zip(names, arrays)))
        with tempfile.TemporaryDirectory() as tmp:
            outs = [np.load(p) for p in run_local(bundle, arrays, Path(tmp), launcher=launcher)]
        results.append((dims, max(max_rel_error(o, r) for o, r in zip(outs, refs))))
    return results


TEST_DIR = "testdata"  # in the package: cases.json and the .npy files it names
TEST_TOL = 1e-4  # max relative error of a float output; ints and bools must be equal


# Integer GEMMs: on x86 without VNNI onnxruntime's u8 x s8 kernels sum pairs of products into saturating
# int16 (40 LSB off in a QLinearMatMul of tests/data/exports/quant/block_qop_u8.onnx).
_INTEGER_GEMMS = {"QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger"}


def _reference_session(model: Path):
    import onnx
    import onnxruntime as ort

    # Graph optimizations off: ORT's fused rewrites (e.g. DequantizeLinear+MatMul -> MatMulNBits with int8
    # activations) change the numerics; op-by-op execution is the ONNX semantics we must match.
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    from .model.qdq_fuse import fusions

    m = onnx.load(str(model), load_external_data=False)
    # A QDQ model whose layers edgepack runs as integer ops: onnxruntime's own QDQ transform makes the same
    # integer ops (its users' numerics); op by op it would run them in float, up to 1 LSB apart
    if {n.op_type for n in m.graph.node} & _INTEGER_GEMMS or fusions(m):
        # the exact u8 x u8 kernels, the arithmetic ONNX defines (and edgepack computes): the option's
        # weight rewrite is an extended-level graph transform. int8 x int8 models do not saturate, and the
        # rewrite leaves them without a kernel (s8 x u8): they run as they are.
        precise = ort.SessionOptions()
        precise.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        precise.add_session_config_entry("session.x64quantprecision", "1")
        try:
            return ort.InferenceSession(str(model), precise, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - NOT_IMPLEMENTED for the rewritten types: the default kernels
            pass
    return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])


def case_sizes(dims: list[dict]) -> list[dict[str, int]]:
    """The range's min, its max, and an odd size in between (by dim name)."""
    odd = {d["name"]: next((v for v in ((d["min"] + d["max"]) // 2 | 1, d["min"]) if d["min"] <= v <= d["max"]))
           for d in dims}
    sizes = [{d["name"]: d["min"] for d in dims}, {d["name"]: d["max"] for d in dims}, odd]
    return [s for i, s in enumerate(sizes) if s not in sizes[:i]]


def write_test_cases(pkg_dir: Path, manifest: dict, model: Path, max_bytes: int) -> list[dict]:
    """Inputs and onnxruntime's outputs at case_sizes, as long as a case's inputs and outputs take at
    most max_bytes (the smallest case is always kept). Returns the cases (also in testdata/cases.json)."""
    sess = _reference_session(model)
    names = [i.name for i in sess.get_inputs()]
    out_dir = pkg_dir / TEST_DIR
    out_dir.mkdir()
    cases = []
    for k, dims in enumerate(case_sizes(manifest["dims"])):
        ins = random_inputs(manifest, dims, seed=k)
        outs = sess.run(None, dict(zip(names, ins)))
        if cases and sum(a.nbytes for a in [*ins, *outs]) > max_bytes:
            continue
        case = {"dims": dims, "inputs": [f"{k}_in{i}.npy" for i in range(len(ins))],
                "outputs": [f"{k}_out{i}.npy" for i in range(len(outs))]}
        for f, a in zip(case["inputs"] + case["outputs"], [*ins, *outs]):
            np.save(out_dir / f, a)
        cases.append(case)
    (out_dir / "cases.json").write_text(json.dumps({"tolerance": TEST_TOL, "cases": cases}, indent=2) + "\n")
    return cases


@dataclass
class CaseResult:
    dims: dict[str, int]
    error: float  # max relative error over the outputs (inf: shapes, dtypes or ints differ)

    @property
    def ok(self) -> bool:
        return self.error <= TEST_TOL


def run_test_cases(bundle: Bundle, device, work: Path) -> list[CaseResult]:
    """Run the package's test cases on a device; one result per case."""
    spec = json.loads((bundle.path / TEST_DIR / "cases.json").read_text())
    results = []
    for k, case in enumerate(spec["cases"]):
        ins = [np.load(bundle.path / TEST_DIR / f) for f in case["inputs"]]
        want = [np.load(bundle.path / TEST_DIR / f) for f in case["outputs"]]
        got = [np.load(p) for p in device.run(bundle, ins, work / str(k))]
        results.append(CaseResult(case["dims"], max(_case_error(g, w) for g, w in zip(got, want))))
    return results


def _case_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if want.dtype.kind in "biu":
        return 0.0 if np.array_equal(got, want) else float("inf")
    return max_rel_error(got, want)
