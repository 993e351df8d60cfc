"""The DS-CNN keyword spotter (MLPerf Tiny geometry: 49x10 input, 64-channel depthwise-separable blocks) on the
mps2-an386 stand-in (Cortex-M4F under qemu-system-arm), int8 against float, and int8 with the core's DSP
extension (SMLAD kernels) against int8 without it, same run.

    pip install -e '.[bench]'          # torch: benchmark-only
    python benchmarks/int8_mcu.py [--repeat 3]

The float model is quantised with onnxruntime's `quantize_static` (QDQ, per-channel int8 weights, int8
activations: benchmarks/int8_zoo.py), both are built for mps2-an386 (batch 1), flashed through the CLI
(`edgepack flash`: the stand-in starts, the firmware goes over its serial port), checked with `edgepack run`
against onnxruntime and timed with `edgepack bench`. Per package: flash and RAM from the firmware's linker map
(memory.json), SysTick ticks per inference and what they mean on the stand-in: QEMU -icount shift=4 runs one
instruction per 16 ns of emulated time, the 25 MHz SysTick ticks every 40 ns, so instructions = 2.5 x ticks.
Writes benchmarks/results/int8_mcu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from cnn_zoo import RESULTS, export
from int8_zoo import quantise

BOARD = "mps2-an386"
INSTRUCTIONS_PER_TICK = 40 / 16  # 25 MHz SysTick (40 ns) over -icount shift=4 (16 ns per instruction)


def cli(*args: str, env: dict) -> str:
    r = subprocess.run([sys.executable, "-m", "edgepack.cli", *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"edgepack {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def error_vs_onnxruntime(bundle: Path, model: Path, tmp: Path, env: dict) -> float:
    """`edgepack run` on the stand-in against onnxruntime's exact reference: for an int8 model in LSB of the
    output's scale (its DequantizeLinear), for a float model as max relative error."""
    import onnx
    from onnx import numpy_helper

    from edgepack.check import _reference_session

    x = np.random.default_rng(0).standard_normal((1, 1, 49, 10)).astype(np.float32)
    np.save(tmp / "x.npy", x)
    got = np.load(cli("run", str(bundle), "--input", str(tmp / "x.npy"), "-o", str(tmp / "out"), env=env).split()[0])
    ref = _reference_session(model).run(None, {"x": x})[0]
    m = onnx.load(str(model))
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    dq = next(n for n in m.graph.node if n.output[0] == m.graph.output[0].name)
    if dq.op_type == "DequantizeLinear":
        return float(np.abs(got - ref).max() / consts[dq.input[1]])
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def run_kind(kind: str, model: Path, tmp: Path, a, env: dict) -> dict:
    """`kind`: "int8", "float", or "int8_no_dsp": the int8 model on the same core with its DSP feature taken
    out of the board (the multiply-add kernels of a Cortex-M3: what SMLAD gains, same run)."""
    from dataclasses import replace

    from edgepack.board import load_board
    from edgepack.pipeline import build_package

    board = load_board(BOARD)
    if kind == "int8_no_dsp":
        board = replace(board, target=replace(board.target, features=()))
    r = build_package(model, board, {"batch": (1, 1)}, tmp / f"dscnn_{kind}", name=f"dscnn_{kind}")
    mem = json.loads((r.bundle.path / "memory.json").read_text())
    cli("flash", str(r.bundle.path), "--board", BOARD, env=env)
    err = error_vs_onnxruntime(r.bundle.path, model, tmp, env)
    out = tmp / f"{kind}_run.json"
    cli("bench", str(r.bundle.path), "--sizes", "batch=1", "--repeat", str(a.repeat), "-o", str(out), env=env)
    run = json.loads(out.read_text())
    ticks = run["sizes"][0]["stats"]["median"]
    row = {"flash_used": mem["flash_used"], "ram_used": mem["ram_used"], "memory": mem,
           "tensor_bytes": r.tensor_bytes, "weights_bytes": r.weights_bytes, "code_bytes": r.code_bytes,
           "ticks_per_inference": ticks, "instructions_per_inference": ticks * INSTRUCTIONS_PER_TICK,
           "timer": run["machine"]["timer"], ("max_error_lsb" if kind != "float" else "max_rel_error"): err}
    if kind != "float":
        row["float_build_report"] = r.bundle.manifest["memory"].get("float_build")
    print(f"{kind}: flash {row['flash_used']:,} B, RAM {row['ram_used']:,} B, {ticks:,.0f} ticks "
          f"(~{row['instructions_per_inference'] / 1e6:.1f} M instructions), error {err:.3g}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = os.environ | {"EDGEPACK_STATE_DIR": str(tmp / "standins")}  # a stand-in of this run's own
        f32, i8 = tmp / "dscnn.onnx", tmp / "dscnn_int8.onnx"
        export("dscnn", f32)
        quantise(f32, i8, "dscnn")
        doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "board": BOARD, "model": "dscnn"}
        try:
            for kind, path in (("int8", i8), ("int8_no_dsp", i8), ("float", f32)):
                doc[kind] = run_kind(kind, path, tmp, a, env)
        finally:
            subprocess.run([sys.executable, "-m", "edgepack.cli", "standin", "down", BOARD], env=env,
                           capture_output=True)
    i, f = doc["int8"], doc["float"]
    doc["float_over_int8"] = {k: f[k] / i[k] for k in ("flash_used", "ram_used", "ticks_per_inference")}
    doc["no_dsp_over_dsp_ticks"] = doc["int8_no_dsp"]["ticks_per_inference"] / i["ticks_per_inference"]
    doc["anchor"] = ("TFLite Micro + CMSIS-NN, MLPerf Tiny KWS (DS-CNN) on a 120 MHz Cortex-M4: about 100 ms, "
                     "about 12 M cycles")
    out = RESULTS / "int8_mcu.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}: float / int8 " + ", ".join(f"{k} x{v:.2f}" for k, v in doc["float_over_int8"].items())
          + f"; int8 ticks without / with SMLAD x{doc['no_dsp_over_dsp_ticks']:.2f}")


if __name__ == "__main__":
    main()
