"""Shared fixtures: packages are built once per test session and reused by every test that needs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgepack.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
EXPORTS = ROOT / "tests" / "data" / "exports"

# committed PyTorch exports (tests/data/exports/README.md) and the ranges they are built with
EXPORT_DIMS = {name: {d: tuple(r) for d, r in dims.items()}
               for name, dims in json.loads((EXPORTS / "dims.json").read_text()).items()}


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory):
    """build(model_path, dims, name) -> Bundle, memoised for the session."""
    from edgepack.pipeline import build_package

    root = tmp_path_factory.mktemp("bundles")
    cache: dict = {}

    def build(model: Path, dims: dict, name: str):
        key = (str(model), tuple(sorted(dims.items())), name)
        if key not in cache:
            cache[key] = build_package(model, "host", dims, root / name, name=name).bundle
        return cache[key]

    return build


@pytest.fixture(scope="session")
def encoder_bundle(build_cache):
    ex = EXAMPLES["encoder"]
    return build_cache(ex.path, dict(ex.dims), "encoder")


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real `edgepack` entry point in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "edgepack.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def sizes_for(lo: int, hi: int) -> list[int]:
    """min, max, 1 (if in range), an odd size and a prime size inside the range."""
    primes = [p for p in (2, 3, 5, 7, 11, 13, 17, 29, 31, 61, 127, 251) if lo <= p <= hi]
    odd = next((v for v in ((lo + hi) // 2 | 1, lo + 2, hi - 1) if lo <= v <= hi and v % 2), lo)
    out = [lo, hi, odd] + ([1] if lo <= 1 <= hi else []) + primes[-1:] + primes[:1]
    return sorted(set(out))


def assert_predicate_free_split(impl) -> None:
    """A split dense kernel: a row-tiled main variant and a row-1 edge, both vectorized with no T.where."""
    main, edge = impl.variants
    assert main.tile > 1 and main.extra_scalar
    for v in (main, edge):
        text = v.func.script()
        assert "T.where" not in text, f"{v.symbol} has a bounds-check predicate"
        assert "T.vectorized" in text


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def pytest_addoption(parser):
    """Hardware-in-the-loop selection (`pytest -m hil`): the stand-ins by default, a real board when named."""
    g = parser.getgroup("edgepack boards")
    g.addoption("--board", action="append", default=[], help="board(s) for hil tests (default: the stand-ins)")
    g.addoption("--board-host", help="address of a real Linux board (SSH)")
    g.addoption("--board-user", help="SSH user on the real board")
    g.addoption("--board-key", help="SSH private key for the real board")
    g.addoption("--board-port", type=int, default=22, help="SSH port of the real board")
    g.addoption("--board-serial", help="serial port of a real microcontroller board, e.g. /dev/ttyACM0")
