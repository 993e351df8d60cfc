"""Tune a whole model: split the trial budget among its tasks, run the joint searches round-robin (one cost
model per operator class, shared by its tasks), verify, and record each task's kernel set in the database.

`--trials` is the budget for the model. Each task gets a minimum, the rest follows its share of the model's
work over the samples (FLOPs x calls, as MetaSchedule's task scheduler weighs tasks). Measurements already in
the database count: an interrupted run resumes where it stopped, and a task another model already tuned on
this board starts with everything that model measured.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..board import Board
from ..errors import EdgepackError
from .cost_model import CostModel, Holdout, holdout_quality
from .db import TuningDB, kernel_variant
from .samples import Samples, make_samples
from .search import TaskResult, TaskSearch, config, shape
from .space import Hardware
from .tasks import TuneTask, extract_tasks

log = logging.getLogger("edgepack")

MIN_TRIALS = 4  # per task, before the budget is split by weight


@dataclass
class TuneOptions:
    trials: int = 400
    samples: str = "8"
    max_kernels: int | None = None  # default: the board's [tune] max_kernels
    batch: int | None = None  # kernels measured per round (default: the board's [tune] batch)
    seed: int = 0
    progress: bool = True
    cost_model: str = "reg"  # "reg" | "rank": the cost model's objective (cost_model.py: why reg)


@dataclass
class TuneReport:
    model: str
    board: str
    db: str
    run: int
    seconds: float
    measured: int  # measurements made by this run (trials + verification)
    failed: int  # of which failed (build error, crash, timeout)
    reused: int  # measurements found in the database and not repeated
    holdout: Holdout  # the cost model on held-back measurements: median error, Kendall's tau, top-5 recall
    tasks: list[TaskResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # kernels with no micro-kernel space on this board
    cost_model: str = "reg"

    @property
    def cost_model_error(self) -> float:
        """The held-back median relative error alone (what reports before the rank figures read)."""
        return self.holdout.error

    @property
    def model_off(self) -> list[TaskResult]:
        """Tasks whose model was more than 2x off, at verification (the measurements chose kernels too) or on a
        batch of trials (samples re-weighted, trials chosen from the measurements)."""
        return [t for t in self.tasks if t.model_off or t.off_in_search]


def hardware_of(board: Board, packed: bool) -> Hardware:
    """The space's hardware limits; `packed`: dense weights in panels (Schedules.pack for the board). The
    board's int8 dot goes only where it fits (conv.with_dot: the x86 forms and SDOT on channel vectors, which
    need packed weights; the DSP's on C kernels' scalar tiles)."""
    return Hardware(lanes=board.vector_lanes_f32, registers=board.vector_registers, cores=board.target.cores,
                    packed=packed, int8_dot=board.int8_dot)


def tune_setting(board: Board, key: str, default: int) -> int:
    v = board.section("tune").get(key, default)
    if not isinstance(v, int) or v < 1:
        raise EdgepackError(f"board file {board.path}: key 'tune.{key}' must be a positive int, got {v!r}")
    return v


def split_budget(tasks: list[TuneTask], samples: dict[str, Samples], trials: int, space_sizes: list[int]) -> list[int]:
    """Trials per task: a minimum each, the rest by weight (largest remainders), never above a task's space."""
    base = [min(MIN_TRIALS, trials // max(1, len(tasks)), n) for n in space_sizes]
    w = [sum(wi * t.weight(v) for v, wi in zip(samples[t.dim].values, samples[t.dim].weights))
         for t in tasks]
    left = max(0, trials - sum(base))
    ideal = [left * wi / sum(w) for wi in w]
    out = [b + int(x) for b, x in zip(base, ideal)]
    for i in sorted(range(len(tasks)), key=lambda i: ideal[i] - int(ideal[i]), reverse=True)[:trials - sum(out)]:
        out[i] += 1
    return [min(o, n) for o, n in zip(out, space_sizes)]


class Tuner:
    def __init__(self, tasks: list[TuneTask], board: Board, db: TuningDB, measurer, opts: TuneOptions,
                 model_name: str):
        from ..schedule.defaults import schedules_for

        self.tasks, self.board, self.db, self.measurer, self.opts = list(tasks), board, db, measurer, opts
        self.model_name = model_name
        sched = schedules_for(board)  # candidates are scheduled as the package will compile them (C: plain loops)
        self.hw = hardware_of(board, sched.pack)
        # one cost model per operator class: every measurement of that class, on any shape, trains it
        self.costs = {kind: CostModel(self.hw, opts.cost_model, seed=opts.seed) for kind in {t.kind for t in tasks}}
        self.k_max = opts.max_kernels or tune_setting(board, "max_kernels", 4)
        self.batch = opts.batch or tune_setting(board, "batch", 8)
        self.samples = {t.dim: make_samples(opts.samples, t.dim) for t in tasks}  # dense rows: ranges differ
        self.measured = self.failed = self.reused = 0
        self._built: dict = {}  # (task index, tiles) -> (PrimFunc, what the measurer gets or BuildError)
        self._parallel, self._vectorize = sched.parallel and board.target.cores > 1, sched.vectorize
        self._pack_lanes = sched.vector_lanes if sched.pack else None
        self._workdir = tempfile.TemporaryDirectory(prefix="edgepack-tune-")
        variant = kernel_variant(sched)  # measurements of kernels built another way are not reused
        self.searches: list[TaskSearch] = []
        self.workloads = []
        self.skipped = []  # kernels whose rows cannot be tiled on this board (alignment, registers): default schedule
        for i, t in enumerate(list(tasks)):
            s = TaskSearch(t, self.samples[t.dim], self.hw, self.costs[t.kind], seed=opts.seed + i)
            if not s.space:
                self.skipped.append(t.kernel)
                self.tasks.remove(t)
                continue
            wl = db.workload(t.kind, t.static_dims, t.dtype, board.name, {"m": [t.op.lo, t.op.hi]}, variant=variant)
            s.load(db.measured(wl))
            self.reused += len(s.known)
            self.searches.append(s)
            self.workloads.append(wl)
        note = db.stale_note([(t.kind, t.static_dims, t.dtype, board.name) for t in self.tasks], variant)
        if note:
            log.warning("%s; this run measures those layers again", note)
        if not self.tasks:
            raise EdgepackError(f"no kernel of {model_name} can be tiled on board '{board.name}' (skipped: "
                                f"{', '.join(self.skipped)}); build it untuned with `edgepack build`")
        for m in self.costs.values():
            m.fit()

    def run(self) -> TuneReport:
        t0 = time.perf_counter()
        run = self.db.start_run(self.model_name, self.board.name, self.opts.trials)
        budgets = split_budget(self.tasks, self.samples, self.opts.trials, [len(s.space) for s in self.searches])
        bar = _progress(sum(budgets), sum(min(b, s.trials_done()) for b, s in zip(budgets, self.searches)),
                        self.opts.progress)
        try:
            self._search(budgets, bar, run)
            results = [self._verify(i, run, bar) for i in range(len(self.tasks))]
        finally:
            bar.close()
            self._workdir.cleanup()
        holdout = self._holdout()
        self.db.finish_run(run, summary={"cost_model": self.opts.cost_model, "holdout": holdout.to_json(),
                                         "model_off": {t.task: off_json(t) for t in results
                                                       if t.model_off or t.off_in_search}})
        return TuneReport(self.model_name, self.board.name, str(self.db.path), run, time.perf_counter() - t0,
                          self.measured, self.failed, self.reused, holdout, results, self.skipped,
                          self.opts.cost_model)

    def _search(self, budgets: list[int], bar, run: int) -> None:
        active = [i for i, s in enumerate(self.searches) if s.trials_done() < budgets[i]]
        while active:
            for i in list(active):
                s = self.searches[i]
                want = min(self.batch, budgets[i] - s.trials_done())
                props = s.propose(want) if want > 0 else []
                if not props:
                    active.remove(i)
                    continue
                before = s.trials_done()
                self._measure(i, [(t, s.trial_rows(t)) for t in props], run)
                bar.update(s.trials_done() - before)
                bar.set_postfix_str(self._status(i), refresh=False)
                if s.trials_done() >= budgets[i]:
                    active.remove(i)

    def _verify(self, i: int, run: int, bar) -> TaskResult:
        s = self.searches[i]
        if not s.good_trials():
            raise EdgepackError(f"every candidate of kernel {s.task.kernel} failed to build or run on board "
                                f"'{self.board.name}'; see the log with -v, check the board's toolchain")
        # a convolution runs whole images, attention pads seq: one kernel serves every size, so the set is one
        k_max = self.k_max if s.task.kind == "dense" else 1
        bar.set_description_str(f"verifying {s.task.kernel}", refresh=True)
        res = s.verify(k_max, lambda pairs: self._measure(i, pairs, run))
        self.db.save_selection(self.workloads[i], {"m": [s.task.op.lo, s.task.op.hi]},
                               selection_json(res) | {"cost_model": s.model.objective}, run=run)
        return res

    def _kernel(self, i: int, t):
        """The configuration's main variant built for the board (once: mt is an argument, so it serves every
        row count), or the BuildError it gave. Boards without a POSIX loader (MCUs) get the PrimFunc itself:
        their measurer builds a whole batch into one firmware image."""
        from ..errors import BuildError
        from .export import export_kernel
        from .trial import kernel_name, main_variant

        key = (i, t)
        if key not in self._built:
            s = self.searches[i]
            func = main_variant(s.task.func, s.task.split, s.task.block, t, self._parallel, self._vectorize,
                                self._pack_lanes)
            if self.board.toolchain.platform != "posix":
                self._built[key] = (func, func)
                return self._built[key]
            path = Path(self._workdir.name) / f"{i}_{kernel_name(t)}.so"
            try:
                self._built[key] = (func, export_kernel(func, self.board, path, name=kernel_name(t)))
            except BuildError as e:
                self._built[key] = (func, e)
        return self._built[key]

    def _measure(self, i: int, pairs, run: int) -> None:
        from .measure import MeasureInput, MeasureResult
        from .trial import args_spec, kernel_name

        if not pairs:
            return
        s = self.searches[i]
        results: list = [None] * len(pairs)
        inputs, where = [], []
        for j, (t, rows) in enumerate(pairs):
            func, built = self._kernel(i, t)
            if isinstance(built, Exception):  # a build failure is a failed measurement: recorded, never retried
                results[j] = MeasureResult(None, error=str(built))
            else:
                inputs.append(MeasureInput(built, kernel_name(t), args_spec(func, t, rows, s.task.split.dim)))
                where.append(j)
        for j, r in zip(where, self.measurer.measure_batch(inputs) if inputs else []):
            results[j] = r
        self.db.add_batch(self.workloads[i], [(config(t), shape(rows), r.median_s, r.samples_s, r.error)
                                              for (t, rows), r in zip(pairs, results)], run=run)
        s.record(list(pairs), [r.median_s for r in results])
        for (t, rows), r in zip(pairs, results):
            if r.error:
                log.info("%s %s on %d rows failed: %s", s.task.kernel, t, rows, r.error)
        self.measured += len(results)
        self.failed += sum(not r.ok for r in results)
        s.model.fit()

    def _status(self, i: int) -> str:
        s = self.searches[i]
        good = [(s.known[(t, s.trial_rows(t))], t) for t in s.good_trials()]
        if not good:
            return s.task.kernel
        lat, t = min(good, key=lambda g: g[0])  # ties: the first (tiles do not order)
        pred = s.model.predict_latency(s.task.op, [t], s.trial_rows(t))[0]
        return f"{s.task.kernel}: best {lat * 1e6:.1f} us measured, {pred * 1e6:.1f} predicted"

    def _holdout(self) -> Holdout:
        """Fit fresh models on 80% of each class's observations; error and rank quality on the other 20%."""
        held, fitted = [], []
        for cost in self.costs.values():
            obs = list(cost.observations)
            random.Random(self.opts.seed).shuffle(obs)
            cut = int(0.8 * len(obs))
            if cut < 8 or cut == len(obs):
                continue
            m = CostModel(self.hw, self.opts.cost_model, seed=self.opts.seed)
            m.observe(obs[:cut])
            m.fit()
            held.append(obs[cut:])
            fitted.append(m)
        return holdout_quality(_PerClass(fitted, held), [o for h in held for o in h])


class _PerClass:
    """The held-out models of every operator class as one predictor (each task belongs to one class)."""

    def __init__(self, models: list[CostModel], held: list[list]):
        self._by_task = {o.task: m for m, h in zip(models, held) for o in h}

    def predict_latency(self, task, tiles, rows):
        return self._by_task[task].predict_latency(task, tiles, rows)


def off_json(r: TaskResult) -> dict:
    """How far off a task's model was and what the search did about it (search.py's module doc)."""
    return {"model_off_by": r.model_off_by, "measured_picks": r.measured_picks, "search_off_by": r.search_off_by,
            "reweighted": r.reweighted, "measured_trials": r.measured_trials}


def selection_json(r: TaskResult) -> dict:
    return {"mains": [config(t) for t in r.mains], "edge": config(r.edge) if r.edge else None,
            "samples": r.samples.to_json(), "assign": r.assign, "measured_s": r.measured_s,
            "predicted_s": r.predicted_s, "between": [list(p) for p in r.between]} | off_json(r)


class _NoBar:
    def update(self, n): pass
    def set_postfix_str(self, s, refresh=True): pass
    def set_description_str(self, s, refresh=True): pass
    def close(self): pass


def _progress(total: int, done: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="tuning", unit="trial", dynamic_ncols=True)


def tune_model(model_path: str | Path, board: Board, dim_ranges: dict, db_path: str | Path, measurer,
               opts: TuneOptions, name: str | None = None) -> TuneReport:
    from ..model.names import package_name
    from ..model.frontend import lower_model, prepare

    model_path = Path(model_path)
    model, dims = prepare(model_path, dim_ranges)
    name = name or package_name(model_path.stem)
    from ..schedule.defaults import schedules_for

    tasks = extract_tasks(lower_model(name, model, dims, board.word_bits), dims, schedules_for(board).vectorize)
    if not tasks:
        raise EdgepackError(f"{model_path}: no kernel to tune (no dense/matmul layer with dynamic rows, no conv2d "
                            "with a dynamic batch, no attention over a dynamic seq); build it untuned with "
                            "`edgepack build`")
    with TuningDB(db_path) as db:
        return Tuner(tasks, board, db, measurer, opts, name).run()
