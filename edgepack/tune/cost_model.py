"""The shared cost model of the joint search (docs/tuning.md#cost-model).

f(k): the throughput (FLOP/s) micro-kernel k reaches with perfect fit, learned by XGBoost from shape-free
features. a(S, k): the analytic adaptation to shape S (space.adaptation). Predicted latency:
    latency(S, k) = flop(S) / (f(k) * a(S, k))
Every measurement, on any shape, teaches the one model: its label is flop(S) / a(S, k) / latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .space import Hardware, adaptation, features


@dataclass(frozen=True)
class Observation:
    task: object  # space.DenseTask | space.ConvTask
    tiles: object  # DenseTiles | ConvTiles
    rows: int
    latency_s: float


@dataclass
class CostModel:
    hw: Hardware
    min_observations: int = 8  # below this, rank by the analytic prior only
    seed: int = 0
    observations: list[Observation] = field(default_factory=list)
    _booster: object = None

    def observe(self, obs: list[Observation]) -> None:
        self.observations += [o for o in obs if o.latency_s > 0 and math.isfinite(o.latency_s)]

    def _label(self, o: Observation) -> float:
        a = adaptation(o.task, o.tiles, o.rows, self.hw.cores)
        return math.log(o.task.flop(o.rows) / a / o.latency_s)  # log FLOP/s: errors become relative

    def fit(self) -> None:
        if len(self.observations) < self.min_observations:
            self._booster = None
            return
        import xgboost as xgb

        x = np.stack([features(o.task, o.tiles, self.hw) for o in self.observations])
        y = np.array([self._label(o) for o in self.observations])
        params = {"max_depth": 4, "eta": 0.2, "subsample": 0.9, "min_child_weight": 1, "seed": self.seed,
                  "nthread": 1, "objective": "reg:squarederror"}
        self._booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=120)

    def throughput(self, task, tiles: list) -> np.ndarray:
        """f(k) in FLOP/s for each configuration (a relative prior before enough measurements)."""
        x = np.stack([features(task, t, self.hw) for t in tiles])
        if self._booster is None:
            # Prior: more accumulators (up to the register budget) and wider vectors do more per load.
            return (x[:, 3] * np.minimum(x[:, 4], 4.0) + 1.0) * 1e8
        import xgboost as xgb

        return np.exp(self._booster.predict(xgb.DMatrix(x)))

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
