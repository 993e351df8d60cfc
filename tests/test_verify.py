"""The package carries test cases (inputs and onnxruntime's outputs at the range's min, max and an odd size),
and `edgepack verify` runs them on the board: exit 0 when they match, 1 (one DIFF line per case) when not."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli

from edgepack.check import TEST_DIR
from edgepack.codegen.bundle import sha256
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e


def tamper_expected_output(pkg, case: int = 1) -> None:
    """Make one expected output wrong (and the manifest agree), as if the board computed something else."""
    spec = json.loads((pkg / TEST_DIR / "cases.json").read_text())
    f = pkg / TEST_DIR / spec["cases"][case]["outputs"][0]
    a = np.load(f)
    a.flat[0] += 1.0
    np.save(f, a)
    m = json.loads((pkg / "manifest.json").read_text())
    m["files"][f"{TEST_DIR}/{f.name}"] = sha256(f)
    (pkg / "manifest.json").write_text(json.dumps(m, indent=2))


def test_build_keeps_cases_at_min_max_and_odd(build_cache):
    ex = EXAMPLES["mlp"]
    bundle = build_cache(ex.path, dict(ex.dims), "mlp")
    spec = json.loads((bundle.path / TEST_DIR / "cases.json").read_text())
    (lo, hi), = ex.dims.values()
    assert [c["dims"] for c in spec["cases"]] == [{"batch": lo}, {"batch": hi}, {"batch": (lo + hi) // 2 | 1}]
    assert bundle.manifest["test_cases"] == 3
    assert all(f"{TEST_DIR}/{f}" in bundle.manifest["files"] for c in spec["cases"] for f in c["inputs"] + c["outputs"])


def test_verify_passes_then_catches_a_wrong_output(build_cache, tmp_path):
    import shutil

    ex = EXAMPLES["mlp"]
    pkg = tmp_path / "mlp"
    shutil.copytree(build_cache(ex.path, dict(ex.dims), "mlp").path, pkg)
    r = run_cli("verify", str(pkg))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ok  ") == 3 and "every test case matches onnxruntime" in r.stdout
    tamper_expected_output(pkg)
    r = run_cli("verify", str(pkg))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count("ok  ") == 2 and r.stdout.count("DIFF") == 1 and "wrong outputs" in r.stdout
