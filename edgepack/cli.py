"""The `edgepack` command: a thin layer over the pipeline. EdgepackError -> one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from . import argtypes
from .errors import EdgepackError

log = logging.getLogger("edgepack")


def _cmd_build(a: argparse.Namespace) -> int:
    from .codegen.bundle import package_output
    from .examples import DEFAULT_EXAMPLE, EXAMPLES

    example = EXAMPLES[DEFAULT_EXAMPLE] if a.model is None else None
    model = example.path if example else Path(a.model)
    package_output(model, a.output, a.name)  # at once, before the seconds it takes to load onnx and TVM
    from .model.onnx_load import parse_dim_args
    from .pipeline import build_package

    ranges = dict(example.dims) if example else {}
    if example:
        print(f"no model given: building the bundled example '{example.name}' ({model.name}) for board '{a.board}'")
    ranges.update(parse_dim_args(a.dim))
    r = build_package(model, a.board, ranges, a.output, name=a.name, db=a.db)
    m = r.bundle.manifest
    print(f"built {r.bundle.path}  ({r.seconds:.1f} s)")
    print(f"  board {m['board']['name']}, dims " + ", ".join(f"{d['name']}={d['min']}..{d['max']}" for d in m["dims"]))
    if m.get("tuning"):
        t = m["tuning"]
        print(f"  tuned kernels: {', '.join(f'{k} ({n} micro-kernels)' for k, n in t['kernels'].items()) or 'none'}"
              + (f"; untuned: {', '.join(t['untuned'])}" if t["untuned"] else ""))
    print(f"  arena {r.arena_bytes:,} B (tensors {r.tensor_bytes:,} B, vs {r.sum_of_tensor_bytes:,} B unshared), "
          f"weights {r.weights_bytes:,} B, code {r.code_bytes:,} B")
    if m["memory"].get("float_build"):  # a QDQ model: what its float model would take
        from .report.markdown import float_saving

        print("  " + float_saving(m["memory"]))
    if m["memory"].get("mcu"):  # a microcontroller: what the firmware image takes of the board's flash and RAM
        print(f"  memory on {m['board']['name']} (from the linker map; also in memory.txt, memory.json):")
        print("\n".join("    " + ln for ln in (r.bundle.path / "memory.txt").read_text().splitlines()[1:]))
    from .board import load_board

    if example is not None and load_board(m["board"]["name"]).transport_kind != "local":
        print(f"  not checked here (board {m['board']['name']} is remote): `edgepack run {r.bundle.path} ...` runs it there")
    elif example is not None:
        from .check import check_against_onnxruntime

        sizes = [{d: lo for d, (lo, hi) in ranges.items()}, {d: (lo + hi) // 2 | 1 for d, (lo, hi) in ranges.items()}]
        for size, err in check_against_onnxruntime(r.bundle, model, sizes):
            print(f"  checked against onnxruntime at {size}: max relative error {err:.2e}")
    ins = " ".join(f"--input {i['name']}.npy" for i in m["inputs"])
    if m.get("firmware"):
        print(f"flash it: edgepack flash {r.bundle.path} --board {m['board']['name']}")
    print(f"run it: edgepack run {r.bundle.path} {ins} -o out/")
    return 0


def _cmd_run(a: argparse.Namespace) -> int:
    from .codegen.bundle import Bundle
    from .commands._connection import board_for, connection_from_args
    from .deploy.device import open_device
    from .deploy.io import load_inputs
    from .deploy.local import run_local
    from .paths import output_dir

    bundle = Bundle.open(a.bundle)
    output_dir(a.output, "-o")
    arrays = load_inputs(a.input or [])
    board = board_for(a, bundle.manifest)
    if board.transport_kind == "local":
        outs = run_local(bundle, arrays, a.output, threads=a.threads)
    else:  # a remote board: inputs uploaded, the run program executed there, outputs fetched
        dev = open_device(board, connection_from_args(a, board))
        try:
            outs = dev.run(bundle, arrays, a.output, threads=a.threads)
        finally:
            dev.close()
    for p in outs:
        print(p)
    return 0


def _cmd_inspect(a: argparse.Namespace) -> int:
    from collections import Counter

    from .model import onnx_load
    from .model.ops import ONNX_DOMAINS, is_supported, op_label
    from .model.quant_report import node_report, summary

    model = onnx_load.load_onnx(a.model)
    print(f"{a.model}: opset {max((o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')), default='?')}, "
          f"{len(model.graph.node)} nodes")
    for kind, ios in (("input", onnx_load.graph_inputs(model)), ("output", onnx_load.graph_outputs(model))):
        for io in ios:
            print(f"  {kind:6} {io.name}: {io.dtype}[{', '.join(map(str, io.shape))}]")
    dyn = onnx_load.dynamic_dim_names(model)
    print(f"  dynamic dims: {', '.join(dyn) if dyn else 'none'}" + (
        f"  (build with {' '.join(f'--dim {d}=MIN:MAX' for d in dyn)})" if dyn else ""))
    counts = Counter((n.domain, n.op_type) for n in model.graph.node)
    print("  operators:")
    for (domain, op), n in sorted(counts.items(), key=lambda kv: (kv[0][0] not in ONNX_DOMAINS, kv[0])):
        print(f"    {op_label(domain, op):40} x{n:<4} {'supported' if is_supported(domain, op) else 'NOT SUPPORTED'}")
    quant = node_report(model)
    if quant:  # a quantised model: how each quantised node runs
        kinds = ", ".join(f"{k} {v}" for k, v in summary(quant).items())
        print(f"  quantised nodes ({kinds}):")
        for r in quant:
            print(f"    {r.node:28} {r.op:40} {r.lowering}")
    bad = onnx_load.unsupported_ops(model)
    print(f"  {'all operators are supported' if not bad else f'{len(bad)} node(s) use unsupported operators'}")
    return 0


def _cmd_boards(a: argparse.Namespace) -> int:
    from .board import board_files, load_board_file

    for p in board_files():
        b = load_board_file(p)
        t = b.target
        print(f"{b.name:18} {t.triple:22} cpu={t.cpu:14} cores={t.cores:<3} kernels={t.kind:5} "
              f"transport={b.transport.get('kind', 'local'):7} {b.description}")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as edgepack's: one line (not the usage block), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"edgepack: error: {message}; see `{self.prog} --help`\n")


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    def of(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    return f"edgepack {__version__} (apache-tvm {of('apache-tvm')}, onnx {of('onnx')}, Python {sys.version.split()[0]})"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="edgepack", description="Ahead-of-time deployment packager for edge devices.")
    p.add_argument("--version", action="version", version=_versions())
    p.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="compile an ONNX model into a self-contained C package")
    b.add_argument("model", nargs="?", help="the .onnx file (default: the bundled encoder example)")
    b.add_argument("--board", default="host", help="board name from boards/*.toml (default: host)")
    b.add_argument("--dim", action="append", metavar="NAME=MIN:MAX", help="range of a dynamic dim (repeatable)")
    b.add_argument("-o", "--output", help="package directory (default: build/<model>)")
    b.add_argument("--name", help="package name used in C symbols (default: the model file's stem)")
    b.add_argument("--db", help="tuning database from `edgepack tune`: use its kernels and dispatchers")
    b.set_defaults(fn=_cmd_build)

    r = sub.add_parser("run", help="run a built package on .npy inputs")
    r.add_argument("bundle", help="the package directory")
    r.add_argument("--input", action="append", metavar="X.npy", help="one per model input, in model order")
    r.add_argument("-o", "--output", default="out", help="folder for <k>_<name>.npy outputs (default: out)")
    r.add_argument("--threads", type=argtypes.threads, help="worker threads (default: the board's cores)")
    from .commands._connection import add_connection_args

    add_connection_args(r, serial=True)  # --board/--host/--serial...: run on a remote board (default: the package's)
    r.set_defaults(fn=_cmd_run)

    i = sub.add_parser("inspect", help="show a model's inputs, dynamic dims and operators")
    i.add_argument("model")
    i.set_defaults(fn=_cmd_inspect)

    bo = sub.add_parser("boards", help="list the boards edgepack knows")
    bo.set_defaults(fn=_cmd_boards)

    from .commands import register_all

    register_all(sub)
    return p


_stopped_by: int | None = None  # the signal (SIGINT, SIGTERM) that stopped the command


def _on_signal(signum, frame):
    """Ctrl-C and SIGTERM alike raise KeyboardInterrupt, so that the same cleanup runs (a build's
    .NAME.partial-* folder is removed). TVM sometimes turns it into an error of its own: the flag tells."""
    global _stopped_by
    _stopped_by = signum
    raise KeyboardInterrupt


def _stopped() -> int:
    word = "terminated" if _stopped_by == signal.SIGTERM else "interrupted"
    print(f"edgepack: {word}", file=sys.stderr)
    return 128 + (_stopped_by or signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:  # from the start: a Ctrl-C while the commands' modules load is an interrupt too, not a traceback
        args = parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
        return args.fn(args)
    except KeyboardInterrupt:
        return _stopped()
    except EdgepackError as e:
        if _stopped_by is not None:  # the error is the signal, as TVM reported it
            return _stopped()
        print(f"edgepack: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except Exception:
        if _stopped_by is not None:
            return _stopped()
        raise


if __name__ == "__main__":
    sys.exit(main())
