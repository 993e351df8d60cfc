"""int8 models end to end on the host: a CNN quantised with onnxruntime's own tool (`quantize_static`, QDQ,
per-channel int8 weights, int8 activations), built with edgepack's integer kernels, against the float
package of the same model and against onnxruntime running the QDQ model (its integer kernels), same run.

    pip install -e '.[bench]'          # torch: benchmark-only
    python benchmarks/int8_zoo.py [--models dscnn,mobilenetv2] [--sizes 1,2,4] [--rounds 3]

Per model: arena, weights and code of both packages (int8 / float), the int8 package's largest error against
onnxruntime's exact reference in LSB of each output's scale, and `edgepack bench --baseline onnxruntime`
ratios (> 1: edgepack faster) of the int8 package vs onnxruntime int8 and of the float package vs onnxruntime
float, 1 and 2 threads. Writes benchmarks/results/int8_zoo.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from cnn_zoo import BATCH_MAX, RESULTS, bench, export, make_model, run_zoo, summarise


def quantise(src: Path, dst: Path, name: str) -> None:
    """onnxruntime's static quantiser, calibrated on random inputs (fine for speed and for matching)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shape = make_model(name)[1]

    class Random(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.it = iter([{"x": rng.standard_normal((1, *shape)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(src), str(dst), Random(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def lsb_error(bundle, model: Path, sizes: list[int]) -> float:
    """Largest |edgepack - onnxruntime| of the int8 package's output, in LSB of the output's scale."""
    import onnx
    from onnx import numpy_helper

    from edgepack.check import _reference_session
    from edgepack.deploy.io import random_inputs
    from edgepack.deploy.local import run_local

    m = onnx.load(str(model))
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    consts |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node if n.op_type == "Constant"}
    dq = next(n for n in m.graph.node if n.output[0] == m.graph.output[0].name)
    scale = float(consts[dq.input[1]]) if dq.op_type == "DequantizeLinear" else None
    sess = _reference_session(model)
    worst = 0.0
    for k, b in enumerate(sizes):
        x = random_inputs(bundle.manifest, {"batch": b}, seed=k)
        ref = sess.run(None, {"x": x[0]})[0]
        with tempfile.TemporaryDirectory() as tmp:
            got = np.load(run_local(bundle, x, Path(tmp))[0])
        diff = float(np.abs(got.astype(np.float64) - ref).max())
        worst = max(worst, diff / scale if scale else diff)
    return worst


def run_model(name: str, tmp: Path, a) -> dict:
    from edgepack.pipeline import build_package

    f32, i8 = tmp / f"{name}.onnx", tmp / f"{name}_int8.onnx"
    export(name, f32)
    quantise(f32, i8, name)
    out = {"model": name, "batch_range": [1, BATCH_MAX]}
    for kind, path in (("int8", i8), ("float", f32)):
        t0 = time.perf_counter()
        r = build_package(path, "host", {"batch": (1, BATCH_MAX)}, tmp / f"{name}_{kind}", name=f"{name}_{kind}")
        run = bench(r.bundle.path, path, a.sizes, tmp / f"{name}_{kind}_run.json", a.rounds, False)
        out[kind] = {"build_s": round(time.perf_counter() - t0, 1), "arena_bytes": r.arena_bytes,
                     "tensor_bytes": r.tensor_bytes, "weights_bytes": r.weights_bytes,
                     "code_bytes": r.code_bytes, "sizes": summarise(run)}
        if kind == "int8":  # the build's own memory report against the float twin (edgepack/model/float_twin.py)
            out[kind]["float_build_report"] = r.bundle.manifest["memory"].get("float_build")
            out[kind]["max_error_lsb"] = lsb_error(r.bundle, path, [1, 3, BATCH_MAX])
        out["machine"] = run["machine"]
    out["arena_float_over_int8"] = out["float"]["arena_bytes"] / out["int8"]["arena_bytes"]
    out["tensors_float_over_int8"] = out["float"]["tensor_bytes"] / out["int8"]["tensor_bytes"]
    out["weights_float_over_int8"] = out["float"]["weights_bytes"] / out["int8"]["weights_bytes"]
    out["int8_speed_over_float"] = [f["edgepack_ms"] / i["edgepack_ms"]
                                    for f, i in zip(out["float"]["sizes"], out["int8"]["sizes"])]
    print(f"{name}: arena {out['int8']['arena_bytes']:,} / {out['float']['arena_bytes']:,} B "
          f"(x{out['arena_float_over_int8']:.2f}), error {out['int8']['max_error_lsb']:.0f} LSB, vs ORT int8 "
          + ", ".join(f"b{s['batch']} x{s['ratio_vs_onnxruntime_1t']}/x{s['ratio_vs_onnxruntime_2t']}"
                      for s in out["int8"]["sizes"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="dscnn,mobilenetv2")
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    run_zoo(RESULTS / "int8_zoo.json", run_model, a,
            "onnxruntime median / edgepack median, same run (> 1: edgepack faster); the int8 package against "
            "onnxruntime on the QDQ model, the float package against onnxruntime on the float one")

if __name__ == "__main__":
    main()
