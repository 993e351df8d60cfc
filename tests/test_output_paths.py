"""`build -o` replaces only an edgepack package: anything else at the path is the user's and is refused at once
(one line, exit 2, before any lowering), with every file left as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import run_cli
from test_bad_input import assert_user_error

from edgepack.codegen.bundle import Bundle, verify
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e

MLP = EXAMPLES["mlp"].path  # the quickest example to build


def build(out, *extra: str, cwd=None):
    return run_cli("build", str(MLP), "--dim", "batch=1:4", "-o", str(out), *extra, cwd=cwd)


def snapshot(folder):
    """Every file under `folder` (hidden ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A real package, built through the CLI into an empty folder (which a build may use)."""
    out = tmp_path_factory.mktemp("pkgs") / "mlp"
    out.mkdir()
    r = build(out)
    assert r.returncode == 0, r.stderr
    assert verify(Bundle.open(out)) == []
    return out


def test_folder_with_user_files_is_refused(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "mlp.onnx").write_bytes(MLP.read_bytes())
    (models / "README").write_text("my notes\n")
    before = snapshot(tmp_path)
    assert_user_error(build(models), "not an edgepack package", "choose a new or empty folder")
    assert snapshot(tmp_path) == before  # nothing renamed aside, nothing half-written beside it


def test_regular_file_is_refused(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("keep me\n")
    assert_user_error(build(f), "is a file")
    assert snapshot(tmp_path) == {"notes.txt": b"keep me\n"}  # and no .notes.txt.old-PID


def test_folder_with_a_manifest_that_is_not_edgepacks_is_refused(tmp_path):
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps({"name": "my web app", "icons": []}))
    (fake / "index.html").write_text("<html></html>\n")
    before = snapshot(tmp_path)
    assert_user_error(build(fake), "not an edgepack package")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("sub", ["src", "new", "include/deeper"])
def test_output_inside_a_package_is_refused(package, sub):
    before = snapshot(package.parent)
    assert_user_error(build(package / sub), "inside the edgepack package")
    assert snapshot(package.parent) == before
    assert verify(Bundle.open(package)) == []


def test_existing_package_is_replaced(package):
    """... and what killed builds left beside it (SIGKILL: no handler ran) is swept, but not a live build's."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    leftovers = [package.parent / f".mlp.partial-{pid}-x1", package.parent / f".mlp.old-{pid}"]
    live = package.parent / f".mlp.partial-{os.getpid()}-x2"
    for d in (*leftovers, live):
        d.mkdir()
    r = build(package)
    assert r.returncode == 0, r.stderr
    assert verify(Bundle.open(package)) == []
    assert sorted(p.name for p in package.parent.iterdir()) == [live.name, "mlp"]
    live.rmdir()


def test_unusable_paths_fail_before_any_work(tmp_path):
    (tmp_path / "FILE").write_text("x\n")
    (tmp_path / "README").write_text("mine\n")
    before = snapshot(tmp_path)
    cases = {"/": "root of the file system", ".": "current folder", "FILE/sub": "is a file, not a folder",
             "a" * 300: "300 characters", f"new/{'b' * 300}/pkg": "300 characters"}
    for out, needle in cases.items():
        assert_user_error(build(out, cwd=tmp_path), needle)
        assert snapshot(tmp_path) == before, out
        assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE", "README"], out


@pytest.mark.parametrize("sig, word", [(signal.SIGTERM, "terminated"), (signal.SIGINT, "interrupted")])
def test_signal_removes_the_partial_package(tmp_path, sig, word):
    """SIGTERM, or SIGINT sent to the main process only, during a build: its .NAME.partial-* folder is removed
    and the exit is one line."""
    out = tmp_path / "mlp"
    p = subprocess.Popen([sys.executable, "-m", "edgepack.cli", "build", str(MLP), "--dim", "batch=1:4",
                          "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and not list(tmp_path.glob(".mlp.partial-*")):  # the stage folder: compiling now
        time.sleep(0.01)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err.strip() == f"edgepack: {word}"
    assert list(tmp_path.iterdir()) == []
