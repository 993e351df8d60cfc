"""What the tuner says about its cost model reaches the user: the tuning summary's figures go to the database
(runs.summary, each selection), `build --db` carries predicted against measured per kernel into the manifest,
and `bench`'s JSON, Markdown and HTML show it. The board is a synthetic measurer (named so below): no kernel
is built or run, so the figures are made up, but every other part is the real code."""

from __future__ import annotations

import json

import pytest

from edgepack.board import load_board
from edgepack.commands.tune import summary_lines
from edgepack.examples import EXAMPLES
from edgepack.pipeline import lower_model, prepare
from edgepack.report.html import render
from edgepack.report.markdown import markdown
from edgepack.report.runner import tuning_facts
from edgepack.report.schema import Run, validate
from edgepack.schedule.defaults import schedules_for
from edgepack.tune.apply import tuned_schedules
from edgepack.tune.db import TuningDB
from edgepack.tune.measure import MeasureResult
from edgepack.tune.tuner import TuneOptions, tune_model

pytestmark = pytest.mark.unit  # lowering only: nothing built or run

MLP = EXAMPLES["mlp"]


class SyntheticMeasurer:
    """A made-up board: seconds from the kernel's name and its row count (no build, no run)."""

    def measure_batch(self, inputs):
        out = []
        for inp in inputs:
            rows = next(a for a in inp.args_spec if isinstance(a, int))  # mt, the tiles of rows
            s = 1e-6 * (1 + rows) * (1 + len(inp.func_name) % 5)
            out.append(MeasureResult(s, [s]))
        return out


def _bench_doc(package: dict) -> dict:
    stats = {"median": 1e5, "p10": 1e5, "p90": 1e5, "min": 1e5, "max": 1e5, "mean": 1e5, "spread": 0.0, "n": 1}
    return {"schema": "edgepack.bench", "schema_version": 1, "created": "now", "command": ["ep", "bench"],
            "package": package,
            "machine": {"board": "mps2-an386", "transport": "none", "cpu": "cortex-m4", "cores": 1, "clock_mhz": None,
                        "os": "none", "arch": "thumb"},
            "settings": {"warmup": 1, "repeat": 1, "min_time_ms": 0, "threads": None, "profile": False, "rounds": 1,
                         "cooldown_ms": 0},
            "memory": {"arena_bytes": 1, "weights_bytes": 1, "code_bytes": 1}, "baseline": None,
            "sizes": [{"dims": {"batch": 1}, "unit": "ns", "threads": 1, "stats": stats, "samples": [1e5],
                       "calls": [], "operators": [], "baselines": {}}]}


def test_predicted_against_measured_from_tune_to_the_bench_report(tmp_path):
    board = load_board("mps2-an386")  # a board with no POSIX loader: the tuner hands PrimFuncs, nothing is built
    db = tmp_path / "t.db"
    opts = TuneOptions(trials=8, samples="3", max_kernels=2, batch=4, progress=False, cost_model="rank")
    rep = tune_model(MLP.path, board, dict(MLP.dims), db, SyntheticMeasurer(), opts)
    assert rep.cost_model == "rank" and rep.holdout.n >= 0
    with TuningDB(db) as d:
        (run,) = d.runs()
    assert run["summary"]["cost_model"] == "rank" and set(run["summary"]["holdout"]) == {"error", "tau", "recall", "n"}
    assert set(run["summary"]["model_off"]) == {t.task for t in rep.model_off}
    lines = summary_lines(rep)
    assert lines[0].startswith("  cost model (rank): ") and len(lines) >= 1 + len(rep.tasks)

    model, dims = prepare(MLP.path, dict(MLP.dims))
    applied = tuned_schedules(db, lower_model("mlp", model, dims), dims, board, schedules_for(board))
    assert set(applied.verification) == {t.task for t in rep.tasks}
    for t in rep.tasks:
        v = applied.verification[t.task]
        assert v["predicted_s"] == t.predicted_s and v["measured_s"] == t.measured_s
        assert v["model_off_by"] == t.model_off_by and v["model_off"] == t.model_off and v["cost_model"] == "rank"

    manifest = {"tuning": {"kernels": applied.tuned, "verification": applied.verification}}
    package = {"model": {"name": "mlp"}, "dims": [{"name": "batch", "min": 1, "max": 8}], "board": {"name": board.name},
               "edgepack_version": "x", "tvm_version": "x", "tuned": True, "database_id": None,
               "tuning": tuning_facts(json.loads(json.dumps(manifest)))}  # as read back from manifest.json
    doc = _bench_doc(package)
    validate(doc)
    r = Run.from_dict(doc, "run.json")
    md, page = markdown([r]), render([r])
    for t in rep.tasks:
        assert t.task in md and t.task in page
    assert "predicted/measured" in md and "predicted/measured" in page and "rank" in md
    validate(_bench_doc(package | {"tuning": None}))  # untuned or older packages: no table, still valid
    assert "Tuning:" not in markdown([Run.from_dict(_bench_doc(package | {"tuning": None}))])


def test_the_summary_says_which_tasks_are_off_and_what_was_done():
    import dataclasses

    from edgepack.tune.cost_model import Holdout
    from edgepack.tune.samples import Samples
    from edgepack.tune.search import TaskResult
    from edgepack.schedule.dense import DenseTiles
    from edgepack.tune.tuner import TuneReport

    t = DenseTiles(rows=4, cols=16, unroll_k=1, par_cols=False)
    ok = TaskResult("dense_0", [t], t.with_rows(1), Samples((1, 8), (0.5, 0.5)), [0, 0], [1e-6, 2e-6], [1e-6, 2e-6],
                    [1e-6, 2e-6], trials=10, verified=4)
    off = dataclasses.replace(ok, task="dense_1", predicted_s=[54e-6, 108e-6], model_off_by=54.0, measured_picks=2,
                              search_off_by=7.0, reweighted=7.0, measured_trials=4)
    rep = TuneReport("m", "host", "t.db", 1, 1.0, 20, 0, 0, Holdout(0.25, 0.81, float("nan"), 12), [ok, off])
    text = "\n".join(summary_lines(rep))
    assert "median error 25%, Kendall's tau 0.81, measured top 5 in predicted top 20 n/a" in text, text
    assert "off by more than 2x for 1 task(s)" in text and "dense_0: x" not in text
    assert ("dense_1: x7.0 on a batch of trials: its samples re-weighted x7 in the shared model, 4 trial(s) chosen "
            "from the measurements; x54.0 at verification: 2 kernel(s)") in text, text


def test_an_off_model_is_said_in_the_report():
    off = {"kernel": "dense_0", "samples": [1, 8], "predicted_s": [1e-6, 2e-6], "measured_s": [54e-6, 108e-6],
           "predicted_over_measured": 1 / 54, "model_off_by": 54.0, "model_off": True, "measured_picks": 2,
           "cost_model": "reg"}
    package = {"model": {"name": "m"}, "dims": [], "board": {"name": "host"}, "edgepack_version": "x",
               "tvm_version": "x", "tuned": True, "database_id": None, "tuning": [off]}
    md = markdown([Run.from_dict(_bench_doc(package))])
    assert "x54.00" in md and "off (> 2x): 2 kernel(s) chosen from measurements" in md, md
