"""The tuner end to end with real parts: a TVM RPC tracker and server on loopback, kernels built and timed on
them, the SQLite database, the generated dispatcher, and packages checked against onnxruntime.
Budgets are a few trials so CI stays fast; tuning quality is measured in benchmarks/, not here."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgepack.board import load_board
from edgepack.check import check_against_onnxruntime
from edgepack.errors import EdgepackError
from edgepack.examples import EXAMPLES
from edgepack.pipeline import build_package, lower_model, prepare
from edgepack.tune.db import TuningDB
from edgepack.errors import RPCUnavailableError
from edgepack.tune.farm import LocalRPC, group_alive
from edgepack.tune.rpc_measurer import RPCMeasurer
from edgepack.tune.tasks import extract_tasks
from edgepack.tune.tuner import TuneOptions, Tuner, tune_model

from conftest import run_cli, sizes_for

pytestmark = pytest.mark.e2e

MLP = EXAMPLES["mlp"]
SMALL = dict(trials=12, samples="3", max_kernels=2, batch=4, progress=False)


@pytest.fixture(scope="module")
def host():
    return load_board("host")


@pytest.fixture(scope="module")
def farm(host):
    with LocalRPC(key=host.rpc_key, servers=1) as f:
        yield f


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT id, candidate_id, shape, median_s, created, run_id FROM measurements ORDER BY id").fetchall()


def _rows_if_any(db: Path) -> list[tuple]:
    """The measurements so far; none while the tuner has not yet created the database or its tables."""
    try:
        return _rows(db) if db.exists() else []
    except sqlite3.OperationalError:
        return []


def test_tuned_package_matches_onnxruntime(tmp_path, host, farm):
    db = tmp_path / "t.db"
    with RPCMeasurer.local(host, farm) as m:
        rep = tune_model(MLP.path, host, dict(MLP.dims), db, m, TuneOptions(**SMALL))
    assert rep.measured > 0 and rep.failed == 0 and rep.tasks
    for t in rep.tasks:
        assert 1 <= len(t.mains) <= 2 and t.edge.rows == 1
        assert sorted(set(t.assign)) == list(range(len(t.mains)))  # every chosen kernel serves a sample
        assert all(m_ > 0 for m_ in t.measured_s)
        # the verified choice is the fastest of the chosen set on each sample (measured, main + edge)
        assert all(abs(m_ - b) <= 1e-12 or m_ >= b for m_, b in zip(t.measured_s, t.best_trial_s))
    r = build_package(MLP.path, host, dict(MLP.dims), tmp_path / "pkg", name="mlp", db=db)
    man = r.bundle.manifest
    assert man["tuned"] and set(man["tuning"]["kernels"]) == {t.task for t in rep.tasks}
    for t in rep.tasks:  # predicted against measured, for bench to show
        v = man["tuning"]["verification"][t.task]
        assert v["measured_s"] == t.measured_s and v["predicted_s"] == t.predicted_s and v["cost_model"] == "reg"
    dispatch_c = (r.bundle.path / "src" / "mlp_dispatch.c").read_text()
    assert "Tuned dispatcher" in dispatch_c and "keys[" in dispatch_c
    lo, hi = MLP.dims["batch"]
    for size, err in check_against_onnxruntime(r.bundle, MLP.path, [{"batch": b} for b in sizes_for(lo, hi)]):
        assert err < 1e-4, size


def test_tuned_convolutions_match_onnxruntime(tmp_path, host, farm):
    """conv2d with a dynamic batch: one micro-kernel over whole images serves every batch size."""
    cnn, db = EXAMPLES["cnn"], tmp_path / "c.db"
    with RPCMeasurer.local(host, farm) as m:
        rep = tune_model(cnn.path, host, dict(cnn.dims), db, m, TuneOptions(trials=8, samples="2", progress=False))
    convs = [t for t in rep.tasks if t.task.startswith("fused_conv2d")]
    assert len(convs) == 2 and all(len(t.mains) == 1 and t.edge is None for t in convs)
    r = build_package(cnn.path, host, dict(cnn.dims), tmp_path / "pkg", name="cnn", db=db)
    assert {t.task for t in convs} <= set(r.bundle.manifest["tuning"]["kernels"])
    lo, hi = cnn.dims["batch"]
    for size, err in check_against_onnxruntime(r.bundle, cnn.path, [{"batch": b} for b in sizes_for(lo, hi)]):
        assert err < 1e-4, size


def test_build_refuses_a_missing_database(tmp_path, host):
    with pytest.raises(EdgepackError, match="does not exist"):
        build_package(MLP.path, host, dict(MLP.dims), tmp_path / "p", db=tmp_path / "none.db")


class _KillServerAfterFirstBatch:
    """A real Measurer whose server is killed (SIGKILL, by process group) once the first batch is measured."""

    def __init__(self, inner: RPCMeasurer, farm: LocalRPC):
        self.inner, self.farm, self.batches = inner, farm, 0

    def measure_batch(self, inputs, on_result=None):
        if self.batches == 1:
            self.farm.kill_server(0)
        self.batches += 1
        return self.inner.measure_batch(inputs, on_result)


def test_dead_server_stops_cleanly_and_the_run_resumes(tmp_path, host, farm):
    db = tmp_path / "t.db"
    model, dims = prepare(MLP.path, dict(MLP.dims))
    tasks = extract_tasks(lower_model("mlp", model, dims), dims)
    with LocalRPC(key="dying", servers=1) as lonely, RPCMeasurer.local(host, lonely, wait_s=3) as m:
        killer = _KillServerAfterFirstBatch(m, lonely)
        with TuningDB(db) as d, pytest.raises(RPCUnavailableError, match="RPC|server"):
            Tuner(tasks, host, d, killer, TuneOptions(**SMALL), "mlp").run()
    kept = _rows(db)
    assert len(kept) == SMALL["batch"]  # the first batch landed; the one in flight is lost, nothing else
    with RPCMeasurer.local(host, farm) as m, TuningDB(db) as d:
        t = Tuner(tasks, host, d, m, TuneOptions(**SMALL), "mlp")
        assert t.reused == len(kept)
        rep = t.run()
    after = _rows(db)
    assert after[:len(kept)] == kept  # nothing lost or rewritten
    assert len(after) - len(kept) == rep.measured  # nothing measured twice (the DB would have ignored a repeat)


def _tracker_port(text: str) -> int:
    return int(re.search(r"tracker 127\.0\.0\.1:(\d+)", text).group(1))


def _pids_with(arg: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if arg in (p / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def test_sigkill_mid_run_loses_at_most_the_batch_in_flight(tmp_path):
    db = tmp_path / "t.db"
    args = ["tune", str(MLP.path), "--dim", "batch=1:64", "--trials", "12", "--samples", "3", "--max-kernels", "2",
            "--batch", "4", "--db", str(db), "--no-progress"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "edgepack.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        first = p.stdout.readline()
        port = _tracker_port(first)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_rows_if_any(db)) < 4:
            time.sleep(0.2)
        # the farm's process groups: the tracker and the servers registered with it (their forked workers share them)
        farm = _pids_with(f"--port {port} ") + _pids_with(f"--tracker 127.0.0.1:{port} ")
        assert len(farm) >= 2
        os.kill(p.pid, signal.SIGKILL)  # the tuner alone, as `kill -9` would
        p.wait(30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    kept = _rows(db)
    assert len(kept) >= 4 and len(kept) % 4 == 0  # whole batches only
    deadline = time.monotonic() + 10
    while any(group_alive(g) for g in farm) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(group_alive(g) for g in farm), "the killed tuner left RPC processes behind"
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    m = re.search(r"(\d+) measurements \((\d+) failed\), (\d+) reused", r.stdout)
    measured, reused = int(m.group(1)), int(m.group(3))
    after = _rows(db)
    assert reused == len(kept) and after[:len(kept)] == kept
    assert len(after) - len(kept) == measured


def test_cli_errors(tmp_path):
    r = run_cli("tune", str(MLP.path), "--dim", "batch=1:64", "--trials", "0", "--db", str(tmp_path / "x.db"))
    assert r.returncode == 2 and "--trials" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("tune", str(MLP.path), "--dim", "batch=1:64", "--db", str(tmp_path / "x.db"), "--tracker", "nocolon")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    r = run_cli("tune", str(MLP.path), "--dim", "batch=1:64", "--samples", str(tmp_path / "missing.json"),
                "--db", str(tmp_path / "x.db"), "--tracker", "127.0.0.1:1")
    assert r.returncode == 2 and "--samples" in r.stderr and len(r.stderr.strip().splitlines()) == 1
