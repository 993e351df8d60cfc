"""The C runtime on its own: ABI layout against TVM's real headers, the C API's error codes, and a
package built and run with AddressSanitizer + UndefinedBehaviorSanitizer."""

from __future__ import annotations

import os
import re
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
TEMPLATES = HERE.parent / "templates"
ENCODER = EXAMPLES["encoder"].path


def _cc(args: list[str], cwd: Path) -> None:
    r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_abi_layout_matches_tvm_headers(tmp_path):
    import tvm_ffi.libinfo

    tvm_inc = tvm_ffi.libinfo.include_paths()
    _cc([str(HERE / "c" / "abi_layout.c"), f"-I{TEMPLATES / 'runtime'}", "-o", "ours"], tmp_path)
    _cc([str(HERE / "c" / "abi_layout.c"), "-DUSE_TVM_HEADERS", *[f"-I{p}" for p in tvm_inc], "-o", "theirs"], tmp_path)
    ours = subprocess.run([str(tmp_path / "ours")], capture_output=True, text=True, check=True).stdout
    theirs = subprocess.run([str(tmp_path / "theirs")], capture_output=True, text=True, check=True).stdout
    assert ours == theirs and "DLTensor 48" in ours


def test_c_api_error_codes(encoder_bundle, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(encoder_bundle.path, pkg)
    lib = pkg / f"lib{encoder_bundle.name}.a"
    _cc([str(HERE / "c" / "api_errors.c"), "-Iinclude", "-Iruntime", "-Iprograms", str(lib), "-lm", "-lpthread",
         "-o", "api_errors"], pkg)
    r = subprocess.run([str(pkg / "api_errors")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "run: dim above its range" in r.stdout and "UNEXPECTED" not in r.stdout
    assert "dim seq = 257 is outside its declared range 1..256" in r.stdout
    # the runtime's reason reaches the context's message (it was written to a global nobody read)
    assert re.search(r"message: kernel \w+ failed: kernel workspace exhausted; bytes asked for: [1-9]", r.stdout), r.stdout
    for check in ("output_shape: NULL dims", "output_shape: dim above its range", "run after deinit"):
        assert check in r.stdout


def test_public_header_beside_dlpack_and_tvm_headers(encoder_bundle, tmp_path):
    """A user's program that includes the real dlpack.h and tvm/ffi/c_api.h as well as the package's header."""
    import tvm_ffi.libinfo

    (tmp_path / "user.c").write_text(
        "#include <dlpack/dlpack.h>\n#include <tvm/ffi/c_api.h>\n#include \"encoder.h\"\n"
        "static ep_encoder_ctx_t ctx;\n"
        "int main(void) { DLTensor* t = (DLTensor*)&ctx.t[0]; return (int)sizeof *t != (int)sizeof ctx.t[0]; }\n")
    _cc(["user.c", f"-I{encoder_bundle.path / 'include'}", f"-I{encoder_bundle.path / 'runtime'}",
         *[f"-I{p}" for p in tvm_ffi.libinfo.include_paths()], "-fsyntax-only"], tmp_path)


def test_programs_check_the_package_sizes_when_built(encoder_bundle, tmp_path):
    """run's arrays are sized from the package; a tensor rank the .npy code cannot hold stops the build."""
    pkg = tmp_path / "pkg"
    shutil.copytree(encoder_bundle.path, pkg)
    glue = pkg / "programs" / "ep_package.h"
    glue.write_text(glue.read_text() + "#undef EP_PACKAGE_MAX_IO_RANK\n#define EP_PACKAGE_MAX_IO_RANK 9\n")
    r = subprocess.run(["gcc", "-std=c11", "-Iinclude", "-Iruntime", "-Iprograms", "-fsyntax-only", "programs/ep_run.c"],
                       cwd=pkg, capture_output=True, text=True)
    assert r.returncode != 0 and "a rank .npy I/O cannot hold" in r.stderr, r.stderr


def test_package_under_sanitizers(encoder_bundle, tmp_path):
    pkg = tmp_path / "asan"
    shutil.copytree(encoder_bundle.path, pkg)
    flags = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    subprocess.run(["make", "-s", "-C", str(pkg), "clean"], check=True)
    r = subprocess.run(["make", "-s", "-j2", "-C", str(pkg), f"EXTRA_CFLAGS={flags}", f"EXTRA_LDFLAGS={flags}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sess = ort.InferenceSession(str(ENCODER))
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    for seq in (1, 7, 256):
        x = np.random.default_rng(seq).standard_normal((1, seq, 64)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        out = tmp_path / f"o{seq}"
        out.mkdir()
        r = subprocess.run([str(pkg / "ep"), "run", str(out), str(tmp_path / "x.npy")], capture_output=True, text=True,
                           env=env)
        assert r.returncode == 0 and "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
        assert max_rel_error(np.load(out / "0_y.npy"), sess.run(None, {"x": x})[0]) < 1e-4


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_give_same_answer(encoder_bundle, tmp_path, threads):
    x = np.random.default_rng(0).standard_normal((1, 77, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    subprocess.run([str(encoder_bundle.path / "ep"), "run", "--threads", str(threads), str(tmp_path), str(tmp_path / "x.npy")],
                   check=True)
    ref = ort.InferenceSession(str(ENCODER)).run(None, {"x": x})[0]
    assert max_rel_error(np.load(tmp_path / "0_y.npy"), ref) < 1e-4


def test_single_threaded_platform(encoder_bundle, tmp_path):
    """The same package on ep_platform_single.c (boards without threads): parallel loops run inline."""
    pkg = tmp_path / "single"
    shutil.copytree(encoder_bundle.path, pkg)
    shutil.copy2(TEMPLATES / "runtime" / "ep_platform_single.c", pkg / "runtime")
    # the board's timer: here the POSIX clock stands in for a SysTick counter
    (pkg / "runtime" / "board_time.c").write_text(
        "#define _POSIX_C_SOURCE 200809L\n#include <stdint.h>\n#include <time.h>\n"
        "uint64_t ep_board_time_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);"
        " return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }\n")
    runtime = "runtime/ep_runtime.c runtime/ep_platform_single.c runtime/board_time.c"
    subprocess.run(["make", "-s", "-C", str(pkg), "clean"], check=True)
    r = subprocess.run(["make", "-s", "-j2", "-C", str(pkg), f"RUNTIME={runtime}", "LDLIBS=-lm"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "pthread" not in subprocess.run(["nm", str(pkg / "ep")], capture_output=True, text=True).stdout
    x = np.random.default_rng(5).standard_normal((1, 37, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    subprocess.run([str(pkg / "ep"), "run", str(tmp_path), str(tmp_path / "x.npy")], check=True)
    ref = ort.InferenceSession(str(ENCODER)).run(None, {"x": x})[0]
    assert max_rel_error(np.load(tmp_path / "0_y.npy"), ref) < 1e-4
