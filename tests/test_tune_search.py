"""The tuner's pieces on synthetic inputs with known answers: samples, the budget split, proposals, the
database's selections and its upgrade from schema version 1."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from edgepack.errors import EdgepackError
from edgepack.model.plan import DimRange
from edgepack.schedule.dense import DenseTiles
from edgepack.tune.cost_model import CostModel
from edgepack.tune.db import SCHEMA_VERSION, TuningDB
from edgepack.tune.samples import make_samples
from edgepack.tune.search import TaskSearch
from edgepack.tune.space import DenseTask, Hardware
from edgepack.tune.tasks import TuneTask
from edgepack.tune.tuner import split_budget

pytestmark = pytest.mark.unit

SEQ = DimRange("seq", "seq", 1, 256)
HW = Hardware(lanes=8, registers=16, cores=2)


def test_samples():
    s = make_samples("8", SEQ)
    assert s.values[0] == 1 and s.values[-1] == 256 and len(s.values) == 8 and sum(s.weights) == pytest.approx(1)
    assert make_samples("all", DimRange("b", "b", 3, 6)).values == (3, 4, 5, 6)
    assert make_samples("50", DimRange("b", "b", 1, 4)).values == (1, 2, 3, 4)  # never more than the range


def test_histogram_samples(tmp_path):
    h = tmp_path / "h.json"
    h.write_text(json.dumps({"17": 3, "128": 1}))
    s = make_samples(str(h), SEQ)
    assert s.values == (17, 128) and s.weights == (0.75, 0.25)
    h.write_text(json.dumps([[300, 1]]))
    with pytest.raises(EdgepackError, match="outside seq=1:256"):
        make_samples(str(h), SEQ)
    h.write_text("not json")
    with pytest.raises(EdgepackError, match="not a histogram"):
        make_samples(str(h), SEQ)
    with pytest.raises(EdgepackError, match="no such file"):
        make_samples(str(tmp_path / "none.json"), SEQ)


class _Task:
    """Stand-in for TuneTask's weight(): only the budget split's arithmetic is under test."""

    def __init__(self, flop_per_row, calls=1):
        self.dim, self.f, self.calls = SEQ, flop_per_row, calls

    def weight(self, rows):
        return self.calls * self.f * rows


def test_budget_split_follows_weight_and_keeps_the_total():
    samples = {SEQ: make_samples("8", SEQ)}
    tasks = [_Task(1.0), _Task(3.0), _Task(1.0, calls=4)]
    b = split_budget(tasks, samples, 100, [500, 500, 500])
    assert sum(b) == 100 and b[0] < b[1] < b[2]
    assert b == [4 + round(88 * 1 / 8), 4 + round(88 * 3 / 8), 4 + round(88 * 4 / 8)]
    assert split_budget(tasks, samples, 100, [5, 500, 500])[0] == 5  # never more than a task's space
    assert split_budget(tasks, samples, 3, [500] * 3) == [1, 1, 1]


def _search(seed=0):
    task = TuneTask("d", None, None, "matmul", DenseTask("d", 64, 64, 1, 256), SEQ, 1, "float32")
    task.runs = lambda t: True  # every row tile is aligned for this synthetic task
    return TaskSearch(task, make_samples("8", SEQ), HW, CostModel(HW), seed=seed)


def test_proposals_are_new_and_the_budget_is_respected():
    s = _search()
    first = s.propose(8)
    assert len(first) == 8 == len(set(first))
    s.record([(t, s.trial_rows(t)) for t in first], [1e-5 * (i + 1) for i in range(8)])
    second = s.propose(8)
    assert not set(first) & set(second)
    assert s.trials_done() == 8
    everything = s.propose(10_000)
    assert set(everything) == set(s.space) - set(first)


def test_run_latency_adds_main_and_edge():
    s = _search()
    main, edge = DenseTiles(8, 16), DenseTiles(1, 16, par_cols=True)
    assert s.run_pairs([main], edge)[:2] == [(edge, 1), (main, 32)]  # samples 1 and 37 = 32 + 5
    s.record([(main, 32), (edge, 5)], [3e-6, 1e-6])
    assert s.run_latency(main, edge, 37) == pytest.approx(4e-6)
    assert s.run_latency(main, edge, 40) == np.inf  # never measured


def test_selections_and_upgrade_from_version_1(tmp_path):
    p = tmp_path / "v1.db"
    with TuningDB(p) as db:
        wl = db.workload("dense", {"n": 64}, "float32", "host", {"m": [1, 256]})
        db.add_batch(wl, [({"rows": 8}, {"m": 8}, 1e-6, [1e-6], None)])
    with sqlite3.connect(p) as c:  # make it a version-1 file: no selections table, no workload variant
        c.execute("DROP TABLE selections")
        c.execute("ALTER TABLE workloads DROP COLUMN variant")
        c.execute("PRAGMA user_version = 1")
    with TuningDB(p) as db:
        wl = db.find_workload("dense", {"n": 64}, "float32", "host")
        assert len(db.measured(wl)) == 1  # kept through the upgrade
        assert db.selection(wl, {"m": [1, 256]}) is None
        db.save_selection(wl, {"m": [1, 256]}, {"mains": [1]})
        db.save_selection(wl, {"m": [1, 64]}, {"mains": [2]})
        assert db.selection(wl, {"m": [1, 32]}) == {"mains": [2]}  # the newest that covers the range
        assert db.selection(wl, {"m": [1, 200]}) == {"mains": [1]}
        assert db.selection(wl, {"m": [1, 512]}) is None
        assert db.find_workload("dense", {"n": 65}, "float32", "host") is None
    with sqlite3.connect(p) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
