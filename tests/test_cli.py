"""The commands a user types, end to end: build (default example), run, inspect, boards."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_cli

from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e


def test_default_build_and_run(tmp_path):
    r = run_cli("build", "-o", str(tmp_path / "enc"))
    assert r.returncode == 0, r.stderr
    assert "checked against onnxruntime at {'seq': 1}" in r.stdout
    for line in r.stdout.splitlines():
        if "max relative error" in line:
            assert float(line.rsplit(" ", 1)[1]) < 1e-4, line
    m = json.loads((tmp_path / "enc" / "manifest.json").read_text())
    assert m["board"]["name"] == "host" and m["dims"][0]["name"] == "seq"

    x = np.random.default_rng(3).standard_normal((1, 11, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run_cli("run", str(tmp_path / "enc"), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "out" / "0_y.npy")
    ref = ort.InferenceSession(str(EXAMPLES["encoder"].path)).run(None, {"x": x})[0]
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-4


def test_inspect_lists_dims_and_ops():
    r = run_cli("inspect", str(EXAMPLES["encoder"].path))
    assert r.returncode == 0, r.stderr
    assert "dynamic dims: seq" in r.stdout and "--dim seq=MIN:MAX" in r.stdout
    assert "LayerNormalization" in r.stdout and "all operators are supported" in r.stdout


def test_boards_lists_host():
    r = run_cli("boards")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("host ") or any(ln.startswith("host ") for ln in r.stdout.splitlines())
