"""The shared cost model of the joint search (docs/tuning.md#cost-model).

f(k): the throughput (FLOP/s) micro-kernel k reaches with perfect fit, learned by XGBoost from shape-free
features. a(S, k): the analytic adaptation to shape S (space.adaptation). Predicted latency:
    latency(S, k) = flop(S) / (f(k) * a(S, k))
Every measurement, on any shape, teaches the one model: its label is flop(S) / a(S, k) / latency.

Two objectives (`edgepack tune --cost-model reg|rank`):
- `reg`: squared error on log f(k). Its prediction is a throughput.
- `rank`: XGBoost `rank:pairwise` over the same labels, one query group per task (the labels are shape-free,
  so a task's kernels are comparable whatever shape each was measured on). Its score only orders kernels,
  but the adaptation multiplies a throughput, and the search's fitness and the set cover add latencies
  over samples. So the score is calibrated on the measurements it was trained on: log f = alpha x score + beta
  (least squares). That keeps the rank model's order inside a task, gives latencies in seconds, and lets
  the median relative error apply to both objectives.
The default is `reg`. For the same budget the two give final kernels that tie within the noise: on the
MiniLM-6 of benchmarks/tune_zoo.py (400 trials) rank is x1.02 by the ratio of onnxruntime ratios, faster at
2 of 7 sizes; on one 768x768 layer (benchmarks/results/cost_model_objectives.json) both chose the same main
kernel in every run. reg's latencies are 5x closer to the measured (3% vs 16% median error), and the
misprediction check (search.py) and the predicted-vs-measured report read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .space import Hardware, adaptation, features


OBJECTIVES = {"reg": "reg:squarederror", "rank": "rank:pairwise"}


@dataclass(frozen=True)
class Observation:
    task: object  # space.DenseTask | space.ConvTask
    tiles: object  # DenseTiles | ConvTiles
    rows: int
    latency_s: float


@dataclass
class CostModel:
    hw: Hardware
    objective: str = "reg"  # "reg" | "rank" (see the module doc)
    min_observations: int = 8  # below this, rank by the analytic prior only
    seed: int = 0
    observations: list[Observation] = field(default_factory=list)
    weights: dict = field(default_factory=dict)  # task -> weight of its samples in the fit (default 1)
    _booster: object = None
    _calibration: tuple[float, float] = (1.0, 0.0)  # log f = alpha * score + beta (rank only)

    def observe(self, obs: list[Observation]) -> None:
        self.observations += [o for o in obs if o.latency_s > 0 and math.isfinite(o.latency_s)]

    def _label(self, o: Observation) -> float:
        a = adaptation(o.task, o.tiles, o.rows, self.hw.cores)
        return math.log(o.task.flop(o.rows) / a / o.latency_s)  # log FLOP/s: errors become relative

    def fit(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"cost model objective {self.objective!r}: expected one of {', '.join(OBJECTIVES)}")
        if len(self.observations) < self.min_observations:
            self._booster = None
            return
        import xgboost as xgb

        obs = self._grouped()
        x = np.stack([features(o.task, o.tiles, self.hw) for o in obs])
        y = np.array([self._label(o) for o in obs])
        params = {"max_depth": 4, "eta": 0.2, "subsample": 0.9, "min_child_weight": 1, "seed": self.seed,
                  "nthread": 1, "objective": OBJECTIVES[self.objective]}
        if self.objective == "rank":
            # pairs drawn over the whole group (XGBoost's default, "topk", only orders the top few)
            params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
            groups = {}
            qid = [groups.setdefault(o.task, len(groups)) for o in obs]
            dm = xgb.DMatrix(x, label=y, qid=qid)
            if self.weights:  # a ranking weighs whole query groups: one weight per task
                dm.set_weight(np.array([self.weights.get(t, 1.0) for t in groups], dtype=np.float32))
            self._booster = xgb.train(params, dm, num_boost_round=120)
            self._calibration = _line(self._booster.predict(xgb.DMatrix(x)), y,
                                      np.array([self.weights.get(o.task, 1.0) for o in obs]))
        else:
            w = np.array([self.weights.get(o.task, 1.0) for o in obs], dtype=np.float32)
            self._booster = xgb.train(params, xgb.DMatrix(x, label=y, weight=w), num_boost_round=120)

    @property
    def fitted(self) -> bool:
        """Predictions come from XGBoost (not the analytic prior)."""
        return self._booster is not None

    def reweight(self, task, weight: float) -> None:
        """Weigh `task`'s samples `weight` times (never less than before) from the next fit on."""
        self.weights[task] = max(self.weights.get(task, 1.0), float(weight))

    def _grouped(self) -> list[Observation]:
        """The observations, those of one task together (XGBoost wants a query group's rows contiguous)."""
        if self.objective != "rank":
            return self.observations
        first = {}
        for i, o in enumerate(self.observations):
            first.setdefault(o.task, i)
        return sorted(self.observations, key=lambda o: first[o.task])

    def throughput(self, task, tiles: list) -> np.ndarray:
        """f(k) in FLOP/s for each configuration (a relative prior before enough measurements)."""
        x = np.stack([features(task, t, self.hw) for t in tiles])
        if self._booster is None:
            # Prior: more accumulators (up to the register budget) and wider vectors do more per load.
            return (x[:, 3] * np.minimum(x[:, 4], 4.0) + 1.0) * 1e8
        import xgboost as xgb

        alpha, beta = self._calibration
        return np.exp(alpha * self._booster.predict(xgb.DMatrix(x)) + beta)

    def predict_latency(self, task, tiles: list, rows: int) -> np.ndarray:
        f = self.throughput(task, tiles)
        a = np.array([adaptation(task, t, rows, self.hw.cores) for t in tiles])
        return task.flop(rows) / (f * a)


def relative_errors(model: CostModel, held: list[Observation]) -> list[float]:
    """|predicted - measured| / measured latency for each held-back measurement."""
    return [abs(model.predict_latency(o.task, [o.tiles], o.rows)[0] - o.latency_s) / o.latency_s for o in held]


def holdout_error(model: CostModel, held: list[Observation]) -> float:
    """Median relative error of predicted vs measured latency on measurements the model did not see."""
    errs = relative_errors(model, held)
    return float(np.median(errs)) if errs else float("nan")


def _line(score: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """Weighted least-squares alpha, beta in y = alpha * score + beta (beta alone when the scores are all
    equal); `w`: each sample's weight (default 1)."""
    if np.ptp(score) == 0:
        return 0.0, float(np.average(y, weights=w))
    alpha, beta = np.polyfit(score, y, 1, w=None if w is None else np.sqrt(w))
    return float(alpha), float(beta)


@dataclass(frozen=True)
class Holdout:
    """How well a model predicts measurements it did not see (nan where there were too few)."""
    error: float  # median relative error of the latency
    tau: float  # Kendall's tau of predicted vs measured throughput, within each task, weighted by its pairs
    recall: float  # share of each task's measured top 5 found in its predicted top 20 (tasks with more than
    #                20 held-back measurements only: with fewer it is 1 by construction; nan when none has)
    n: int  # held-back measurements

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def holdout_quality(model: CostModel, held: list[Observation], top: int = 5, among: int = 20) -> Holdout:
    """Error and rank quality on held-back measurements. Throughput flop / latency is compared, not
    latency, so measurements on different shapes of one task are comparable."""
    from scipy.stats import kendalltau

    taus, pairs, hits, wanted = [], [], 0, 0
    for task in dict.fromkeys(o.task for o in held):
        group = [o for o in held if o.task == task]
        if len(group) < 2:
            continue
        measured = np.array([o.task.flop(o.rows) / o.latency_s for o in group])
        predicted = np.array([o.task.flop(o.rows) / model.predict_latency(o.task, [o.tiles], o.rows)[0]
                              for o in group])
        tau = kendalltau(predicted, measured).statistic
        if math.isfinite(tau):
            taus.append(tau)
            pairs.append(len(group) * (len(group) - 1) / 2)
        if len(group) <= among:  # every held-back kernel is in the predicted top 20: recall 1, says nothing
            continue
        best = set(np.argsort(-measured, kind="stable")[:top])
        hits += len(best & set(np.argsort(-predicted, kind="stable")[:among]))
        wanted += len(best)
    return Holdout(error=holdout_error(model, held),
                   tau=float(np.average(taus, weights=pairs)) if taus else float("nan"),
                   recall=hits / wanted if wanted else float("nan"), n=len(held))
