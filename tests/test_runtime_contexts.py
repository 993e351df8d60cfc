"""Contexts are independent: two contexts of one package, and contexts of two packages in one program, run at
once from their own threads (tests/c/two_contexts.c), under ThreadSanitizer. Every run must match its
context's reference run bit for bit, and the reference runs must match onnxruntime."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edgepack.check import max_rel_error
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
TSAN = "-fsanitize=thread -g -O1"


@pytest.fixture(scope="module")
def mlp_bundle(build_cache):
    ex = EXAMPLES["mlp"]
    return build_cache(ex.path, dict(ex.dims), "mlp")


def _tsan_copy(bundle, dst: Path) -> Path:
    """The package rebuilt with ThreadSanitizer (the LLVM kernel object stays as it is)."""
    shutil.copytree(bundle.path, dst)
    subprocess.run(["make", "-s", "-C", str(dst), "clean"], check=True)
    r = subprocess.run(["make", "-s", "-j2", "-C", str(dst), f"lib{bundle.name}.a", f"EXTRA_CFLAGS={TSAN}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dst


def _glue(dst: Path, letter: str, name: str) -> None:
    P, M = f"PKG_{letter.upper()}", name.upper()
    (dst / f"pkg_{letter}.h").write_text(
        f'#include "{name}.h"\n#define {P} ep_{name}_package\n#define {P}_CTX ep_{name}_ctx_t\n'
        f"#define {P}_ARENA EP_{M}_ARENA_BYTES\n#define {P}_IO EP_{M}_IO_BYTES\n")


def _program(tmp_path: Path, bundles: list) -> Path:
    pkgs = [_tsan_copy(b, tmp_path / f"pkg{i}") for i, b in enumerate(bundles)]
    args = ["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", *TSAN.split(), f"-I{tmp_path}",
            f"-I{pkgs[0] / 'runtime'}", f"-I{pkgs[0] / 'programs'}"]
    for letter, b, p in zip("ab", bundles, pkgs):
        _glue(tmp_path, letter, b.name)
        args.append(f"-I{p / 'include'}")
    if len(bundles) > 1:
        args.append("-DHAVE_PKG_B")
    exe = tmp_path / "two_contexts"
    args += [str(HERE / "c" / "two_contexts.c"), str(pkgs[0] / "programs" / "ep_npy.c"),
             *[str(p / f"lib{b.name}.a") for b, p in zip(bundles, pkgs)], "-lm", "-lpthread", "-o", str(exe)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _run(exe: Path, out: Path, iters: int, jobs: list[str]) -> str:
    out.mkdir()
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    r = subprocess.run([str(exe), str(out), str(iters), *jobs], capture_output=True, text=True, env=env, timeout=600)
    assert "ThreadSanitizer" not in r.stderr, r.stderr[-4000:]
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    return r.stdout


def _check_references(out: Path, models: list[Path]) -> None:
    """Each job's reference run against onnxruntime on the same inputs."""
    for j, model in enumerate(models):
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        feeds = {i.name: np.load(out / f"job{j}_in{k}.npy") for k, i in enumerate(sess.get_inputs())}
        for k, ref in enumerate(sess.run(None, feeds)):
            assert max_rel_error(np.load(out / f"job{j}_out{k}.npy"), ref) < 1e-4, (j, k)


@pytest.mark.parametrize("jobs", [["a:1:33", "a:1:100"], ["a:2:33", "a:1:100"], ["a:2:256", "a:2:7"]],
                         ids=["1+1-threads", "2+1-threads", "2+2-threads"])
def test_two_contexts_of_one_package_on_two_threads(encoder_bundle, tmp_path, jobs):
    exe = _program(tmp_path, [encoder_bundle])
    out = _run(exe, tmp_path / "out", 1000, jobs)
    assert out.count(" 0 failed, 0 differ") == 2, out
    _check_references(tmp_path / "out", [EXAMPLES["encoder"].path] * 2)


def test_two_packages_in_one_program(encoder_bundle, mlp_bundle, tmp_path):
    exe = _program(tmp_path, [encoder_bundle, mlp_bundle])
    out = _run(exe, tmp_path / "out", 1000, ["a:2:40", "b:1:9", "b:2:64"])
    assert out.count(" 0 failed, 0 differ") == 3, out
    _check_references(tmp_path / "out", [EXAMPLES["encoder"].path] + [EXAMPLES["mlp"].path] * 2)
