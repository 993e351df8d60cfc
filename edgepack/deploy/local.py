"""Run a package on this machine (the `host` board, transport "local")."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..codegen.bundle import Bundle
from ..errors import DimError, RunError
from .io import dims_of, output_file


def run_local(bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None,
              timeout: float = 600) -> list[Path]:
    """Run the package's `run` program; outputs land in out_dir only when the whole run succeeded."""
    dims_of(bundle.manifest, arrays)
    prog = bundle.path / "run"
    if not prog.exists():
        raise RunError(f"'{bundle.path}' has no run program; rebuild it with `edgepack build`")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".edgepack-run-", dir=out_dir) as tmp:
        tmp = Path(tmp)
        paths = []
        for i, a in enumerate(arrays):
            paths.append(tmp / f"in{i}.npy")
            np.save(paths[-1], np.require(a, requirements="C"))  # ascontiguousarray makes 0-d 1-d
        res_dir = tmp / "out"
        res_dir.mkdir()
        cmd = [str(prog)] + (["--threads", str(threads)] if threads else []) + [str(res_dir)] + [str(p) for p in paths]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1].removeprefix("error: ")
            raise (DimError if r.returncode == 3 else RunError)(f"the package failed: {msg}")
        results = []
        for i, o in enumerate(bundle.manifest["outputs"]):
            name = output_file(i, o["name"])
            shutil.move(res_dir / name, out_dir / name)
            results.append(out_dir / name)
    return results


def bench_args(bundle: Bundle, dims: dict[str, int], settings) -> list[str]:
    """The `bench` program's arguments (same on every POSIX board): options, then one value per dim in order."""
    missing = [d["name"] for d in bundle.manifest["dims"] if d["name"] not in dims]
    if missing:
        raise DimError(f"no value for dim(s) {', '.join(missing)} of package '{bundle.name}'")
    opts = {"--threads": settings.threads, "--warmup": settings.warmup, "--repeat": settings.repeat,
            "--min-time-ms": settings.min_time_ms}
    args = [s for k, v in opts.items() if v is not None for s in (k, str(v))]
    return args + [str(dims[d["name"]]) for d in bundle.manifest["dims"]]


def bench_local(prog: Path, bundle: Bundle, dims: dict[str, int], settings, timeout: float = 600) -> dict:
    """Run a bench program here; its one line of JSON on stdout (exit 3: dims out of range)."""
    if not prog.exists():
        raise RunError(f"'{bundle.path}' has no {prog.name} program; rebuild it with `edgepack build`")
    r = subprocess.run([str(prog), *bench_args(bundle, dims, settings)], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1].removeprefix("error: ")
        raise (DimError if r.returncode == 3 else RunError)(f"bench at {dims} failed: {msg}")
    return json.loads(r.stdout)


def profile_program(bundle: Bundle) -> Path:
    """The package's `bench_profile` program (kernel calls timed, -DEP_PROFILE), built on first use with `make`
    (~0.5 s for the encoder; `edgepack build` does not build it, so plain builds stay as they were)."""
    r = subprocess.run(["make", "-s", "-C", str(bundle.path), "bench_profile"], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["make failed"])[-1]
        raise RunError(f"building {bundle.path}/bench_profile failed ({last.strip()[:200]}); "
                       "rebuild the package with this edgepack (its Makefile needs the bench_profile target)")
    return bundle.path / "bench_profile"


class LocalDevice:
    """The host board: packages run in place."""

    def __init__(self, board):
        self.board = board

    def install(self, bundle: Bundle) -> str:
        return str(bundle.path)

    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None) -> list[Path]:
        return run_local(bundle, arrays, out_dir, threads=threads)

    def bench(self, bundle: Bundle, dims: dict[str, int], settings):
        from .device import BenchResult

        out = bench_local(bundle.path / "bench", bundle, dims, settings)
        calls = []
        if settings.profile:  # a separate binary, so the samples above carry no profiling overhead
            prof = bench_local(profile_program(bundle), bundle, dims, replace(settings, min_time_ms=0))
            calls = [{"name": c["kernel"], "ns": c["mean_ns"]} for c in prof.get("calls", [])]
        return BenchResult(dims=dict(dims), samples_ns=out["samples_ns"], threads=out.get("threads"), calls=calls)

    def facts(self) -> dict:
        from ..report.machine import local_facts

        return local_facts(self.board)

    def close(self) -> None:
        pass


def open_device(board, conn=None) -> LocalDevice:
    return LocalDevice(board)
