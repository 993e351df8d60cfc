"""Tuning on a microcontroller: a `tune.measure.Measurer` (`measure_batch`) that
puts a whole batch of candidate kernels into ONE firmware image (one flash per batch, not per trial), then
times each candidate on the device through the serial protocol (device side: templates/firmware/ep_fw_trials.c).

Candidates are compiled as C with vectorization off (TVM's "c" target cannot vectorize,
docs/tvm-facts.md#c-target-cannot-vectorize: a vectorized loop becomes the plain loop the package's C kernels
have). A candidate whose arguments do not fit the board's RAM, or that does not compile, comes back with `error`
set and the batch goes on.
"""

from __future__ import annotations

import hashlib
import shutil
import statistics
import struct
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..board import Board, Connection
from ..codegen.bundle import TEMPLATES
from ..codegen.emit_c import DL_TYPE_CODE
from ..errors import BuildError, EdgepackError, error_line, last_line
from ..mcu.config import mcu_config
from ..mcu.firmware import FIRMWARE, config_header, linker_script
from ..model.plan import align_up
from .measure import MeasureInput, MeasureResult

CMD_INFO, CMD_TRIAL = 1, 16
RUNTIME = ("ep_runtime.c", "ep_runtime.h", "ep_internal.h", "ep_tvm_abi.h", "ep_platform.h", "ep_platform_single.c")
FW_SOURCES = ("ep_fw_trials.c", "ep_fw_proto.c", "ep_fw_uart.c", "ep_fw_timer.c", "ep_fw_startup.c")
OVERHEAD_RAM = 8192  # firmware data, frame buffer and runtime state, besides the stack


@dataclass
class TrialImage:
    elf: Path
    image_id: str
    included: list[int]  # batch indices in the image, in trial order
    errors: dict[int, str]  # batch index -> why it is not in the image


class McuMeasurer:
    """Measures candidate kernels on a microcontroller board, a firmware image per batch of `per_image` (a
    `tune.measure.Measurer`, beside the RPC one)."""

    def __init__(self, board: Board, conn: Connection | None = None, workdir: str | Path | None = None,
                 per_image: int = 64, workspace_bytes: int = 4096, timeout_s: float = 300):
        self.board, self.cfg = board, mcu_config(board)
        self.conn = conn or Connection()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="edgepack-trials-"))
        self.per_image, self.workspace_bytes, self.timeout_s = per_image, workspace_bytes, timeout_s
        self.images_flashed = 0

    def __enter__(self) -> McuMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the trial images (the board keeps running the last one)."""
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def measure(self, inp: MeasureInput) -> MeasureResult:
        return self.measure_batch([inp])[0]

    def measure_batch(self, inputs: Sequence[MeasureInput],
                      on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(inputs)
        for start in range(0, len(inputs), self.per_image):
            chunk = list(range(start, min(start + self.per_image, len(inputs))))
            image = self.build_image([inputs[i] for i in chunk])
            for j, msg in image.errors.items():
                results[chunk[j]] = MeasureResult(None, error=msg)
            if image.included:
                self._measure_image(image, chunk, results)
            if on_result:
                for i in chunk:
                    on_result(i, results[i])
        return results  # type: ignore[return-value]

    # -- building -----------------------------------------------------------------------------------------
    def build_image(self, inputs: Sequence[MeasureInput]) -> TrialImage:
        budget = self.cfg.ram_bytes - self.cfg.stack_bytes - OVERHEAD_RAM - self.workspace_bytes
        errors, ok = {}, []
        for j, inp in enumerate(inputs):
            need = _arena_bytes(inp)
            if need > budget:
                errors[j] = f"needs {need:,} B of RAM for its arguments; board {self.board.name} has {budget:,} B free"
            else:
                ok.append(j)
        kernels_c, failed = _kernels_c([inputs[j] for j in ok], self.board.tvm_target())
        for k in sorted(failed, reverse=True):
            errors[ok[k]] = failed[k]
            del ok[k]
        if not ok:
            return TrialImage(Path(), "", [], errors)
        table = _trials_c([inputs[j] for j in ok])
        image_id = hashlib.sha256((kernels_c + table).encode()).hexdigest()[:16]
        d = self.workdir / image_id
        if not (d / "trials.elf").exists():
            arena = max(_arena_bytes(inputs[j]) for j in ok)
            self._compile(d, kernels_c, table, image_id, arena)
        return TrialImage(d / "trials.elf", image_id, ok, errors)

    def _compile(self, d: Path, kernels_c: str, table: str, image_id: str, arena: int) -> None:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for f in RUNTIME:
            shutil.copy2(TEMPLATES / "runtime" / f, d / f)
        for f in FW_SOURCES + ("ep_fw.h", "ep_fw_trials.h"):
            shutil.copy2(FIRMWARE / f, d / f)
        shutil.copytree(FIRMWARE / "include", d / "include")
        (d / "kernels.c").write_text(kernels_c)
        (d / "trials.c").write_text(table)
        (d / "ep_fw_config.h").write_text(config_header(self.board, self.cfg, image_id) + (
            f"#define EP_FW_TRIAL_ARENA {align_up(arena)}u\n#define EP_FW_TRIAL_WORKSPACE {self.workspace_bytes}u\n"))
        (d / "firmware.ld").write_text(linker_script(self.board, self.cfg))
        cc, flags = self.board.toolchain.cc, ["-std=c11", *self.cfg.arch_flags, *self.board.toolchain.cflags]
        _run([cc, *flags, "-w", "-Iinclude", "-I.", "-c", "kernels.c", "-o", "kernels.o"], d)
        _run([cc, *flags, "-Wall", "-Wextra", "-Werror", "-I.", *[f for f in FW_SOURCES], "trials.c",
              "ep_runtime.c", "ep_platform_single.c", "kernels.o", "-nostartfiles", "--specs=nano.specs",
              "-Wl,-z,noexecstack",
              *self.board.toolchain.ldflags, "-Tfirmware.ld", "-lm", "-o", "trials.elf"], d)
        objcopy = cc[: -len("gcc")] + "objcopy" if cc.endswith("gcc") else "objcopy"
        _run([objcopy, "-O", "binary", "trials.elf", "trials.bin"], d)
        _run([objcopy, "-O", "ihex", "trials.elf", "trials.hex"], d)

    # -- measuring ----------------------------------------------------------------------------------------
    def _measure_image(self, image: TrialImage, chunk: list[int], results: list) -> None:
        from ..deploy.serial import flash_image, open_link
        from ..mcu.protocol import Info

        self.conn = flash_image(self.board, self.conn, image.elf)
        self.images_flashed += 1
        link = open_link(self.board, self.conn)
        try:
            info = Info.parse(link.request(CMD_INFO, timeout=10).message)
            if info.fields.get("id") != image.image_id:
                raise EdgepackError(f"the board runs image {info.fields.get('id')}, not the trial image "
                                    f"{image.image_id}; check the flasher and the serial port")
            t = self.board.timing
            for k, j in enumerate(image.included):
                try:
                    r = link.request(CMD_TRIAL, struct.pack("<III", k, t.warmup, max(1, min(t.repeat, 64))),
                                     timeout=self.timeout_s)
                except EdgepackError as e:  # the candidate failed on the device: the batch goes on
                    results[chunk[j]] = MeasureResult(None, error=str(e)[:300])
                    continue
                ticks = struct.unpack(f"<{len(r.payload) // 8}Q", r.payload)
                secs = [n / self.cfg.clock_hz for n in ticks]
                results[chunk[j]] = MeasureResult(statistics.median(secs), secs, server=self.conn.serial)
        finally:
            link.port.close()


def _arena_bytes(inp: MeasureInput) -> int:
    return sum(align_up(int(np.prod(s[0], dtype=np.int64)) * np.dtype(s[1]).itemsize)
               for s in inp.args_spec if not isinstance(s, int))


def _funcs(inputs: Sequence[MeasureInput]) -> dict:
    import tvm

    funcs = {}
    for k, inp in enumerate(inputs):
        f = inp.kernel["main"] if isinstance(inp.kernel, tvm.IRModule) else inp.kernel
        if not isinstance(f, tvm.tirx.PrimFunc):
            raise BuildError("the MCU measurer builds candidates itself: give it PrimFuncs, not built modules")
        funcs[f"trial_{k}"] = f.with_attr("global_symbol", f"trial_{k}")
    return funcs


def _kernels_c(inputs: Sequence[MeasureInput], target) -> tuple[str, dict[int, str]]:
    """C source of all candidates in one module; a candidate that does not build is left out (its error)."""
    import tvm

    funcs, failed = _funcs(inputs), {}

    def build(fs: dict) -> str:
        with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_assert": True,
                                                            "tirx.disable_vectorize": True}):
            return tvm.tirx.build(tvm.IRModule(fs), target=target).inspect_source()

    try:
        return (build(funcs) if funcs else ""), failed
    except Exception:  # find the culprits one by one, keep the rest
        for k, name in enumerate(list(funcs)):
            try:
                build({name: funcs[name]})
            except Exception as e:
                failed[k] = f"does not compile as C: {last_line(str(e), '?')[:200]}"
        # renumber the survivors so trial_<k> matches their position in the image
        kept = [f for k, f in enumerate(funcs.values()) if k not in failed]
        funcs = {f"trial_{k}": f.with_attr("global_symbol", f"trial_{k}") for k, f in enumerate(kept)}
        return (build(funcs) if funcs else ""), failed


def _trials_c(inputs: Sequence[MeasureInput]) -> str:
    out = ["/* Generated by edgepack: the candidates of one trial image. */", '#include "ep_fw_trials.h"', ""]
    rows = []
    for k, inp in enumerate(inputs):
        out.append(f"int32_t __tvm_ffi_trial_{k}(void*, const TVMFFIAny*, int32_t, TVMFFIAny*);")
        args = []
        for a, spec in enumerate(inp.args_spec):
            if isinstance(spec, int):
                args.append(f"{{{spec}, 0, 0, 0, 0, 0}}")
                continue
            shape, dtype = list(spec[0]), np.dtype(spec[1])
            out.append(f"static int64_t t{k}_s{a}[] = {{{', '.join(str(int(s)) for s in shape) or '1'}}};")
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            bits = 8 if dtype.kind == "b" else dtype.itemsize * 8
            args.append(f"{{0, {DL_TYPE_CODE[dtype.kind]}, {bits}, {len(shape)}, t{k}_s{a}, {nbytes}u}}")
        if len(args) > 16:
            raise BuildError(f"candidate {inp.func_name} has {len(args)} arguments; trial images take up to 16")
        out.append(f"static const ep_fw_arg_t t{k}_args[] = {{{', '.join(args)}}};")
        rows.append(f"  {{__tvm_ffi_trial_{k}, {len(args)}, t{k}_args}},")
    return "\n".join(out + ["", "const ep_fw_trial_t ep_fw_trials[] = {", *rows, "};",
                            f"const int ep_fw_num_trials = {len(inputs)};", ""])


def _run(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"building the trial image failed: {error_line(r.stderr + r.stdout, 'failed')}")
