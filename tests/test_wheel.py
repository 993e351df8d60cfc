"""`pip install .` (not editable) gives a working edgepack: the wheel carries boards/ and templates/.

The wheel is built from the repository's tracked files only, installed into a fresh virtual environment
(which sees this machine's site-packages for the heavy dependencies, but not the checkout), and then used
from a folder outside the checkout: `edgepack boards`, then `edgepack build` on the bundled default.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def _tracked_copy(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if rel.startswith("tests/") or rel.startswith("benchmarks/"):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)


@pytest.mark.slow
def test_installed_wheel_has_boards_and_templates_and_builds(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout to know the tracked files")
    src, dist, venv, work = (tmp_path / d for d in ("src", "dist", "venv", "work"))
    for d in (src, dist, work):
        d.mkdir()
    _tracked_copy(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src),
                    "-w", str(dist)], check=True, capture_output=True)
    wheel = next(dist.glob("edgepack-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py, exe = venv / "bin" / "python", venv / "bin" / "edgepack"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)

    where = subprocess.run([py, "-c", "import edgepack; print(edgepack.__file__)"], cwd=work, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), f"imported {where}, not the installed wheel"
    boards = subprocess.run([exe, "boards"], cwd=work, capture_output=True, text=True)
    assert boards.returncode == 0, boards.stderr
    assert "host" in boards.stdout and "rpi4" in boards.stdout and "mps2-an386" in boards.stdout
    build = subprocess.run([exe, "build"], cwd=work, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    assert (work / "build" / "encoder" / "manifest.json").is_file()
