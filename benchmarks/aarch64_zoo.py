"""Every zoo model on an Arm board: the transformers of transformer_zoo.py (MiniLM-L6, DistilBERT, BERT-base;
TorchScript and dynamo exports) and the CNNs of cnn_zoo.py (MobileNetV2, ResNet-18, DS-CNN), built untuned
for the qemu-aarch64 stand-in (the Pi 4's Cortex-A72: NEON, 4 lanes, 32 vector registers, 4 cores),
cross-compiled, and run under qemu-aarch64 at the range's min, max and odd or prime sizes, each output
compared with onnxruntime on the host. A correctness run, not a timing one: qemu-user's speed says nothing
about a Pi's.

    pip install -e '.[bench]'
    python benchmarks/aarch64_zoo.py [--models minilm-torchscript,...] [--board qemu-aarch64]

Writes benchmarks/results/aarch64_zoo.json (a model's earlier entry is replaced, the others kept): per model
the build time, arena, code and weights sizes, and the max relative error at each size.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from cnn_zoo import BATCH_MAX, export, run_zoo
from transformer_zoo import MAX_BATCH, MAX_SEQ, RESULTS, export_model

TOL = 1e-4  # max relative error, as the package's own test cases (edgepack/check.py TEST_TOL)
TRANSFORMERS = {f"{arch}-{exp}": (arch, exp) for arch in ("minilm", "distilbert", "bert-base")
                for exp in ("torchscript", "dynamo")}
CNNS = ("mobilenetv2", "resnet18", "dscnn")
# min, max, odd and prime sizes; 4 x 256 is the transformers' largest input
TRANSFORMER_SIZES = [{"batch": 1, "seq": 1}, {"batch": 1, "seq": 17}, {"batch": 3, "seq": 77},
                     {"batch": MAX_BATCH, "seq": MAX_SEQ}]
CNN_SIZES = [{"batch": b} for b in (1, 3, 7, BATCH_MAX)]


def run_model(name: str, tmp: Path, a) -> dict:
    from edgepack.check import check_against_onnxruntime
    from edgepack.pipeline import build_package

    onnx_path = tmp / f"{name}.onnx"
    if name in TRANSFORMERS:
        arch, exporter = TRANSFORMERS[name]
        export_model(onnx_path, arch, 12 if arch == "bert-base" else 6, exporter)
        ranges, sizes = {"batch": (1, MAX_BATCH), "seq": (1, MAX_SEQ)}, TRANSFORMER_SIZES
    else:
        export(name, onnx_path)
        ranges, sizes = {"batch": (1, BATCH_MAX)}, CNN_SIZES
    r = build_package(onnx_path, a.board, ranges, tmp / name, name=name.replace("-", "_"))
    t0 = time.perf_counter()
    errs = check_against_onnxruntime(r.bundle, onnx_path, sizes, launcher=["qemu-aarch64"])
    worst = max(e for _, e in errs)
    print(f"{name}: build {r.seconds:.0f} s, arena {r.arena_bytes:,} B, runs {time.perf_counter() - t0:.0f} s, "
          f"max rel err {worst:.1e} ({'ok' if worst < TOL else 'FAILED'})")
    return {"model": name, "board": a.board, "ranges": ranges, "build_s": round(r.seconds, 1),
            "arena_bytes": r.arena_bytes, "weights_bytes": r.weights_bytes, "code_bytes": r.code_bytes,
            "max_rel_error": [{"dims": d, "error": e} for d, e in errs], "ok": worst < TOL}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join([*TRANSFORMERS, *CNNS]))
    ap.add_argument("--board", default="qemu-aarch64", help="an aarch64 Linux board file (its kernels run here "
                                                            "under qemu-aarch64)")
    a = ap.parse_args()
    unknown = set(a.models.split(",")) - set(TRANSFORMERS) - set(CNNS)
    if unknown:
        raise SystemExit(f"unknown models {sorted(unknown)}; choose from {[*TRANSFORMERS, *CNNS]}")
    run_zoo(RESULTS / "aarch64_zoo.json", run_model, a,
            f"max relative error against onnxruntime on the host; the package run under qemu-aarch64 (< {TOL}: ok)")


if __name__ == "__main__":
    main()
