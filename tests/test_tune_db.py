"""The tuning database: get-or-create workloads, atomic batches, resume, reuse across models, schema version,
and a real SIGKILL in the middle of a write."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from edgepack.errors import EdgepackError
from edgepack.tune.db import SCHEMA_VERSION, TuningDB, workload_key

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DENSE = dict(op="dense", static_dims={"K": 768, "N": 768}, dtype="float32", board="rpi4")


@pytest.fixture
def db(tmp_path):
    with TuningDB(tmp_path / "tune.db") as d:
        yield d


def row(tile, m, median=1e-3, error=None):
    return ({"tile_m": tile, "tile_n": 16}, {"M": m}, median, [median or 0.0] * 3, error)


def test_schema_and_modes(db, tmp_path):
    c = sqlite3.connect(tmp_path / "tune.db")
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"workloads", "candidates", "measurements", "runs"} <= tables
    c.close()
    assert db.integrity_check() == []


def test_workload_get_or_create_and_reuse_across_models(db):
    a = db.workload(**DENSE, dynamic_dims={"M": (1, 128)}, tvm_version="0.27")
    db.add_batch(a, [row(8, 16), row(16, 16, 2e-3)])
    # a second model with the same operator, another range: same workload, same records, range widened
    b = db.workload(**DENSE, dynamic_dims={"M": (1, 256)})
    assert b.id == a.id and b.key == a.key == workload_key("dense", {"N": 768, "K": 768}, "float32", "rpi4")
    assert b.dynamic_dims == {"M": [1, 256]} and b.tvm_version == "0.27"
    assert [r.median_s for r in db.measured(b)] == [1e-3, 2e-3]
    assert db.has(b, {"tile_n": 16, "tile_m": 8}, {"M": 16})  # key order of the config does not matter
    assert db.has(b, {"tile_n": np.int64(16), "tile_m": 8}, {"M": np.int32(16)})  # nor numpy ints
    # any of op, static dims, dtype, board makes another workload
    others = [db.workload(**{**DENSE, "board": "host"}), db.workload(**{**DENSE, "dtype": "float16"}),
              db.workload(**{**DENSE, "static_dims": {"K": 768, "N": 3072}}), db.workload(**{**DENSE, "op": "bmm"})]
    assert len({w.id for w in others} | {a.id}) == 5
    assert all(db.measured(w) == [] for w in others)
    assert len(db.workloads()) == 5


def test_add_batch_has_measured_best(db):
    w = db.workload(**DENSE)
    n = db.add_batch(w, [row(8, 16, 3e-3), row(16, 16, 1e-3), row(32, 16, None, "compile failed"), row(8, 32, 5e-3)])
    assert n == 4
    assert db.has(w, {"tile_m": 32, "tile_n": 16}, {"M": 16})  # a failure counts as measured: not retried
    assert not db.has(w, {"tile_m": 32, "tile_n": 16}, {"M": 32})
    recs = db.measured(w)
    assert [(r.config["tile_m"], r.shape["M"], r.ok) for r in recs] == [(8, 16, True), (16, 16, True),
                                                                       (32, 16, False), (8, 32, True)]
    assert recs[2].error == "compile failed" and recs[2].median_s is None
    assert len(db.measured(w, {"M": 16})) == 3
    assert db.best(w, {"M": 16}).config == {"tile_m": 16, "tile_n": 16}
    assert db.best(w, {"M": 64}) is None
    assert db.candidates(w) == [{"tile_m": t, "tile_n": 16} for t in (8, 16, 32)]
    cfgs, mat = db.latency_matrix(w, [{"M": 16}, {"M": 32}, {"M": 64}])
    assert cfgs == db.candidates(w)
    np.testing.assert_array_equal(mat, [[3e-3, 1e-3, np.inf], [5e-3, np.inf, np.inf], [np.inf] * 3])


def test_duplicates_keep_first_unless_replace(db):
    w = db.workload(**DENSE)
    assert db.add_batch(w, [row(8, 16, None, "timeout")]) == 1
    assert db.add_batch(w, [row(8, 16, 1e-3), row(8, 16, 2e-3)]) == 0  # resumed run: nothing measured twice
    assert db.measured(w)[0].error == "timeout"
    assert db.add_batch(w, [row(8, 16, 1e-3)], replace=True) == 1
    assert [r.median_s for r in db.measured(w)] == [1e-3]


def test_batch_is_all_or_nothing(db):
    w = db.workload(**DENSE)
    db.add_batch(w, [row(8, 1)])
    bad = [row(4, 2), row(16, 2), ({"tile_m": 99}, {"M": 2}, float("nan"), [], None)]
    with pytest.raises(EdgepackError, match="row 2"):
        db.add_batch(w, bad)

    def interrupted():
        yield row(4, 3)
        yield row(64, 3)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        db.add_batch(w, interrupted())
    assert len(db.measured(w)) == 1
    assert db.candidates(w) == [{"tile_m": 8, "tile_n": 16}]  # no candidate leaked from the failed batches
    assert db.integrity_check() == []


def test_runs_and_reopen(tmp_path):
    path = tmp_path / "t.db"
    with TuningDB(path) as d:
        run = d.start_run("encoder", "rpi4", trials=200)
        w = d.workload(**DENSE)
        d.add_batch(w, [row(8, 4)], run=run)
        d.finish_run(run, summary={"cost_model": "rank", "holdout": {"tau": 0.9}})
    with TuningDB(path) as d:
        (r,) = d.runs()
        assert r["model"] == "encoder" and r["trials"] == 200 and r["finished"] >= r["started"]
        assert r["summary"] == {"cost_model": "rank", "holdout": {"tau": 0.9}}
        assert d.measured(d.workload(**DENSE))[0].run_id == run


def test_schema_version_checked(tmp_path):
    path = tmp_path / "t.db"
    TuningDB(path).close()
    c = sqlite3.connect(path)
    c.execute("PRAGMA user_version = 99")
    c.close()
    with pytest.raises(EdgepackError, match="schema version 99.*newer"):
        TuningDB(path)

    other = tmp_path / "other.db"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t (x)")
    c.close()
    with pytest.raises(EdgepackError, match="not an edgepack tuning database"):
        TuningDB(other)

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(EdgepackError, match="cannot be opened"):
        TuningDB(junk)
    with pytest.raises(EdgepackError, match="does not exist"):
        TuningDB(tmp_path / "no" / "such" / "dir.db")


# -- a real SIGKILL in the middle of add_batch -----------------------------------------------------------
WRITER = textwrap.dedent("""
    import random, sys, time
    from edgepack.tune.db import TuningDB

    path, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    db = TuningDB(path)
    db._conn.execute("PRAGMA cache_size = -256")  # 256 KiB: a large batch spills uncommitted pages into the WAL
    db._conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL only grows: its size shows those pages
    w = db.workload("dense", {"K": 768, "N": 768}, "float32", "host", {"M": [1, 4096]})
    done = {r.shape["b"] for r in db.measured(w)}
    b = max(done, default=-1) + 1
    wal = path + "-wal"
    import os

    def rows(b, n, stall_at=None):
        for i in range(n):
            if i == stall_at:
                print("stalled", b, os.path.getsize(wal), flush=True)
                time.sleep(600)  # parent kills us here, inside the open transaction
            shape = {"b": b, "i": i, "n": n}
            samples = [rng.random() for _ in range(64)]
            yield ({"tile": i % 7, "vec": 4}, shape, samples[0], samples, None)

    while True:
        n = 4000 if mode == "stall" and b == 2 else rng.randint(1, 400)
        print("begin", b, n, flush=True)
        db.add_batch(w, rows(b, n, stall_at=3000 if mode == "stall" and b == 2 else None))
        print("committed", b, n, os.path.getsize(wal), flush=True)
        b += 1
""")


def _spawn(path: Path, mode: str, seed: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode, str(seed)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _check_after_kill(path: Path, committed: dict[int, int]) -> dict[int, int]:
    """Reopen, check SQLite integrity, that every batch in the file is complete (all its n rows), that the
    batches form a prefix 0..B-1 and that every batch the writer saw committed survived."""
    with TuningDB(path) as d:
        assert d.integrity_check() == []
        w = d.workload("dense", {"K": 768, "N": 768}, "float32", "host")
        recs = d.measured(w)
    seen: dict[int, set[int]] = {}
    size: dict[int, int] = {}
    for r in recs:
        b, i, n = r.shape["b"], r.shape["i"], r.shape["n"]
        assert size.setdefault(b, n) == n
        assert i not in seen.setdefault(b, set())
        seen[b].add(i)
        assert r.ok and len(r.samples) == 64
    for b, ids in seen.items():
        assert ids == set(range(size[b])), f"batch {b} is partial: {len(ids)} of {size[b]} rows"
    assert sorted(seen) == list(range(len(seen)))
    for b, n in committed.items():
        assert size.get(b) == n, f"batch {b} was committed but is missing"
    return size


def test_sigkill_while_stalled_inside_a_transaction(tmp_path):
    path = tmp_path / "kill.db"
    p = _spawn(path, "stall", 1)
    committed, wal_committed = {}, 0
    try:
        for line in p.stdout:
            parts = line.split()
            if parts[0] == "committed":
                committed[int(parts[1])] = int(parts[2])
                wal_committed = int(parts[3])
            elif parts[0] == "stalled":
                wal_stalled = int(parts[2])
                break
        else:
            pytest.fail(f"writer ended early: {p.stderr.read()}")
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -signal.SIGKILL
    assert sorted(committed) == [0, 1]
    assert wal_stalled > wal_committed  # uncommitted pages of batch 2 were on disk when it died
    size = _check_after_kill(path, committed)
    assert 2 not in size


def test_sigkill_at_random_times_while_writing_in_a_loop(tmp_path):
    path = tmp_path / "loop.db"
    rng = random.Random(7)
    committed: dict[int, int] = {}
    in_flight_kills = 0
    for rnd in range(4):
        p = _spawn(path, "loop", rnd)
        begun = None
        try:
            n_new = 0
            for line in p.stdout:
                parts = line.split()
                if parts[0] == "begin":
                    begun = int(parts[1])
                elif parts[0] == "committed":
                    committed[int(parts[1])] = int(parts[2])
                    n_new += 1
                    if n_new == 3:
                        break
            else:
                pytest.fail(f"writer ended early: {p.stderr.read()}")
            time.sleep(rng.uniform(0.0, 0.08))
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            rest = p.stdout.read().split("\n")  # lines printed before the kill
            for line in rest:
                parts = line.split()
                if parts and parts[0] == "begin":
                    begun = int(parts[1])
                elif parts and parts[0] == "committed":
                    committed[int(parts[1])] = int(parts[2])
        finally:
            p.kill()
            p.wait()
        _check_after_kill(path, committed)
        if begun is not None and begun not in committed:
            in_flight_kills += 1  # killed inside add_batch (or between its commit and the print): checked above
    # the batches dominate the writer's time: most kills land inside one
    assert in_flight_kills >= 1
    print(f"{len(committed)} batches committed over 4 kills, {in_flight_kills} kills mid-batch")


def test_resume_measures_nothing_twice(tmp_path):
    path = tmp_path / "resume.db"
    shapes = [{"M": m} for m in (1, 8, 64)]
    configs = [{"tile_m": t} for t in (4, 8, 16, 32)]
    measured = []

    def tune(db, budget):
        w = db.workload(**DENSE)
        todo = [(c, s) for c in configs for s in shapes if not db.has(w, c, s)][:budget]
        measured.extend(todo)
        db.add_batch(w, [(c, s, 1e-3 * c["tile_m"] / s["M"], [1e-3], None) for c, s in todo])

    with TuningDB(path) as d:
        tune(d, 5)
    with TuningDB(path) as d:
        tune(d, 100)
        assert len(d.measured(d.workload(**DENSE))) == 12
    assert len(measured) == 12 and len({json.dumps(x, sort_keys=True) for x in measured}) == 12


NOW = {"pack": True, "vectorize": True, "parallel": True, "threads": 2, "schedule": 2, "tvm": "0.27.0"}


def test_measurements_of_other_kernels_are_never_served(db):
    """Packing, vectorize, parallel, the measurements' threads, the schedule code's version and TVM's are part of
    the workload: a database filled before weight packing (or with another TVM, or measured on one thread) is
    not reused, and its records stay for their settings."""
    old = {**NOW, "pack": False, "tvm": "0.26.0"}
    before = db.workload(**DENSE, dynamic_dims={"M": (1, 64)}, variant=old)
    db.add_batch(before, [row(8, 16)])
    for change in ({"pack": False}, {"vectorize": False}, {"parallel": False}, {"threads": 4}, {"schedule": 1},
                   {"tvm": "0.26.0"}):
        assert db.find_workload(**DENSE, variant={**NOW, **change}) is None, change
    now = db.workload(**DENSE, variant=NOW)
    assert now.id != before.id and db.measured(now) == [] and not db.has(now, {"tile_m": 8, "tile_n": 16}, {"M": 16})
    assert [r.median_s for r in db.measured(db.find_workload(**DENSE, variant=old))] == [1e-3]  # kept
    assert [w.id for w in db.other_variants(**DENSE, variant=NOW)] == [before.id]
    assert db.find_workload(**DENSE, variant={k: v for k, v in NOW.items() if k != "threads"}) is None
    note = db.stale_note([tuple(DENSE.values())], NOW)
    assert "\n" not in note and "pack False -> True" in note and "tvm 0.26.0 -> 0.27.0" in note
    assert db.stale_note([tuple(DENSE.values())], old) is None  # the NOW workload has no measurement yet


def test_version_2_database_upgraded_and_its_records_kept(tmp_path):
    """A database of schema version 2 (no kernel settings recorded): opened in place, its measurements kept but
    never served to a build with recorded settings, and said so in one line."""
    from edgepack.tune import db as dbmod

    path = tmp_path / "v2.db"
    c = sqlite3.connect(path)
    for stmt in (dbmod._SCHEMA + dbmod._SCHEMA_V2).split(";"):
        if stmt.strip():
            c.execute(stmt)
    c.execute("PRAGMA user_version = 2")
    c.execute("INSERT INTO workloads (key, op, static_dims, dynamic_dims, dtype, board, tvm_version, created) "
              "VALUES (?, 'dense', ?, '{}', 'float32', 'rpi4', '0.26.0', 0)",
              (workload_key(**DENSE), dbmod.canonical_json(DENSE["static_dims"])))
    c.execute("INSERT INTO candidates (workload_id, config) VALUES (1, '{}')")
    c.execute("INSERT INTO measurements (candidate_id, shape, median_s, samples, created) VALUES (1, '{\"M\":1}', "
              "0.5, '[]', 0)")
    c.commit()
    c.close()
    with TuningDB(path) as db:
        legacy = db.find_workload(**DENSE)
        assert legacy.variant == {} and [r.median_s for r in db.measured(legacy)] == [0.5]
        assert db.find_workload(**DENSE, variant=NOW) is None
        assert "made before edgepack recorded the kernel settings" in db.stale_note([tuple(DENSE.values())], NOW)
        assert db.integrity_check() == []
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4


def test_build_with_a_stale_database_says_so_and_builds_untuned(tmp_path):
    """`build --db` on a database whose only measurements were made with other kernels (here: TVM 0.26): one
    line on stderr, the package is built untuned, the records stay."""
    from conftest import run_cli

    from edgepack.examples import EXAMPLES
    from edgepack.pipeline import lower_model, prepare
    from edgepack.tune.tasks import extract_tasks

    mlp = EXAMPLES["mlp"]
    model, dims = prepare(mlp.path, dict(mlp.dims))
    tasks = extract_tasks(lower_model("mlp", model, dims), dims)
    with TuningDB(tmp_path / "old.db") as db:
        for t in tasks:
            wl = db.workload(t.kind, t.static_dims, t.dtype, "host", {"m": [t.op.lo, t.op.hi]},
                             variant={**NOW, "tvm": "0.26.0"})
            db.add_batch(wl, [row(8, 16)])
            db.save_selection(wl, {"m": [t.op.lo, t.op.hi]}, {"mains": [], "edge": {}})
    r = run_cli("build", str(mlp.path), "--dim", "batch=1:64", "--db", str(tmp_path / "old.db"),
                "-o", str(tmp_path / "pkg"))
    assert r.returncode == 0, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "measured with other kernels (tvm 0.26.0 -> " in r.stderr
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["tuned"] is False and sorted(manifest["tuning"]["untuned"]) == sorted(t.kernel for t in tasks)
    with TuningDB(tmp_path / "old.db") as db:
        assert sum(len(db.measured(w)) for w in db.workloads()) == len(tasks)
