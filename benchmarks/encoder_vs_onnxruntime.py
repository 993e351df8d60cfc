"""Latency of the built C package (untuned, and tuned with --db) vs onnxruntime (1 and 2 threads) on the
bundled encoder example.

Both run on this machine in the same process tree, interleaved round by round, so the ratios hold even on
a shared, noisy machine. edgepack is timed inside its `bench` program (C, monotonic clock); onnxruntime
through its Python API, whose fixed per-call cost is measured on a one-node Identity model of the same
input and reported, so both the raw ratio and the ratio without that cost are recorded.
Writes benchmarks/results/encoder_vs_onnxruntime.json.

    python benchmarks/encoder_vs_onnxruntime.py [--sizes 1,8,32,77,128,256] [--rounds 5] [--repeat 30] [--db tuning.db]

With --db (from `edgepack tune edgepack/examples/encoder.onnx --dim seq=1:256 --db tuning.db`) the tuned
package joins the contenders and the ratios are given for it too.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from edgepack.examples import EXAMPLES
from edgepack.report.baseline import identity_model, ort_samples_ns, session  # shared with `edgepack bench --baseline`
from edgepack.pipeline import build_package

RESULTS = Path(__file__).resolve().parent / "results"


def c_samples(bundle: Path, seq: int, repeat: int) -> list[float]:
    r = subprocess.run([str(bundle / "bench"), "--warmup", "3", "--repeat", str(repeat), str(seq)],
                       capture_output=True, text=True, check=True)
    return [s / 1e3 for s in json.loads(r.stdout)["samples_ns"]]


def ort_samples(sess, x: np.ndarray, repeat: int) -> list[float]:
    return [t / 1e3 for t in ort_samples_ns(sess, {"x": x}, repeat)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32,77,128,256")
    ap.add_argument("--db", help="tuning database: also build and time the tuned package")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    ex = EXAMPLES["encoder"]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        bundle = build_package(ex.path, "host", dict(ex.dims), Path(tmp) / "encoder").bundle
        build_s = time.perf_counter() - t0
        packages = {"edgepack": bundle.path}
        if a.db:
            packages["edgepack_tuned"] = build_package(ex.path, "host", dict(ex.dims), Path(tmp) / "tuned",
                                                       name="encoder", db=a.db).bundle.path
        sessions = {"onnxruntime_1t": session(ex.path, 1), "onnxruntime_2t": session(ex.path, 2)}
        identity = session(identity_model({"x": np.zeros((1, 1, 64), np.float32)}), 1)
        rows = []
        for seq in [int(s) for s in a.sizes.split(",")]:
            x = np.random.default_rng(seq).standard_normal((1, seq, 64)).astype(np.float32)
            samples: dict[str, list[float]] = {**{k: [] for k in packages}, **{k: [] for k in sessions},
                                               "ort_call_cost": []}
            for _ in range(a.rounds):  # interleaved: every contender sees the same machine state
                for k, path in packages.items():
                    samples[k] += c_samples(path, seq, a.repeat)
                for k, s in sessions.items():
                    samples[k] += ort_samples(s, x, a.repeat)
                samples["ort_call_cost"] += ort_samples(identity, x, a.repeat)
            med = {k: statistics.median(v) for k, v in samples.items()}
            cost = med["ort_call_cost"]
            row = {"seq": seq, "median_us": med}
            for p in packages:
                sfx = "" if p == "edgepack" else "_" + p.removeprefix("edgepack_")
                row["speedup_vs" + sfx] = {k: med[k] / med[p] for k in sessions}
                row["speedup_vs_without_call_cost" + sfx] = {k: max(med[k] - cost, 0.0) / med[p] for k in sessions}
            if "edgepack_tuned" in med:
                row["tuned_vs_untuned"] = med["edgepack"] / med["edgepack_tuned"]
            rows.append(row)
            print(f"seq {seq:4}: " + " | ".join(f"{k} {med[k]:8.1f} us" for k in list(packages) + list(sessions))
                  + (f" | tuned x{row['tuned_vs_untuned']:.2f} vs untuned" if "tuned_vs_untuned" in row else "")
                  + f" | ort call cost {cost:.1f} us")
    result = {"benchmark": "encoder_vs_onnxruntime", "machine": platform.processor() or platform.machine(),
              "cores": bundle.manifest["board"]["cores"], "tuned": bool(a.db), "build_seconds": build_s,
              "onnxruntime_version": ort.__version__, "rows": rows,
              "note": "speedup_vs[_tuned] = onnxruntime median / edgepack [tuned] median (> 1: edgepack faster)"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "encoder_vs_onnxruntime.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
