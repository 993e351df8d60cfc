"""Write a package directory: sources, runtime, kernels, weights, Makefile, plan.json and manifest.json.

The directory is assembled and compiled under a temporary name beside the target, then renamed into place,
so a failed build never leaves a half-written package behind (and an old package stays until the new one
is complete).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ..board import Board
from ..errors import BuildError
from ..resources import TEMPLATES_DIR

TEMPLATES = TEMPLATES_DIR  # the C runtime, programs and Makefile.in
MANIFEST_VERSION = 1
# What a Linux board needs of a package (with manifest.json): the device program, which holds the weights.
DEVICE_FILES = ("ep",)


@dataclass
class Bundle:
    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return self.manifest["model"]["name"]

    @staticmethod
    def open(path: str | os.PathLike) -> Bundle:
        p = Path(path)
        mf = p / "manifest.json"
        if not mf.exists():
            from ..errors import RunError

            raise RunError(f"'{p}' is not an edgepack package (no manifest.json); build one with `edgepack build`")
        return Bundle(p, json.loads(mf.read_text()))


def stage_dir(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))


def copy_runtime(dst: Path, platform: str) -> None:
    (dst / "runtime").mkdir(parents=True, exist_ok=True)
    (dst / "programs").mkdir(parents=True, exist_ok=True)
    for f in ("ep_runtime.h", "ep_internal.h", "ep_runtime.c", "ep_tvm_abi.h", "ep_platform.h", f"ep_platform_{platform}.c"):
        shutil.copy2(TEMPLATES / "runtime" / f, dst / "runtime" / f)
    for f in ("ep_program.h", "ep_main.c", "ep_run.c", "ep_bench.c", "ep_npy.c", "ep_npy.h"):
        shutil.copy2(TEMPLATES / "programs" / f, dst / "programs" / f)


def write_makefile(dst: Path, model: str, board: Board, kernel_obj: str) -> None:
    tc = board.toolchain
    ldlibs = "-lm -lpthread" if tc.platform == "posix" else "-lm"
    text = Template((TEMPLATES / "Makefile.in").read_text()).substitute(
        model=model, board=board.name, cc=tc.cc, ar=tc.ar, cflags=" ".join(tc.cflags), ldflags=" ".join(tc.ldflags),
        ldlibs=ldlibs, platform=tc.platform, kernel_obj=kernel_obj,
    )
    (dst / "Makefile").write_text(text)


def make(dst: Path, jobs: int = 2) -> None:
    r = subprocess.run(["make", "-s", f"-j{jobs}", "-C", str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if "Waiting for unfinished jobs" not in ln]
        first_err = next((ln for ln in lines if "error" in ln.lower() or "***" in ln), lines[-1] if lines else "make failed")
        raise BuildError(f"compiling the package failed: {first_err.strip()[:300]}")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build_product(p: Path, dst: Path) -> bool:
    """`make`'s intermediate objects (rebuilt from the sources); an LLVM kernel object is a source here,
    C-source kernels (kernels/kernels.c, microcontrollers) are compiled by make like the rest."""
    return p.suffix == ".o" and (p.relative_to(dst).parts[0] != "kernels" or p.with_suffix(".c").exists())


def write_manifest(dst: Path, manifest: dict) -> dict:
    files = sorted(p for p in dst.rglob("*")
                   if p.is_file() and p.name != "manifest.json" and not _build_product(p, dst))
    manifest = dict(manifest, version=MANIFEST_VERSION,
                    files={str(p.relative_to(dst)): sha256(p) for p in files},
                    device_files=[f for f in DEVICE_FILES if (dst / f).is_file()])
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def commit(stage: Path, out: Path) -> None:
    """Replace `out` with the finished `stage` directory."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    stage.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def verify(bundle: Bundle) -> list[str]:
    """Files whose sha256 does not match the manifest (missing files included)."""
    bad = []
    for rel, digest in bundle.manifest.get("files", {}).items():
        p = bundle.path / rel
        if not p.exists() or sha256(p) != digest:
            bad.append(rel)
    return bad
