"""Write a package directory: sources, runtime, kernels, weights, Makefile, plan.json and manifest.json.

The directory is assembled and compiled under a temporary name beside the target, then renamed into place,
so a failed build never leaves a half-written package behind (and an old package stays until the new one
is complete). Only an edgepack package (a valid manifest.json) is ever replaced: any other file or folder at
the output path is the user's, and the build refuses it before doing any work.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ..board import Board
from ..errors import BuildError, OutputPathError, RunError, error_line
from ..paths import check_creatable
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
        if not (p / "manifest.json").is_file():
            raise RunError(f"'{p}' is not an edgepack package (no manifest.json); build one with `edgepack build`")
        manifest, problem = read_manifest(p)
        if problem:
            raise RunError(f"'{p}' has a damaged manifest.json ({problem}); rebuild the package with `edgepack build`")
        return Bundle(p, manifest)


# what every manifest holds, with its type: what `run`, `bench` and `flash` read (write_manifest adds the last two)
_MANIFEST_KEYS = {"edgepack_version": str, "model": dict, "board": dict, "dims": list, "inputs": list,
                  "outputs": list, "memory": dict, "version": int, "files": dict}
_ENTRY_KEYS = {"dims": ("name", "min", "max"), "inputs": ("name", "dtype", "shape"),
               "outputs": ("name", "dtype", "shape")}


def read_manifest(path: Path) -> tuple[dict, str | None]:
    """(manifest, None) for an edgepack package folder, else ({}, why it is not one)."""
    try:
        m = json.loads((path / "manifest.json").read_text())
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"unreadable: {getattr(e, 'strerror', None) or type(e).__name__}"
    except json.JSONDecodeError as e:
        return {}, f"not JSON: {e.msg} at line {e.lineno}"
    if not isinstance(m, dict):
        return {}, "not a JSON object"
    missing = [k for k, t in _MANIFEST_KEYS.items() if not isinstance(m.get(k), t)]
    if missing:
        return {}, f"no valid {', '.join(missing)}"
    if not all(isinstance(m[k].get("name"), str) for k in ("model", "board")):
        return {}, "model or board without a name"
    for key, fields in _ENTRY_KEYS.items():
        if not all(isinstance(e, dict) and all(f in e for f in fields) for e in m[key]):
            return {}, f"an entry of {key} without {'/'.join(fields)}"
    return m, None


def is_package(path: Path) -> bool:
    return (path / "manifest.json").is_file() and read_manifest(path)[1] is None


MAX_NAME = 64  # the package name is in file names and C symbols (ep_NAME_init, EP_NAME_ARENA_BYTES)
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def resolve_name(name: str | None, model_path: Path) -> str:
    """--name, which must be a C identifier (it names files and symbols), or one made from the model's file name."""
    from ..model.names import package_name

    if name is None:
        return package_name(model_path.stem)
    if not _C_IDENT.fullmatch(name) or len(name) > MAX_NAME:
        raise BuildError(f"--name '{name[:MAX_NAME]}' is not a C identifier (letters, digits and _, not starting with "
                         f"a digit, at most {MAX_NAME} characters); use e.g. --name {package_name(Path(name).name)}")
    return name


def package_output(model_path: Path, out: str | os.PathLike | None, name: str | None) -> tuple[str, Path, Path]:
    """(package name, output path, where to write it) for a build, checked; cheap, so commands call it first."""
    name = resolve_name(name, Path(model_path))
    out = Path(out) if out else Path("build") / name
    return name, out, check_output(out)


def check_output(out: Path) -> Path:
    """-> where `build -o out` may write, resolved: a new path, an empty folder, or an edgepack package (which
    the build replaces). Anything else is the user's and is refused, before any work is done."""
    target = check_creatable(out, "-o", reserve=_ASIDE_EXTRA)
    if target == Path(target.anchor):
        raise OutputPathError(f"-o '{out}' is the root of the file system; build into a folder of its own, "
                              "e.g. -o build/model")
    if target in (cwd := Path.cwd().resolve(), *cwd.parents):
        raise OutputPathError(f"-o '{out}' is the current folder or holds it; build into a folder of its own, "
                              "e.g. -o build/model")
    pkg = next((a for a in target.parents if is_package(a)), None)
    if pkg is not None:
        raise OutputPathError(f"-o '{out}' is inside the edgepack package '{pkg}'; build beside it, "
                              f"e.g. -o {pkg.parent / (pkg.name + '-2')}")
    if os.path.lexists(target) and not target.is_dir():
        raise OutputPathError(f"-o '{out}' is a file, and edgepack replaces only its own packages; "
                              "choose a new or empty folder")
    if target.is_dir() and any(target.iterdir()) and not is_package(target):
        raise OutputPathError(f"-o '{out}' is a folder that is not an edgepack package (it holds files and no "
                              "edgepack manifest.json), and edgepack replaces only its own packages; "
                              "choose a new or empty folder")
    return target


_ASIDE_EXTRA = len("..partial-4194304-xxxxxxxx")  # what _aside_name adds to a name, at most (pid_max 2^22)


def _aside_name(out: Path, kind: str, tail: str = "") -> str:
    """The name of a folder beside `out` during a build: .NAME.partial-PID-*, .NAME.old-PID."""
    return f".{Path(out).name}.{kind}-{os.getpid()}{tail}"


def stage_dir(out: Path) -> Path:
    """A fresh folder beside `out` to assemble the package in (after sweeping what killed builds left)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _sweep_dead_builds(out)
        return Path(tempfile.mkdtemp(prefix=_aside_name(out, "partial") + "-", dir=out.parent))
    except OSError as e:
        raise OutputPathError(f"-o '{out}': cannot create a folder in '{out.parent}' ({e.strerror}); "
                              "choose another place") from None


def _sweep_dead_builds(out: Path) -> None:
    """Remove .NAME.partial-PID-* and .NAME.old-PID folders of builds whose process is gone (SIGKILL)."""
    for p in out.parent.glob(f".{glob.escape(out.name)}.*-*"):
        kind, _, rest = p.name[len(out.name) + 2:].partition("-")
        pid = rest.split("-")[0]
        if kind in ("partial", "old") and pid.isdigit() and p.is_dir() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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


def make(dst: Path, target: str | None = None, what: str = "the package", jobs: int = 2) -> None:
    """`make` in a package (or firmware) folder; a failure is one BuildError naming the first error line."""
    cmd = ["make", "-s", f"-j{jobs}", "-C", str(dst), *([target] if target else [])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"compiling {what} failed: {error_line(r.stderr + r.stdout, 'make failed')}")


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
    """Put the finished `stage` at `out`: an old package there is replaced, an empty folder taken over. `out` is
    checked again, as the build took a while."""
    check_output(out)
    old = None
    if is_package(out):
        old = out.with_name(_aside_name(out, "old"))
        out.rename(old)
    try:
        stage.rename(out)  # atomic, and it replaces an empty folder; a folder that got files meanwhile stays
    except OSError as e:
        if old is not None:
            old.rename(out)
        raise OutputPathError(f"-o '{out}': {e.strerror}; the package was not written, choose a new or empty "
                              "folder") from None
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
