"""Weight-only int8 on a real export: the MiniLM-6 of transformer_zoo.py with every MatMul/Gemm weight and the
embedding tables quantised to int8 per channel (DequantizeLinear in the graph, as scripts/make_hf_exports.py
makes the test exports), built by edgepack with the decode inside the dense kernels (now) and as separate
decode kernels (before: model/weight_decode.py off), and the float build for reference. Records arena,
weights and kernels of each build; times each package against onnxruntime running its own model
(1 and 2 threads, same run), edgepack with the board's cores and with 1 thread.

    python benchmarks/weight_int8.py [--rounds 3]

Writes benchmarks/results/weight_int8.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import onnx
import tvm

from transformer_zoo import MAX_BATCH, MAX_SEQ, RESULTS, bench, cpu_facts, export_minilm, summarize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from make_torch_exports import quantize_weights_int8  # noqa: E402

SIZES = ["batch=1", "seq=1,8,32,128"]


def build(model: Path, out: Path, decode_in_kernel: bool):
    import edgepack.model.lower as lower
    from edgepack.pipeline import build_package

    kept = lower.fuse_weight_decode
    if not decode_in_kernel:  # the build before weight_decode.py: a decode kernel per weight
        lower.fuse_weight_decode = tvm.transform.module_pass(lambda m, _c: m, opt_level=0, name="Off")
    try:
        return build_package(model, "host", {"batch": (1, MAX_BATCH), "seq": (1, MAX_SEQ)}, out, name="minilm")
    finally:
        lower.fuse_weight_decode = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp_models = RESULTS / "tmp"
    tmp_models.mkdir(parents=True, exist_ok=True)
    f32 = tmp_models / "minilm6.onnx"
    if not f32.exists():
        export_minilm(f32, 6)
    w8 = tmp_models / "minilm6_int8.onnx"
    onnx.save(quantize_weights_int8(onnx.load(f32)), w8)
    from edgepack.check import check_against_onnxruntime

    builds = {"float": (f32, True), "int8_in_kernel": (w8, True), "int8_decode_kernels": (w8, False)}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, in_kernel) in builds.items():
            b = build(model, Path(tmp) / name, in_kernel)
            checks = check_against_onnxruntime(b.bundle, model, [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 31}])
            run = summarize(bench(b.bundle.path, model, SIZES, Path(tmp) / f"{name}.json", a.rounds, False))
            one = summarize(bench(b.bundle.path, model, SIZES, Path(tmp) / f"{name}_1t.json", a.rounds, False, 1))
            out[name] = {"arena_bytes": b.arena_bytes, "weights_bytes": b.weights_bytes,
                         "kernels": len(b.bundle.manifest["kernels"]), "max_rel_error": max(e for _, e in checks),
                         "rows": run, "rows_edgepack_1_thread": one}
            print(name, {k: v for k, v in out[name].items() if not k.startswith("rows")}, flush=True)
    result = {"benchmark": "weight_int8", "cpu": cpu_facts(), "builds": out,
              "note": "speedup_vs_X = X median / edgepack median, same run; onnxruntime runs the package's own "
                      "model (the int8 one for the int8 builds)"}
    (RESULTS / "weight_int8.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, r in out.items():
        for row, one in zip(r["rows"], r["rows_edgepack_1_thread"]):
            print(f"{name:20} {row['dims']}: {row['edgepack_us']:9.1f} us, vs ort 1t x{row['speedup_vs_onnxruntime_1t']:.2f}"
                  f" 2t x{row['speedup_vs_onnxruntime_2t']:.2f}; 1 thread {one['edgepack_us']:9.1f} us "
                  f"x{one['speedup_vs_onnxruntime_1t']:.2f}")


if __name__ == "__main__":
    main()
