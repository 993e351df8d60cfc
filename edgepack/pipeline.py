"""The build flow as plain functions: model file -> Plan -> kernels -> C package -> compiled bundle."""

from __future__ import annotations

import json
import logging
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path


from . import __version__
from .board import Board, load_board
from .codegen.bundle import (Bundle, commit, copy_runtime, make, package_output, sha256, stage_dir,
                             write_makefile, write_manifest)
from .errors import BuildError, one_line
from .mcu.config import is_mcu, mcu_config
from .model.frontend import lower_model, prepare
from .model.plan import DimRange
from .schedule.defaults import schedules_for

# TVM-dependent stages are imported inside the functions that use them: importing TVM takes seconds, and
# bad input (a missing file, a dim without a range) should be reported before that.

log = logging.getLogger("edgepack")


@dataclass
class BuildResult:
    bundle: Bundle
    seconds: float
    arena_bytes: int
    tensor_bytes: int
    sum_of_tensor_bytes: int
    weights_bytes: int
    code_bytes: int  # text of the static library (runtime + kernels + call sequence), weights not included


def build_package(model_path: str | Path, board: Board | str = "host", dim_ranges: dict | None = None,
                  out: str | Path | None = None, schedules=None, name: str | None = None,
                  db: str | Path | None = None) -> BuildResult:
    """Compile a model into a package. `db`: a tuning database whose kernel choices and dispatchers to use.

    The steps: check the input and the output path (before any heavy work), lower and schedule the kernels,
    then in a staging directory write the sources, compile, write the manifest, and move it into place."""
    t0 = time.perf_counter()
    model_path = Path(model_path)
    name, out, target = package_output(model_path, out, name)  # before any work: the user's files are refused
    model, dims = prepare(model_path, dim_ranges or {})
    board = load_board(board) if isinstance(board, str) else board
    mcu = mcu_config(board) if is_mcu(board) else None  # bad MCU settings fail before the heavy work
    plan, impls, schedules, tuning = _lower_and_schedule(name, model, dims, board, mcu, schedules, db)
    float_build = _float_build_memory(name, model, dims)

    stage = stage_dir(target)
    try:
        src = _write_sources(stage, name, board, mcu, plan, impls, schedules, dims)
        mem = _compile(stage, name, mcu)
        code_bytes = _text_bytes(stage / f"lib{name}.a")
        manifest = _manifest(name, model_path, board, mcu, dims, plan, impls, src, code_bytes, mem, tuning)
        if float_build:
            manifest["memory"]["float_build"] = float_build
        manifest["test_cases"] = _test_cases(stage, manifest, model_path, mcu is not None)
        manifest = write_manifest(stage, manifest)
        commit(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return BuildResult(Bundle(out, manifest), time.perf_counter() - t0, manifest["memory"]["arena_bytes"],
                       plan.arena_bytes, src.plan_json["sum_of_tensor_bytes"], len(src.weights.blob), code_bytes)


def _lower_and_schedule(name: str, model, dims: list[DimRange], board: Board, mcu, schedules, db):
    """Lower the model to a Plan, pick its schedules (the board's, or a tuning database's) and make every
    kernel's variants, with packed weights permuted in the plan. -> (plan, impls, schedules, tuning)."""
    from .schedule.variants import bind_row_ranges, make_variants

    lowered = lower_model(name, model, dims, board.word_bits)
    plan = lowered.plan
    schedules = schedules or schedules_for(board)
    tuning = None
    if db is not None:
        from .tune.apply import tuned_schedules

        applied = tuned_schedules(db, lowered, dims, board, schedules)
        schedules = applied.schedules
        tuning = {"db": str(Path(db).resolve()), "db_sha256": sha256(Path(db)), "kernels": applied.tuned,
                  "untuned": applied.untuned, "verification": applied.verification}
    if not mcu:  # a microcontroller's memory is checked against its board's by the firmware build
        _check_static_memory(plan, dims)
    impls = {k: make_variants(k, f, schedules) for k, f in lowered.kernels.items()}
    for k in _shared_packed_weights(plan, impls):  # a weight another call reads unpacked stays unpacked
        impls[k] = make_variants(k, lowered.kernels[k], replace(schedules, pack=False))
    _pack_weights(plan, impls)
    bind_row_ranges(plan, impls)
    return plan, impls, schedules, tuning


def _float_build_memory(name: str, model, dims: list[DimRange]) -> dict | None:
    """For a QDQ model: the tensor and weight bytes of the float model it was quantised from (model/float_twin.py),
    which the memory report sets against the int8 build. None for other models, or when the twin does not lower."""
    from .codegen.emit_c import layout_weights
    from .model.float_twin import float_twin

    twin = float_twin(model)
    if twin is None:
        return None
    try:
        plan = lower_model(name, twin, dims).plan
    except Exception as e:  # noqa: BLE001 (only a report: the int8 build does not depend on it)
        log.warning("no float comparison in the memory report: the float twin did not lower (%s)", one_line(e))
        return None
    return {"tensor_bytes": plan.arena_bytes, "weights_bytes": len(layout_weights(plan).blob)}


@dataclass
class _Sources:
    """What `_write_sources` put in the staging directory and the later steps report."""

    workspace_per_thread: int
    weights: object  # codegen.emit_c.WeightsLayout
    plan_json: dict
    fw_id: str | None  # the firmware's id (microcontrollers)


def _write_sources(stage: Path, name: str, board: Board, mcu, plan, impls, schedules, dims) -> _Sources:
    """Kernels compiled to one object (or C file), the generated C, weights, runtime, build files, plan.json."""
    from .codegen.emit_c import emit_package, layout_weights
    from .codegen.kernels import compile_kernels

    kfile = "kernels.c" if board.target.kind == "c" else "kernels.o"
    kobj = compile_kernels(impls, board.tvm_target(), stage / "kernels" / kfile, dims)
    weights = layout_weights(plan)
    sources = emit_package(plan, impls, weights, kobj.workspace_per_thread, board.target.cores,
                           schedules.dispatchers)
    (stage / "include").mkdir()
    (stage / "src").mkdir()
    for fname, text in sources.files.items():
        (stage / ("include" if fname.endswith(".h") else "src") / fname).write_text(text)
    (stage / "src" / "weights.bin").write_bytes(weights.blob)
    copy_runtime(stage, board.toolchain.platform)
    (stage / "programs" / "ep_package.h").write_text(_package_glue(name))
    fw_id = None
    if mcu:
        from .mcu.firmware import write_firmware

        fw_id = write_firmware(stage, name, board, mcu, len(plan.inputs) + len(plan.outputs), len(dims))
    else:
        write_makefile(stage, name, board, "kernels/kernels.o")
    plan_json = plan.to_json() | {"workspace_per_thread": kobj.workspace_per_thread,
                                  "max_threads": board.target.cores}
    (stage / "plan.json").write_text(_dumps(plan_json))
    return _Sources(kobj.workspace_per_thread, weights, plan_json, fw_id)


def _compile(stage: Path, name: str, mcu):
    """make (Linux boards, host) or the firmware build (microcontrollers: returns its memory report)."""
    if mcu:
        from .mcu.firmware import build_firmware

        return build_firmware(stage, name, mcu)
    make(stage)
    return None


def _manifest(name: str, model_path: Path, board: Board, mcu, dims, plan, impls, src: _Sources, code_bytes: int,
              mem, tuning) -> dict:
    """manifest.json's content, test cases aside (they need the staged package)."""
    ws = src.workspace_per_thread
    manifest = {
        "edgepack_version": __version__,
        "tvm_version": _tvm_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "board": {"name": board.name, "triple": board.target.triple, "cpu": board.target.cpu,
                  "cores": board.target.cores},
        "model": {"name": name, "source": model_path.name, "sha256": sha256(model_path)},
        "dims": [{"name": d.name, "c_name": d.c_name, "min": d.lo, "max": d.hi} for d in dims],
        "inputs": [_io_json(plan, plan.tensor(t), plan.tensor(t).name) for t in plan.inputs],
        "outputs": [_io_json(plan, plan.tensor(o.tensor), o.name) for o in plan.outputs],
        "memory": {"arena_bytes": plan.arena_bytes + ws * board.target.cores,
                   "tensor_bytes": plan.arena_bytes, "workspace_per_thread": ws,
                   "weights_bytes": len(src.weights.blob), "code_bytes": code_bytes},
        "kernels": {k: [v.symbol for v in i.variants] for k, i in impls.items()},
        "tuned": bool(tuning and tuning["kernels"]),
        "tuning": tuning,
        "build_host": platform.node(),
    }
    if mcu:
        from .mcu.firmware import firmware_manifest

        manifest["memory"]["mcu"] = mem.to_json()
        manifest["firmware"] = firmware_manifest(src.fw_id, mcu)
    return manifest


def _test_cases(stage: Path, manifest: dict, model_path: Path, small: bool) -> int:
    """A few inputs with onnxruntime's outputs, kept in the package for `flash` and `verify` (check.py);
    small ones for a microcontroller, whose serial link carries them."""
    from .check import TEST_DIR, write_test_cases

    try:
        return len(write_test_cases(stage, manifest, model_path, max_bytes=(64 << 10) if small else (4 << 20)))
    except Exception as e:  # noqa: BLE001 (onnxruntime cannot run every model edgepack builds)
        shutil.rmtree(stage / TEST_DIR, ignore_errors=True)
        log.warning("no test cases in the package: onnxruntime could not run the model (%s)", one_line(e))
        return 0


STATIC_BYTES_LIMIT = 2 << 30  # what the default (small) code model lets a program's static arrays reach


def _check_static_memory(plan, dims: list[DimRange]) -> None:
    """The device program `ep` holds the arena, the I/O buffers and the weights in static arrays: refuse a plan
    they cannot hold (the linker would fail with a bare "collect2: ld returned 1")."""
    need = plan.arena_bytes + plan.io_bytes() + sum(v.nbytes for v in plan.param_values)
    if need >= STATIC_BYTES_LIMIT:
        at = ", ".join(f"{d.name}={d.hi}" for d in dims)
        raise BuildError(f"the memory plan needs {need:,} B ({need / 2**30:.1f} GiB: tensors, inputs/outputs and "
                         f"weights at {at}), more than the {STATIC_BYTES_LIMIT >> 30} GiB a package can hold; "
                         "lower the dims' MAX with --dim NAME=MIN:MAX")


def _packed_args(plan, impls):
    """(kernel, weight tensor id, (panel, pair)) for every packed weight argument of every call."""
    return [(c.kernel, c.args[pi], panel) for c in plan.calls for pi, panel in impls[c.kernel].packed.items()]


def _shared_packed_weights(plan, impls) -> set[str]:
    """Kernels whose packed weight is also read by another kernel, or is not a plain weight."""
    readers: dict[int, set[str]] = {}
    for c in plan.calls:
        for a in c.tensors:
            readers.setdefault(a, set()).add(c.kernel)
    return {k for k, tid, _ in _packed_args(plan, impls)
            if readers[tid] != {k} or plan.tensor(tid).kind != "param"}


def _pack_weights(plan, impls) -> None:
    """Permute each packed weight's data and shape once, as its kernels now read it (schedule/pack.py)."""
    from .model.plan import SymExpr
    from .schedule.pack import pack_array

    done = set()
    for _, tid, panel in _packed_args(plan, impls):
        if tid in done:
            continue
        done.add(tid)
        i = plan.params.index(tid)
        plan.param_values[i] = pack_array(plan.param_values[i], *panel)
        plan.tensor(tid).shape = [SymExpr.const(d) for d in plan.param_values[i].shape]


def _package_glue(name: str) -> str:
    M = name.upper()
    return (f"/* Generated: binds the generic programs to package '{name}'. */\n#include \"{name}.h\"\n"
            f"#define EP_PACKAGE ep_{name}_package\n#define EP_PACKAGE_CTX ep_{name}_ctx_t\n"
            f"#define EP_PACKAGE_ARENA_BYTES EP_{M}_ARENA_BYTES\n#define EP_PACKAGE_IO_BYTES EP_{M}_IO_BYTES\n"
            f"#define EP_PACKAGE_NUM_INPUTS EP_{M}_NUM_INPUTS\n#define EP_PACKAGE_NUM_OUTPUTS EP_{M}_NUM_OUTPUTS\n"
            f"#define EP_PACKAGE_NUM_DIMS EP_{M}_NUM_DIMS\n#define EP_PACKAGE_MAX_IO_RANK EP_{M}_MAX_IO_RANK\n")


def _io_json(plan, t, name: str) -> dict:
    return {"name": name, "dtype": t.dtype, "shape": [s.to_json() for s in t.shape]}


def _dumps(obj) -> str:
    return json.dumps(obj, indent=1) + "\n"


def _tvm_version() -> str:
    import tvm

    return tvm.__version__


def _text_bytes(lib: Path) -> int:
    """Code in the static library: the text of every member but the weights (their read-only data counts as
    text to `size`, and is reported as weights_bytes)."""
    r = subprocess.run(["size", str(lib)], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return lib.stat().st_size
    members = [ln.split() for ln in r.stdout.strip().splitlines()[1:]]
    return sum(int(f[0]) for f in members if len(f) > 5 and not f[5].startswith("weights."))
