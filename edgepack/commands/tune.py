"""`edgepack tune MODEL --board B --dim seq=1:256 --trials 400 [--db tuning.db]
[--samples 8|even:8|geo:8|all|hist.json]`"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from .. import argtypes

if TYPE_CHECKING:
    from ..tune.measure import Measurer


def _endpoint(text: str | None, flag: str) -> tuple[str, int] | None:
    from ..errors import EdgepackError

    if text is None:
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise EdgepackError(f"{flag} {text}: expected HOST:PORT, e.g. {flag} 127.0.0.1:9190")
    return host, int(port)


def _mcu_measurer(a, board, stack) -> Measurer:
    """Serial boards: candidates batched into firmware images, flashed to the board (--serial) or its
    stand-in, and timed through the serial protocol. A stand-in started here is stopped at the end."""
    from .. import standin
    from ..deploy.device import connection_for
    from ..errors import EdgepackError
    from ..tune.mcu_trials import McuMeasurer

    if a.tracker or a.server:
        raise EdgepackError(f"board '{board.name}' is measured over its serial port, not RPC: drop "
                            "--tracker/--server (give --serial PORT for a real board)")
    if not a.serial and not board.section("standin"):  # before any heavy work
        raise EdgepackError(f"board '{board.name}' is measured on the device: give its serial port with "
                            "--serial PORT, e.g. --serial /dev/ttyACM0")
    conn = connection_for(board, serial=a.serial)
    was_up = board.section("standin") and standin.saved_connection(board) is not None
    m = stack.enter_context(McuMeasurer(board, conn))
    if board.section("standin") and not a.serial:
        if not was_up:
            stack.callback(standin.down, board)
        else:  # its flash now holds the last trial image, as a real board's would
            stack.callback(print, f"the {board.name} stand-in now runs a trial image; `edgepack flash BUNDLE` "
                           "puts a package back")
        print(f"measuring on the {board.name} stand-in (QEMU; ticks under -icount count instructions), "
              f"one firmware image per batch")
    else:
        print(f"measuring on {board.name} at {a.serial}, one firmware image per batch")
    return m


def _measurer(a, board, stack) -> Measurer:
    """The board's RPC endpoint from the flags; the host board gets its own tracker and server on loopback;
    microcontrollers (transport "serial") are measured through their serial protocol instead."""
    from ..errors import EdgepackError
    from ..tune.farm import LocalRPC
    from ..tune.rpc_measurer import RPCMeasurer

    if board.transport_kind == "serial":
        return _mcu_measurer(a, board, stack)
    if a.serial:
        raise EdgepackError(f"--serial is for microcontroller boards; board '{board.name}' is measured over RPC "
                            "(--tracker or --server)")
    tracker, server = _endpoint(a.tracker, "--tracker"), _endpoint(a.server, "--server")
    if tracker and server:
        raise EdgepackError("give --tracker or --server, not both")
    if tracker:
        return stack.enter_context(RPCMeasurer(board, tracker=tracker, key=a.key))
    if server:
        return stack.enter_context(RPCMeasurer(board, server=server, key=a.key or ""))
    if board.transport_kind != "local":
        raise EdgepackError(f"board '{board.name}' runs kernels elsewhere: give its RPC tracker with "
                            "--tracker HOST:PORT (or a server with --server HOST:PORT)")
    farm = stack.enter_context(LocalRPC(key=board.rpc_key, servers=1))
    print(f"measuring on this machine through a local RPC tracker {farm.tracker_host}:{farm.tracker_port}")
    return stack.enter_context(RPCMeasurer.local(board, farm))


def _cmd(a: argparse.Namespace) -> int:
    from contextlib import ExitStack
    from pathlib import Path

    from ..board import load_board
    from ..errors import EdgepackError
    from ..model.onnx_load import parse_dim_args
    from ..model.frontend import prepare
    from ..tune.tuner import TuneOptions, tune_model

    if a.trials < 1:
        raise EdgepackError(f"--trials {a.trials}: the budget must be at least 1 trial")
    board = load_board(a.board)
    ranges = parse_dim_args(a.dim)
    prepare(Path(a.model), ranges)  # bad input is reported before RPC servers start
    opts = TuneOptions(trials=a.trials, samples=a.samples, max_kernels=a.max_kernels, batch=a.batch,
                       progress=not a.no_progress, cost_model=a.cost_model)
    with ExitStack() as stack:
        measurer = _measurer(a, board, stack)
        rep = tune_model(a.model, board, ranges, a.db, measurer, opts)
    print(f"tuned {rep.model} on board '{rep.board}' in {rep.seconds:.0f} s: {rep.measured} measurements "
          f"({rep.failed} failed), {rep.reused} reused from {rep.db}")
    if hasattr(measurer, "images_flashed"):
        print(f"  {measurer.images_flashed} firmware image(s) flashed; times are device ticks / clock")
    for line in summary_lines(rep):
        print(line)
    if rep.skipped:
        print(f"  not tunable on this board (row tiles would break alignment or registers): {', '.join(rep.skipped)}")
    print(f"build with it: edgepack build {a.model} --board {board.name} "
          + " ".join(f"--dim {d}" for d in (a.dim or [])) + f" --db {a.db}")
    return 0


def summary_lines(rep) -> list[str]:
    """The tuning summary's lines on the cost model and the tasks (a TuneReport)."""
    from ..tune.trial import kernel_name

    out = [f"  cost model ({rep.cost_model}): {_holdout_line(rep.holdout)}"]
    for t in rep.tasks:
        tiles = ", ".join(kernel_name(m) for m in t.mains) + (f"; edge {kernel_name(t.edge)}" if t.edge else "")
        geo = math.exp(sum(math.log(p / m) for p, m in zip(t.predicted_s, t.measured_s)) / len(t.measured_s))
        out.append(f"  {t.task}: {len(t.mains)} micro-kernel(s) [{tiles}], {t.trials} trials, "
                   f"predicted/measured {geo:.2f} (geomean over {len(t.samples.values)} samples)")
    if rep.model_off:
        out.append(f"  cost model off by more than 2x for {len(rep.model_off)} task(s), and what the search did:")
    for t in rep.model_off:
        said = []
        if t.off_in_search:
            said.append(f"x{t.search_off_by:.1f} on a batch of trials: its samples re-weighted x{t.reweighted:.0f} "
                        f"in the shared model, {t.measured_trials} trial(s) chosen from the measurements")
        if t.model_off:
            said.append(f"x{t.model_off_by:.1f} at verification: {t.measured_picks} kernel(s) chosen from the "
                        "measurements alone verified too")
        else:
            said.append(f"x{t.model_off_by:.2f} at verification")
        out.append(f"    {t.task}: " + "; ".join(said))
    return out


def _holdout_line(h) -> str:
    if h.n == 0 or math.isnan(h.error):
        return "n/a on held-back measurements (too few measurements)"
    rank = "n/a" if math.isnan(h.tau) else f"{h.tau:.2f}"
    recall = "n/a (no task has 20 held back)" if math.isnan(h.recall) else f"{100 * h.recall:.0f}%"
    return (f"median error {100 * h.error:.0f}%, Kendall's tau {rank}, measured top 5 in predicted top 20 "
            f"{recall}, on {h.n} held-back measurements")


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune shape-generic kernels for a model on a board (measured on the board)")
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--board", default="host", help="board name (default: host)")
    p.add_argument("--dim", action="append", metavar="NAME=MIN:MAX", help="range of a dynamic dim (repeatable)")
    p.add_argument("--trials", type=argtypes.count, default=400,
                   help="measured trials for the whole model (default: 400)")
    p.add_argument("--db", default="tuning.db", help="tuning database, created or resumed (default: tuning.db)")
    p.add_argument("--samples", default="8",
                   help="shapes to tune for: a count (spread evenly, or geometrically over a wide range), "
                        "even:N, geo:N, 'all', or a histogram .json")
    p.add_argument("--max-kernels", type=argtypes.count,
                   help="micro-kernels per layer (default: the board's tune.max_kernels)")
    p.add_argument("--batch", type=argtypes.count,
                   help="candidates measured per round (default: the board's tune.batch)")
    p.add_argument("--cost-model", choices=["reg", "rank"], default="reg",
                   help="cost model objective: regression on throughput, or pairwise rank calibrated to it "
                   "(default: reg; the two tie on the model zoo, and reg predicts latencies closer)")
    p.add_argument("--tracker", metavar="HOST:PORT", help="RPC tracker the board's servers register with")
    p.add_argument("--server", metavar="HOST:PORT", help="a single RPC server (no tracker)")
    p.add_argument("--key", help="RPC key (default: the board's rpc key)")
    p.add_argument("--serial", help="serial port of a microcontroller board, e.g. /dev/ttyACM0 (default: its "
                   "stand-in)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(fn=_cmd)
