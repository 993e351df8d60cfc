"""CNN zoo: MobileNetV2, ResNet-18 (torchvision definitions, random weights) and a DS-CNN keyword spotter
(MLPerf Tiny geometry), exported with a dynamic batch, built untuned with edgepack for the host, checked
against onnxruntime and timed beside it (1 and 2 threads) in the same run.

    pip install -e '.[bench]'          # torch + torchvision: benchmark-only
    python benchmarks/cnn_zoo.py [--models mobilenetv2,resnet18,dscnn] [--sizes 1,2,4] [--tag after]
        [--profile] [--rounds 3] [--tune TRIALS]

Writes benchmarks/results/cnn_zoo_<tag>.json: per model and size the edgepack / onnxruntime speed ratios
(> 1: edgepack faster), the arena, the max relative error, the machine (CPU model and flags), and with
--profile the per-kernel times at the model's worst size. Each model is timed by `edgepack bench
--baseline onnxruntime` (edgepack's bench program and onnxruntime interleaved, round by round). With
--tune, each model is first tuned on the host (`edgepack tune`, timed) and built with the database.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
BATCH_MAX = 8


def dscnn(n_classes: int = 12):
    """DS-CNN (Hello Edge / MLPerf Tiny KWS): 49x10 MFCC input, a 10x4 stride-2 conv to 64 channels, four
    depthwise-separable blocks of 64 channels, global average pool, linear."""
    import torch.nn as nn

    def bn_relu(c):
        return [nn.BatchNorm2d(c), nn.ReLU()]

    layers = [nn.Conv2d(1, 64, (10, 4), stride=2, padding=(5, 1)), *bn_relu(64)]
    for _ in range(4):
        layers += [nn.Conv2d(64, 64, 3, padding=1, groups=64), *bn_relu(64),
                   nn.Conv2d(64, 64, 1), *bn_relu(64)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, n_classes))


def make_model(name: str):
    """(module in eval mode, input shape without batch)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "mobilenetv2":
        m, shape = torchvision.models.mobilenet_v2(), (3, 224, 224)
    elif name == "resnet18":
        m, shape = torchvision.models.resnet18(), (3, 224, 224)
    elif name == "dscnn":
        m, shape = dscnn(), (1, 49, 10)
    else:
        raise SystemExit(f"unknown model {name}")
    m.train()  # random BatchNorm statistics give outputs ~1e-9: set them from a few batches of random data
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(4, *shape))
    return m.eval(), shape


def export(name: str, path: Path) -> None:
    import torch

    m, shape = make_model(name)
    torch.onnx.export(m, torch.randn(1, *shape), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17, dynamo=False)


def cpu_facts() -> dict:
    info = Path("/proc/cpuinfo").read_text().splitlines()
    get = lambda k: next((ln.split(":", 1)[1].strip() for ln in info if ln.split(":")[0].strip() == k), "")
    flags = set(get("flags").split())
    return {"model": get("model name"), "simd": [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "neon")
                                                 if f in flags]}


def bench(bundle: Path, model: Path, sizes: str, out: Path, rounds: int, profile: bool) -> dict:
    cmd = [sys.executable, "-m", "edgepack.cli", "bench", str(bundle), "--sizes", f"batch={sizes}",
           "--baseline", "onnxruntime", "--model", str(model), "--rounds", str(rounds), "-o", str(out)]
    subprocess.run(cmd + (["--profile"] if profile else []), check=True)
    return json.loads(out.read_text())


def summarise(run: dict) -> list[dict]:
    rows = []
    for s in run["sizes"]:
        row = {"batch": s["dims"]["batch"], "edgepack_ms": s["stats"]["median"] / 1e6}
        for k, b in s["baselines"].items():
            row[f"{k}_ms"] = b["stats"]["median"] / 1e6
            row[f"ratio_vs_{k}"] = round(b["speedup"], 3)
        if s.get("operators"):
            row["operators"] = [{k: op[k] for k in ("name", "ns", "calls", "share")} for op in s["operators"][:15]]
        rows.append(row)
    return rows


def run_model(name: str, tmp: Path, a) -> dict:
    from edgepack.check import check_against_onnxruntime
    from edgepack.pipeline import build_package

    onnx_path = tmp / f"{name}.onnx"
    export(name, onnx_path)
    db, tune_s = None, None
    if a.tune:  # the database is kept (RESULTS/tmp): a rerun resumes it, its measurements kept
        db = RESULTS / "tmp" / f"cnn_{name}_{a.tune}.db"
        db.parent.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "edgepack.cli", "tune", str(onnx_path), "--dim", f"batch=1:{BATCH_MAX}",
                        "--trials", str(a.tune), "--db", str(db), "--no-progress"], check=True)
        tune_s = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    r = build_package(onnx_path, "host", {"batch": (1, BATCH_MAX)}, tmp / name, name=name, db=db)
    build_s = time.perf_counter() - t0
    errs = check_against_onnxruntime(r.bundle, onnx_path, [{"batch": b} for b in (1, 3, BATCH_MAX)])
    run = bench(r.bundle.path, onnx_path, a.sizes, tmp / f"{name}_run.json", a.rounds, a.profile)
    rows = summarise(run)
    worst = min(rows, key=lambda row: row["ratio_vs_onnxruntime_1t"])
    for row in rows:  # the profile only at the worst size
        if row is not worst:
            row.pop("operators", None)
    print(f"{name}: build {build_s:.0f} s, arena {r.arena_bytes:,} B, max rel err "
          f"{max(e for _, e in errs):.1e}, " + ", ".join(
              f"b{row['batch']} x{row['ratio_vs_onnxruntime_1t']}/x{row['ratio_vs_onnxruntime_2t']}" for row in rows))
    return {"model": name, "batch_range": [1, BATCH_MAX], "build_s": round(build_s, 1), "tune_trials": a.tune,
            "tune_s": tune_s,
            "arena_bytes": r.arena_bytes, "weights_bytes": r.weights_bytes, "code_bytes": r.code_bytes,
            "max_rel_error": {str(d["batch"]): e for d, e in errs}, "sizes": rows, "worst_batch": worst["batch"],
            "machine": run["machine"], "settings": run["settings"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenetv2,resnet18,dscnn")
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="per-kernel times (kept at each model's worst size)")
    ap.add_argument("--tag", default="untuned", help="result file suffix, e.g. before / after")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                    help="tune each model first (`edgepack tune --trials TRIALS`) and build with its database")
    a = ap.parse_args()
    run_zoo(RESULTS / f"cnn_zoo_{a.tag}.json", run_model, a,
            "onnxruntime median / edgepack median, same run (> 1: edgepack faster)")


def run_zoo(out: Path, run_model, a, ratio: str) -> None:
    """run_model(name, tmp, a) for each of a.models, into `out` (other models' earlier entries kept), saved
    after each model."""
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc |= {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_facts(), "ratio": ratio}
    models = doc.setdefault("models", {})
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            models[name] = run_model(name, Path(tmp), a)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
