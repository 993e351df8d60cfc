"""Joint search for one task over all its samples (docs/tuning.md#joint-search).

Every round proposes a batch of micro-kernels by evolution under the shared cost model: fitness is the
weighted latency the samples would have if the kernel joined the best kernels found so far, mutation picks a
sample (by its weighted current latency) and moves one tile factor in the direction that suits it. Each trial
is measured on the instance the kernel fits best. After the budget, a shortlist (cover of the predicted
matrix plus each sample's predicted best) is verified: every (sample, kernel) pair is measured as the package
will run it (main kernel on the whole tiles, edge kernel on the remainder), and the final cover of at most K
kernels is taken from those measured numbers. The dispatcher is fitted on the result.

Mispredictions change what the search does, at two points:
- During the search: each batch of trials is predicted before it is measured. When a batch's predictions
  are typically more than `OFF_BY` times off (exp of the median |log(predicted / measured)|, either way; judged
  once the model has `JUDGE_AFTER` observations, before that it is the analytic prior or barely fitted), the
  task's samples are re-weighted in the shared model (weight = that factor, capped at `MAX_WEIGHT`: the model
  of an operator class is fitted mostly on its other tasks' measurements, and a task it mispredicts gets a
  larger say), and the next batch spends half its trials on candidates chosen from the measurements: untried
  neighbours (one tile factor moved) of the kernels measured best, ranked by measured throughput carried to
  the samples by the analytic adaptation alone.
- At verification: when the verified predictions of the shortlist are more than `OFF_BY` times off, the
  model's shortlist is not trusted. A second shortlist is drawn from the measurements alone (the same
  measured-throughput matrix, no XGBoost), and its kernels are verified too before the final cover: it cannot
  be misled by the model it distrusts, and costs a bounded extra verification (at most K + samples kernels),
  not trials.
Both are recorded in the task's result (and so in the tuning summary, the selection and the bench report).

Shapes are recorded in the database as {"m": rows} (a dense layer's rows, a convolution's batch): the
workload's only dynamic extent, whatever the model calls its dim, so models with the same layer share
measurements. A convolution's micro-kernel covers one image, so it has no edge kernel: its "run" on a
sample is the kernel itself.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field

import numpy as np

from ..schedule.attention import AttentionTiles
from ..schedule.conv import ConvTiles
from ..schedule.dense import DenseTiles
from .cost_model import CostModel, Observation
from .cover import greedy_cover
from .samples import Samples
from .space import Hardware, adaptation, best_fit_rows, candidates
from .tasks import TuneTask

GENERATIONS = 3
EPSILON = 0.2  # share of each batch spent on random untried kernels (keeps the model honest)
OFF_BY = 2.0  # verified predictions typically further than this factor from the measured: the model is off
JUDGE_AFTER = 24  # observations the shared model needs before its batch predictions are judged
MAX_WEIGHT = 8.0  # the most a mispredicted task's samples are re-weighted in its shared cost model
EDGE_CHOICES = 3  # row-tile-1 kernels verified as the edge (remainder) kernel, besides the board default


def config(t: DenseTiles | ConvTiles | AttentionTiles) -> dict:
    """The configuration as stored; `serial`, `cvec` and `dot` only when set, so records made before they
    existed still match; an attention kernel's marked as one (its fields are a subset of dense's)."""
    d = dataclasses.asdict(t)
    for k in ("serial", "cvec", "dot"):
        if k in d and not d[k]:
            del d[k]
    return d | ({"form": "attention"} if isinstance(t, AttentionTiles) else {})


def tiles_of(cfg: dict) -> DenseTiles | ConvTiles | AttentionTiles:
    if "oc" in cfg:
        return ConvTiles(**cfg)
    if cfg.get("form") == "attention":
        return AttentionTiles(**{k: v for k, v in cfg.items() if k != "form"})
    return DenseTiles(**{k: cfg[k] for k in ("rows", "cols", "unroll_k", "par_cols", "serial") if k in cfg})


def _grid(lo: int, hi: int, n: int = 512) -> list[int]:
    """Every size of a small range; else n sizes, half evenly spread and half geometric (dense at the small end)."""
    if hi - lo < n:
        return list(range(lo, hi + 1))
    even = np.linspace(lo, hi, n // 2)
    geo = np.geomspace(max(1, lo), hi, n // 2)
    return sorted({int(round(v)) for v in np.concatenate([even, geo]) if lo <= round(v) <= hi})


def shape(rows: int) -> dict:
    return {"m": int(rows)}


@dataclass
class TaskResult:
    task: str
    mains: list  # DenseTiles or ConvTiles
    edge: DenseTiles | None  # None for a convolution
    samples: Samples
    assign: list[int]  # per sample: index into mains
    measured_s: list[float]  # per sample: measured latency on its kernel (main + edge)
    predicted_s: list[float]  # per sample: what the model predicted for that pair
    best_trial_s: list[float]  # per sample: best measured single kernel among the verified shortlist
    trials: int  # trial kernels measured for this task (over all runs)
    verified: int  # (kernel, rows) pairs measured in verification
    model_off_by: float = 1.0  # typical factor between the model's and the measured latencies of its shortlist
    measured_picks: int = 0  # kernels verified because the measurements (not the model) chose them
    search_off_by: float = 1.0  # the worst batch of trials: typical factor predicted (before it) vs measured
    reweighted: float = 1.0  # weight of this task's samples in the shared model at the end (1: never off)
    measured_trials: int = 0  # trials proposed from the measurements because the model was off
    between: tuple = ()  # (rows, index into mains) for unsampled sizes: estimated from the measured runs

    @property
    def model_off(self) -> bool:
        """The model was more than OFF_BY off at verification (the measurements chose kernels too)."""
        return self.model_off_by > OFF_BY

    @property
    def off_in_search(self) -> bool:
        """A batch of trials was predicted more than OFF_BY off (its samples re-weighted, trials led by
        measurements). A model that is right at verification may still have been off early on."""
        return self.search_off_by > OFF_BY


@dataclass
class TaskSearch:
    task: TuneTask
    samples: Samples
    hw: Hardware
    model: CostModel
    seed: int = 0
    known: dict = field(default_factory=dict)  # (tiles, rows) -> seconds, or None when it failed
    rng: random.Random = field(init=False)
    batch_off_by: list = field(default_factory=list)  # per recorded batch the model predicted: its factor off
    measured_trials: int = 0  # trials proposed from the measurements (module doc)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.space = [t for t in candidates(self.task.op, self.hw) if self.task.runs(t)]
        self._space_set = set(self.space)

    # -- what is known ---------------------------------------------------------------------------------
    def load(self, records) -> None:
        """Take every stored measurement of the workload (resume, or records from another model)."""
        obs = []
        for r in records:
            t, rows = tiles_of(r.config), int(r.shape.get("m", 0))
            self.known[(t, rows)] = r.median_s
            if r.median_s is not None and self.task.op.lo <= rows <= self.task.op.hi:
                obs.append(Observation(self.task.op, t, rows, r.median_s))
        self.model.observe(obs)

    def trial_rows(self, t: DenseTiles) -> int:
        return best_fit_rows(self.task.op, t, self.hw.cores)

    def tried(self, t: DenseTiles) -> bool:
        return (t, self.trial_rows(t)) in self.known

    def trials_done(self) -> int:
        return sum(self.tried(t) for t in self.space)

    def record(self, pairs: list[tuple[DenseTiles, int]], latencies: list[float | None]) -> None:
        """Take a batch's measurements. Before the model learns them, check how far off it predicted them
        and re-weight the task's samples when it is more than OFF_BY off (module doc)."""
        ok = [(t, r, lat) for (t, r), lat in zip(pairs, latencies) if lat is not None and lat > 0]
        if ok and self.model.fitted and len(self.model.observations) >= JUDGE_AFTER:
            logs = [abs(math.log(self.model.predict_latency(self.task.op, [t], r)[0] / lat)) for t, r, lat in ok]
            off = math.exp(float(np.median(logs)))  # the batch's typical error: a stray exploration pick is not it
            self.batch_off_by.append(off)
            if off > OFF_BY:
                self.model.reweight(self.task.op, min(MAX_WEIGHT, off))
        obs = []
        for (t, rows), lat in zip(pairs, latencies):
            self.known[(t, rows)] = lat
            if lat is not None:
                obs.append(Observation(self.task.op, t, rows, lat))
        self.model.observe(obs)

    # -- proposing -------------------------------------------------------------------------------------
    def _predict(self, tiles: list[DenseTiles]) -> np.ndarray:
        """[samples x tiles] predicted seconds."""
        return np.stack([self.model.predict_latency(self.task.op, tiles, s) for s in self.samples.values])

    def _current_best(self) -> np.ndarray:
        good = [t for t in self.space if self.known.get((t, self.trial_rows(t))) is not None]
        if not good:
            return np.full(len(self.samples.values), np.inf)
        return self._predict(good).min(axis=1)

    def off_now(self) -> bool:
        """The model's last batch of predictions was more than OFF_BY off."""
        return bool(self.batch_off_by) and self.batch_off_by[-1] > OFF_BY

    def propose(self, n: int) -> list[DenseTiles]:
        untried = [t for t in self.space if not self.tried(t)]
        if len(untried) <= n:
            return untried
        led = self._measured_led(n // 2) if self.off_now() and n > 1 else []
        self.measured_trials += len(led)
        if led:
            rest = self._propose([t for t in untried if t not in led], n - len(led))
            return led + [t for t in rest if t not in led][:n - len(led)]
        return self._propose(untried, n)

    def _measured_led(self, n: int) -> list:
        """Up to n untried neighbours (one tile factor moved) of the kernels measured best, best parent first:
        the model's ranking is not used (it was off)."""
        good = self.good_trials()
        if not good:
            return []
        cost = (np.array(self.samples.weights)[:, None] * self._measured_matrix(good)).sum(axis=0)
        out = []
        for j in np.argsort(cost, kind="stable"):
            out += [t for t in self._neighbours(good[j]) if not self.tried(t) and t not in out]
            if len(out) >= n:
                break
        return out[:n]

    def _neighbours(self, t) -> list:
        """Configurations one tile factor away from t, in the space."""
        if isinstance(t, ConvTiles):
            moves = [{a: v} for a in ("oc", "oh", "ow") for v in (getattr(t, a) * 2, getattr(t, a) // 2) if v >= 1]
        elif isinstance(t, AttentionTiles):
            moves = [{a: v} for a in ("rows", "cols") for v in (getattr(t, a) * 2, getattr(t, a) // 2) if v >= 1]
            moves += [{"rows": 6}, {"rows": 4}, {"serial": not t.serial}]
        else:
            cols = sorted({c.cols for c in self.space})
            i = cols.index(t.cols) if t.cols in cols else 0
            moves = ([{"rows": t.rows * 2}, {"rows": t.rows // 2}] + [{"cols": cols[k]} for k in (i - 1, i + 1)
                                                                       if 0 <= k < len(cols)]
                     + [{"unroll_k": u} for u in (1, 2, 4) if u != t.unroll_k] + [{"par_cols": not t.par_cols}]
                     + [{"serial": not t.serial}])
        out = []
        for m in moves:
            try:
                new = dataclasses.replace(t, **m)
            except (TypeError, ValueError):
                continue
            if new in self._space_set and new != t:
                out.append(new)
        return out

    def _propose(self, untried: list, n: int) -> list[DenseTiles]:
        if len(untried) <= n:
            return untried
        w = np.array(self.samples.weights)
        best = self._current_best()

        def fitness(ts: list[DenseTiles]) -> np.ndarray:  # weighted latency of the set with each kernel added
            return (w[:, None] * np.minimum(best[:, None], self._predict(ts))).sum(axis=0)

        pop = [self.space[j] for j in np.argsort(fitness(self.space), kind="stable")[:max(8, n)]]
        for _ in range(GENERATIONS):
            kids = [self._mutate(p, best, w) for p in pop]
            merged = list(dict.fromkeys(pop + [k for k in kids if k is not None]))
            scores = fitness(merged)
            pop = [merged[i] for i in np.argsort(scores, kind="stable")[:max(8, n)]]
        ranked = [t for t in pop if not self.tried(t)]
        ranked += [untried[j] for j in np.argsort(fitness(untried), kind="stable") if untried[j] not in ranked]
        n_rand = max(1, int(EPSILON * n)) if n > 1 else 0
        picks = ranked[:n - n_rand]
        rest = [t for t in untried if t not in picks]
        return picks + self.rng.sample(rest, min(n_rand, len(rest)))

    def _mutate(self, t: DenseTiles, best: np.ndarray, w: np.ndarray) -> DenseTiles | None:
        """Move one tile factor; a small sample pulls the row tile down, a large one up."""
        if isinstance(t, (ConvTiles, AttentionTiles)):  # one tile factor up or down; no shape pulls a direction
            if isinstance(t, AttentionTiles) and self.rng.random() < 0.2:
                new = dataclasses.replace(t, serial=not t.serial)
                return new if new in self._space_set else None
            axis = self.rng.choice(["rows", "cols"] if isinstance(t, AttentionTiles) else ["oc", "oh", "ow"])
            new = dataclasses.replace(t, **{axis: max(1, getattr(t, axis) * self.rng.choice([2, 0.5]))})
            new = dataclasses.replace(new, **{axis: int(getattr(new, axis))})
            return new if new in self._space_set else None
        mass = w * np.where(np.isfinite(best), best, 1.0)
        s = self.rng.choices(self.samples.values, weights=list(mass) if mass.sum() > 0 else None)[0]
        cols = sorted({c.cols for c in self.space})
        axis = self.rng.choice(["rows", "cols", "unroll_k", "par_cols", "serial"])
        if axis == "rows":
            new = dataclasses.replace(t, rows=t.rows // 2 if s < 2 * t.rows else t.rows * 2)
        elif axis == "cols":
            i = cols.index(t.cols) + self.rng.choice([-1, 1])
            new = dataclasses.replace(t, cols=cols[i]) if 0 <= i < len(cols) else None
        elif axis == "unroll_k":
            new = dataclasses.replace(t, unroll_k=self.rng.choice([1, 2, 4]))
        elif axis == "par_cols":
            new = dataclasses.replace(t, par_cols=not t.par_cols)
        else:  # a small sample pulls toward one thread, a large one toward all
            new = dataclasses.replace(t, serial=s < 2 * t.rows * self.hw.cores)
        return new if new in self._space_set else None

    # -- choosing --------------------------------------------------------------------------------------
    def good_trials(self) -> list[DenseTiles]:
        return [t for t in self.space if self.known.get((t, self.trial_rows(t))) is not None]

    def shortlist(self, k_max: int) -> list[DenseTiles]:
        """The kernels worth verifying: a cover of the predicted matrix with at most k_max kernels, plus the
        fastest kernel measured (on its own best-fit shape) as insurance against the model's errors."""
        good = self.good_trials()
        if not good:
            return []
        picks = greedy_cover(self._predict(good), self.samples.weights, k_max=k_max).kernels
        fastest = min(range(len(good)), key=lambda j: self.known[(good[j], self.trial_rows(good[j]))]
                      / self.task.op.flop(self.trial_rows(good[j])))
        return [good[j] for j in dict.fromkeys(picks + [fastest])]

    def measured_shortlist(self, k_max: int) -> list:
        """The shortlist the measurements alone give: a cover of each trial kernel's measured throughput
        (on its trial rows) carried to every sample by the analytic adaptation, plus each sample's best."""
        good = self.good_trials()
        L = self._measured_matrix(good)
        picks = greedy_cover(L, self.samples.weights, k_max=k_max).kernels + list(L.argmin(axis=1))
        return [good[int(j)] for j in dict.fromkeys(picks)]

    def _measured_matrix(self, good: list) -> np.ndarray:
        """[samples x good] latencies from each kernel's measured throughput on its trial rows, carried to every
        sample by the analytic adaptation only."""
        op, cores = self.task.op, self.hw.cores
        f = np.array([op.flop(r) / adaptation(op, t, r, cores) / self.known[(t, r)]
                      for t, r in ((t, self.trial_rows(t)) for t in good)])
        return np.stack([op.flop(s) / (f * np.array([adaptation(op, t, s, cores) for t in good]))
                         for s in self.samples.values])

    def off_by(self, predicted: np.ndarray, mains: list, edge: DenseTiles | None) -> float:
        """exp(mean |log(predicted / measured)|) over every verified (sample, kernel) run: how far off the
        model typically is, whichever the direction. `predicted`: [samples x mains], made before measuring."""
        logs = [abs(math.log(predicted[i, j] / m)) for i, s in enumerate(self.samples.values)
                for j, t in enumerate(mains) if math.isfinite(m := self.run_latency(t, edge, s))]
        return math.exp(float(np.mean(logs))) if logs else 1.0

    def verify(self, k_max: int, measure) -> TaskResult:
        """Measure the shortlist as the package runs it (`measure(pairs)` records them), react to a model
        that is off (module doc), and choose the final set from measured numbers. Predictions are taken
        before their pairs are measured: the model refits on every measurement."""
        search_off = max(self.batch_off_by, default=1.0)  # before verification's own batches are recorded
        mains, edges = self.shortlist(k_max), self.edge_shortlist()
        P = self._predict(mains)
        verified = self._measure_runs(mains, edges, measure)
        edge = self.best_edge(mains, edges)
        off = self.off_by(P, mains, edge)
        extra = [t for t in self.measured_shortlist(k_max) if t not in mains] if off > OFF_BY else []
        if extra:
            P = np.hstack([P, self._predict(extra)])
            verified += self._measure_runs(extra, edges, measure)
            edge = self.best_edge(mains + extra, edges)
        res = self.choose(mains + extra, edge, k_max, verified, predicted=P)
        return dataclasses.replace(res, model_off_by=off, measured_picks=len(extra), search_off_by=search_off,
                                   reweighted=self.model.weights.get(self.task.op, 1.0),
                                   measured_trials=self.measured_trials)

    def _measure_runs(self, mains: list, edges: list, measure) -> int:
        new = list(dict.fromkeys(p for e in edges or [None] for p in self.run_pairs(mains, e) if p not in self.known))
        if new:
            measure(new)
        return len(new)

    def edge_shortlist(self) -> list[DenseTiles]:
        """Row-tile-1 kernels for the remainders, to be measured: the EDGE_CHOICES best predicted over 1..7
        leftover rows, and the board default's. Its views start at a whole number of main tiles, so any
        column tiling of the space may serve (row tile set to 1). The edge is all of a run at M < tile
        (GEMV): a prediction alone picked a one-vector edge there, 1.7x slower than the default's two."""
        if self.task.kind != "dense":
            return []
        good = self.good_trials()
        ones = [t for t in good if t.rows == 1] or list(dict.fromkeys(t.with_rows(1) for t in good or self.space))
        small = [r for r in range(1, 8) if r <= self.task.op.hi] or [1]
        pred = np.stack([self.model.predict_latency(self.task.op, ones, r) for r in small]).sum(axis=0)
        picks = [ones[int(j)] for j in np.argsort(pred, kind="stable")[:EDGE_CHOICES]]
        default = DenseTiles.for_width(self.task.op.n, self.hw.lanes, self.hw.registers).with_rows(1)
        return list(dict.fromkeys(picks + ([default] if default in self._space_set else [])))

    def best_edge(self, mains: list, edges: list) -> DenseTiles | None:
        """The edge kernel with the lowest weighted measured latency over the samples, each sample on its
        best main kernel."""
        if not edges:
            return None
        w = np.array(self.samples.weights)

        def cost(e) -> float:
            L = np.array([[self.run_latency(t, e, s) for t in mains] for s in self.samples.values])
            return float((w * L.min(axis=1)).sum())
        return min(edges, key=cost)

    def run_pairs(self, mains: list[DenseTiles], edge: DenseTiles) -> list[tuple[DenseTiles, int]]:
        """(kernel, rows) pairs the verification needs: each main on each sample's whole tiles, and the edge
        kernel on each remainder."""
        if edge is None:
            return [(t, s) for s in self.samples.values for t in mains]
        pairs = []
        for s in self.samples.values:
            for t in mains:
                whole, rest = s - s % t.rows, s % t.rows
                pairs += [(t, whole)] if whole else []
                pairs += [(edge, rest)] if rest else []
        return list(dict.fromkeys(pairs))

    def run_latency(self, t, edge: DenseTiles | None, s: int) -> float:
        if edge is None:
            v = self.known.get((t, s))
            return math.inf if v is None else float(v)
        whole, rest = s - s % t.rows, s % t.rows
        parts = ([self.known.get((t, whole))] if whole else []) + ([self.known.get((edge, rest))] if rest else [])
        return math.inf if any(p is None for p in parts) else float(sum(parts))

    def choose(self, mains: list, edge: DenseTiles | None, k_max: int, verified: int,
               predicted: np.ndarray | None = None) -> TaskResult:
        """The final cover of the measured runs; `predicted` [samples x mains]: the model's numbers to record
        (default: its current predictions)."""
        L = np.array([[self.run_latency(t, edge, s) for t in mains] for s in self.samples.values])
        cover = greedy_cover(L, self.samples.weights, k_max=k_max)
        if not cover.kernels:
            raise RuntimeError("no kernel of the shortlist ran every sample")
        chosen = [mains[j] for j in cover.kernels]
        col = {j: i for i, j in enumerate(cover.kernels)}
        assign = [col[int(a)] for a in cover.assign]
        P = (self._predict(mains) if predicted is None else predicted)[:, cover.kernels]
        between = self.between(chosen, L[:, cover.kernels])
        return TaskResult(
            task=self.task.kernel, mains=chosen, edge=edge, samples=self.samples, assign=assign,
            measured_s=[float(L[i, cover.kernels[a]]) for i, a in enumerate(assign)],
            predicted_s=[float(P[i, a]) for i, a in enumerate(assign)],
            best_trial_s=[float(v) for v in L.min(axis=1)],
            trials=self.trials_done(), verified=verified, between=between)

    def between(self, chosen: list, L: np.ndarray) -> tuple:
        """For the sizes between the samples, the chosen kernel estimated fastest: each kernel's measured runs
        (L: samples x chosen) give its throughput with perfect fit (median over the samples), which the
        analytic adaptation carries to any size. Without this the dispatcher sends a size to its nearest
        sample's kernel: seq 8 got the M = 1 GEMV kernel, about 3x slower than the M = 37 one."""
        op, cores = self.task.op, self.hw.cores
        if len(chosen) < 2 or self.task.kind != "dense":
            return ()
        fits = []
        for j, t in enumerate(chosen):
            f = [op.flop(s) / (L[i, j] * adaptation(op, t, s, cores)) for i, s in enumerate(self.samples.values)
                 if math.isfinite(L[i, j]) and L[i, j] > 0]
            fits.append(float(np.median(f)) if f else 0.0)
        sizes = _grid(op.lo, op.hi)
        est = np.array([[op.flop(s) / (f * adaptation(op, t, s, cores)) if f > 0 else math.inf
                         for t, f in zip(chosen, fits)] for s in sizes])
        return tuple((int(s), int(j)) for s, j in zip(sizes, est.argmin(axis=1)))
