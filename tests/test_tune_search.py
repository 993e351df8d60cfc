"""The tuner's pieces on synthetic inputs with known answers: samples, the budget split, proposals, the
database's selections and its upgrade from schema version 1."""

from __future__ import annotations

import json
import math
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
from edgepack.tune import search
from edgepack.tune.space import DenseTask, Hardware, adaptation, candidates
from edgepack.tune.tasks import TuneTask
from edgepack.tune.tuner import split_budget

pytestmark = pytest.mark.unit

SEQ = DimRange("seq", "seq", 1, 256)
HW = Hardware(lanes=8, registers=16, cores=2)


def test_samples():
    s = make_samples("8", SEQ)  # 1..256 is wide: geometric, so the small sizes get samples of their own
    assert s.values == (1, 2, 5, 11, 24, 53, 116, 256) and sum(s.weights) == pytest.approx(1)
    assert make_samples("even:8", SEQ).values == (1, 37, 74, 110, 147, 183, 220, 256)
    assert make_samples("8", DimRange("b", "b", 17, 64)).values == (17, 24, 30, 37, 44, 51, 57, 64)  # narrow: even
    assert make_samples("geo:8", DimRange("b", "b", 1, 9)).values == (1, 2, 3, 4, 5, 6, 7, 9)  # distinct, in range
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
    samples = {SEQ: make_samples("even:8", SEQ)}
    tasks = [_Task(1.0), _Task(3.0), _Task(1.0, calls=4)]
    b = split_budget(tasks, samples, 100, [500, 500, 500])
    assert sum(b) == 100 and b[0] < b[1] < b[2]
    assert b == [4 + round(88 * 1 / 8), 4 + round(88 * 3 / 8), 4 + round(88 * 4 / 8)]
    assert split_budget(tasks, samples, 100, [5, 500, 500])[0] == 5  # never more than a task's space
    assert split_budget(tasks, samples, 3, [500] * 3) == [1, 1, 1]


def _search(seed=0):
    task = TuneTask("d", None, None, "matmul", DenseTask("d", 64, 64, 1, 256), SEQ, 1, "float32")
    task.runs = lambda t: True  # every row tile is aligned for this synthetic task
    return TaskSearch(task, make_samples("even:8", SEQ), HW, CostModel(HW), seed=seed)


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


def test_the_edge_kernel_is_chosen_by_measurement():
    """The edge is all of a run below the row tile (M = 1): its choice is measured, not predicted."""
    s = _search()
    main = DenseTiles(8, 16)
    slow, fast = DenseTiles(1, 8, par_cols=True), DenseTiles(1, 16, par_cols=True)
    for e, lat in ((slow, 3e-6), (fast, 1e-6)):
        pairs = [p for p in s.run_pairs([main], e) if p[0] == e]
        s.record(pairs, [lat] * len(pairs))
    whole = [p for p in s.run_pairs([main], fast) if p[0] == main]
    s.record(whole, [5e-6] * len(whole))
    assert s.best_edge([main], [slow, fast]) == fast
    assert DenseTiles.for_width(64, HW.lanes, HW.registers).with_rows(1) in s.edge_shortlist()  # the default


def test_sizes_between_samples_go_to_the_kernel_estimated_fastest():
    """Samples 1, 37, ...: a nearest-sample dispatcher sends seq 8 to the M = 1 GEMV kernel. The estimate from
    each kernel's measured runs (throughput x adaptation) sends it to the row-tiled one, which is faster there."""
    from edgepack.tune.apply import dispatcher_of

    s = _search()
    op, chosen = s.task.op, [DenseTiles(1, 16, par_cols=True), DenseTiles(8, 16)]
    L = np.array([[_board_latency(op, t, m) for t in chosen] for m in s.samples.values])
    between = dict(s.between(chosen, L))
    assert set(between) == set(range(1, 257))
    truth = {m: int(np.argmin([_board_latency(op, t, m) for t in chosen])) for m in between}
    assert between == truth  # the synthetic board follows the adaptation exactly
    sel = {"samples": s.samples.to_json(), "assign": [truth[m] for m in s.samples.values],
           "between": [list(p) for p in between.items()]}
    td = dispatcher_of(sel, SEQ)
    assert truth[8] == 1 and td.choose({"seq": 8}) == 1 and td.choose({"seq": 1}) == 0
    assert sum(td.choose({"seq": m}) == k for m, k in truth.items()) >= 250, "the tree follows the estimates"


def _board_latency(op, t, rows) -> float:
    """A fake of the board's measurement (no board can be made to mispredict on purpose): a synthetic
    machine whose throughput rises with the accumulators up to the register budget, through the adaptation."""
    acc = t.rows * t.cols // HW.lanes
    f = 5e9 * min(acc, 12) / 12 * (1.1 if t.unroll_k == 2 else 1.0) * (1.2 if t.par_cols else 1.0)
    f /= HW.cores if t.serial else 1  # one thread: one core's throughput
    return op.flop(rows) / (f * adaptation(op, t, rows, HW.cores))


class _WrongLabels(CostModel):
    """Fed wrong labels on purpose: each log throughput mirrored around 5 GFLOP/s, so the order is reversed."""

    def _label(self, o):
        return 2 * math.log(5e9) - super()._label(o)


def _tuned(model, trials=32, k_max=2, tried=None):
    """The real search and verification on the synthetic board; `tried`: a list to receive the trial kernels."""
    s = _search()
    s.model = model

    def measure(pairs):  # as Tuner._measure: record, then refit
        s.record(pairs, [_board_latency(s.task.op, t, rows) for t, rows in pairs])
        s.model.fit()

    while s.trials_done() < trials:
        measure([(t, s.trial_rows(t)) for t in s.propose(8)])
    if tried is not None:
        tried += s.good_trials()
    return s.verify(k_max, measure)


def _weighted(r) -> float:
    return float(np.dot(r.samples.weights, r.measured_s))


def test_a_model_off_by_more_than_2x_is_caught_and_changes_the_chosen_set(monkeypatch):
    # 48 trials: with fewer, the wrong model's trials never reach the rows-6 kernels, and the insurance pick
    # (the fastest measured trial) plus the measured edge already rescue both runs alike
    right = _tuned(CostModel(HW), trials=48)
    assert not right.model_off and right.measured_picks == 0, right.model_off_by
    wrong = _tuned(_WrongLabels(HW), trials=48)
    assert wrong.model_off and wrong.measured_picks > 0, wrong.model_off_by
    monkeypatch.setattr(search, "OFF_BY", math.inf)  # the same run, with no reaction to the misprediction
    unheeded = _tuned(_WrongLabels(HW), trials=48)
    assert set(wrong.mains) != set(unheeded.mains)
    assert _weighted(wrong) < _weighted(unheeded)
    print(f"model off x{wrong.model_off_by:.1f}: weighted latency {_weighted(unheeded) * 1e6:.2f} us -> "
          f"{_weighted(wrong) * 1e6:.2f} us (a right model: {_weighted(right) * 1e6:.2f} us, "
          f"off x{right.model_off_by:.2f})")


@pytest.mark.parametrize("objective", ["reg", "rank"])
def test_a_batch_of_trials_off_by_more_than_2x_reweights_and_leads_the_search_by_measurements(monkeypatch, objective):
    """Before verification: a batch predicted more than 2x off re-weights the task's samples and hands half of
    the next batches to neighbours of the kernels measured best. Another set of trials is measured, and the
    final set is faster than with no reaction at all."""
    right = _tuned(CostModel(HW, objective), trials=48)
    assert not right.off_in_search and right.measured_trials == 0 and right.reweighted == 1.0, right.search_off_by
    tried: list = []
    wrong = _tuned(_WrongLabels(HW, objective), trials=48, tried=tried)
    assert wrong.off_in_search and wrong.measured_trials > 0 and wrong.reweighted > 1.0, wrong
    monkeypatch.setattr(search, "OFF_BY", math.inf)
    untouched: list = []
    unheeded = _tuned(_WrongLabels(HW, objective), trials=48, tried=untouched)
    assert unheeded.measured_trials == 0 and set(tried) != set(untouched)
    assert _weighted(wrong) < _weighted(unheeded)
    print(f"{objective}: a batch off x{wrong.search_off_by:.1f}, {wrong.measured_trials} trials from measurements, "
          f"weight x{wrong.reweighted:.0f}: weighted latency {_weighted(unheeded) * 1e6:.2f} us -> "
          f"{_weighted(wrong) * 1e6:.2f} us (a right model: {_weighted(right) * 1e6:.2f} us)")


def test_reweighting_a_task_fits_it_closer():
    """A shared model, two tasks; one task's samples weighted 8x: the fit on that task's own measurements is
    at least as close as unweighted (the rank model weighs the task's query group)."""
    from edgepack.tune.cost_model import Observation, relative_errors

    a, b = DenseTask("a", 64, 64, 1, 256), DenseTask("b", 256, 1024, 1, 256)
    rng = np.random.default_rng(0)
    obs = []
    for task, scale in ((a, 1.0), (b, 0.2)):  # task b: a much slower machine for it (what the model misses)
        for t in candidates(task, HW)[:24]:
            rows = int(rng.integers(1, 257))
            obs.append(Observation(task, t, rows, _board_latency(task, t, rows) / scale))
    for objective in ("reg", "rank"):
        plain, heavy = CostModel(HW, objective), CostModel(HW, objective)
        heavy.reweight(b, 8.0)
        heavy.reweight(b, 2.0)  # never lowered
        assert heavy.weights[b] == 8.0
        for m in (plain, heavy):
            m.observe(obs)
            m.fit()
        mine = [o for o in obs if o.task == b]
        assert np.median(relative_errors(heavy, mine)) <= np.median(relative_errors(plain, mine)) + 1e-9, objective


def test_selections_and_upgrade_from_version_1(tmp_path):
    p = tmp_path / "v1.db"
    with TuningDB(p) as db:
        wl = db.workload("dense", {"n": 64}, "float32", "host", {"m": [1, 256]})
        db.add_batch(wl, [({"rows": 8}, {"m": 8}, 1e-6, [1e-6], None)])
    with sqlite3.connect(p) as c:  # make it a version-1 file: no selections table, workload variant, runs.summary
        c.execute("DROP TABLE selections")
        c.execute("ALTER TABLE workloads DROP COLUMN variant")
        c.execute("ALTER TABLE runs DROP COLUMN summary")
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
        db.finish_run(db.start_run("m", "host"), summary={"cost_model": "reg"})  # the column version 4 adds
        assert db.runs()[0]["summary"] == {"cost_model": "reg"}
    with sqlite3.connect(p) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
