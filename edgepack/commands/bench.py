"""`edgepack bench BUNDLE --board B --sizes seq=1,8,32 -o run.json`: time a built package on a board, size by
size, through the board's Device (local, SSH, serial), optionally beside onnxruntime; writes a bench result
(edgepack/report/schema.py) for `edgepack report`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import argtypes
from ..errors import BenchError
from ._connection import add_connection_args, connection_from_args


def _baseline_model(bundle, model: str | None) -> Path:
    """The ONNX file the package was built from: --model, or a bundled example with the same sha256."""
    from ..codegen.bundle import sha256
    from ..examples import EXAMPLES

    want = bundle.manifest["model"].get("sha256")
    if model is None:
        found = next((e.path for e in EXAMPLES.values() if e.exists() and sha256(e.path) == want), None)
        if found is None:
            raise BenchError("--baseline onnxruntime needs the model the package was built from: add --model M.onnx")
        return found
    p = Path(model)
    if not p.is_file():
        raise BenchError(f"--model '{p}' does not exist; pass the .onnx file the package was built from")
    if want and sha256(p) != want:
        raise BenchError(f"--model '{p}' is not the model package '{bundle.name}' was built from (sha256 differs); "
                         f"pass {bundle.manifest['model']['source']}")
    return p


def _open_baseline(model: Path | None, board):
    if model is None:
        return None
    kind = board.transport_kind
    if kind != "local":
        raise BenchError(f"--baseline onnxruntime runs onnxruntime on this machine, so it needs a local board "
                         f"(--board host); board '{board.name}' is reached over {kind}")
    from ..report.baseline import OrtBaseline

    # 1 thread (the single-core comparison) and the board's cores (what edgepack uses by default), whatever
    # --threads says, so runs with different --threads have the same baselines
    return OrtBaseline(model, [1, board.target.cores])


def _print_summary(sizes, board) -> None:
    from ..report.compare import fmt_time

    for s in sizes:
        st, u = s.stats, s.unit
        line = (f"{s.label():24} median {fmt_time(st.median, u):>14}  p10-p90 {fmt_time(st.p10, u)} - "
                f"{fmt_time(st.p90, u)}  spread {st.spread:5.1%}  n={st.n}")
        for k, b in s.baselines.items():
            word = "faster" if b.speedup >= 1 else "slower"
            line += f" | {k} {fmt_time(b.stats.median)}: x{b.speedup:.2f} {word}"
        print(line)
    if any(s.unit == "ticks" for s in sizes):
        print(f"  ticks: {_ticks_meaning(board)}")


def _tick_facts(facts: dict, board) -> dict:
    clock = board.section("mcu").get("clock_hz")
    return facts | {"timer": _ticks_meaning(board), "clock_mhz": facts.get("clock_mhz") or (clock and clock / 1e6)}


def _ticks_meaning(board) -> str:
    """What a device's ticks count: core clock cycles on a real board; instructions on a QEMU stand-in."""
    clock = board.section("mcu").get("clock_hz")
    per = f"of the {clock / 1e6:g} MHz core clock" if clock else "of the device's timer"
    sc = board.section("standin")
    if sc.get("module") == "qemu_mps2":
        shift = int(sc.get("icount_shift", 4))
        return (f"SysTick ticks {per} under QEMU -icount shift={shift}: an instruction count (one instruction "
                f"= {2 ** shift} ns of emulated time), repeatable, not the speed of real hardware")
    return f"timer ticks {per} (core cycles)"


def _cmd(a: argparse.Namespace) -> int:
    from ..board import load_board
    from ..codegen.bundle import Bundle
    from ..deploy.device import check_board, open_device
    from ..report import grid, runner
    from ..paths import output_file
    from ..deploy.machine import device_facts
    from ..report.schema import Run, save_run

    output_file(a.output, "-o", "run.json")  # before measuring, not after
    bundle = Bundle.open(a.bundle)
    built_for = bundle.manifest["board"]["name"]
    if a.board:
        check_board(bundle, a.board)
    # the user's mistakes first: loading a board can take seconds (TVM resolves "native" cpus)
    sizes = grid.grid(bundle.manifest, grid.parse_sizes(a.sizes))
    model = _baseline_model(bundle, a.model) if a.baseline else None
    board = load_board(built_for)
    settings = runner.settings_from_board(board, a.warmup, a.repeat, a.min_time, a.threads, a.profile)
    rounds = a.rounds or (3 if a.baseline else 1)
    baseline = _open_baseline(model, board)
    conn = connection_from_args(a, board)
    device = open_device(board, conn)
    try:
        device.install(bundle)
        results = runner.measure(device, bundle, sizes, settings, rounds, baseline, board.timing.cooldown_ms)
        facts = device_facts(device, board)
    finally:
        device.close()
    if any(r.unit == "ticks" for r in results):  # say in the JSON what the numbers count
        facts = _tick_facts(facts, board)
    run = Run(created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), command=["edgepack", *sys.argv[1:]],
              package=runner.package_facts(bundle), machine=facts,
              settings=runner.settings_dict(settings, rounds, board.timing.cooldown_ms),
              memory=dict(bundle.manifest["memory"]), baseline=baseline.info() if baseline else None, sizes=results)
    _print_summary(results, board)
    print(f"wrote {save_run(run, a.output)}  (view: edgepack report {a.output} -o report.html)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("bench", help="time a built package on a board, size by size -> JSON for `edgepack report`")
    p.add_argument("bundle", help="the package directory (from `edgepack build`)")
    p.add_argument("--sizes", action="append", metavar="NAME=V1,V2,...",
                   help="values of one dim (repeat per dim; grid = product; unnamed dims take their minimum; "
                        "default: a few sizes across each range)")
    p.add_argument("--warmup", type=argtypes.non_negative,
                   help="untimed runs per size (default: the board's [timing] warmup)")
    p.add_argument("--repeat", type=argtypes.count, help="timed runs per size (default: the board's [timing] repeat)")
    p.add_argument("--min-time", type=argtypes.non_negative, metavar="MS",
                   help="keep timing until this many ms per size (default: the board's [timing] min_repeat_ms)")
    p.add_argument("--threads", type=argtypes.threads, help="worker threads (default: the board's cores)")
    p.add_argument("--profile", action="store_true",
                   help="also time every kernel call (a run of its own: `ep bench --profile`)")
    p.add_argument("--rounds", type=argtypes.count,
                   help="alternating rounds per size (default: 3 with --baseline, else 1)")
    p.add_argument("--baseline", choices=["onnxruntime"], help="also time onnxruntime (CPU, 1 thread and the "
                   "board's cores) on the same model and sizes, interleaved (local boards)")
    p.add_argument("--model", help="the .onnx the package was built from (for --baseline; bundled examples are found)")
    p.add_argument("-o", "--output", default="run.json", help="bench result file (default: run.json)")
    add_connection_args(p, serial=True)
    p.set_defaults(fn=_cmd)
