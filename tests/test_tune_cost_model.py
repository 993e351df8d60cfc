"""The cost model learns f(k) from measurements taken on any shape and predicts latency through the
analytic adaptation. Ground truth here is a synthetic machine, so the test knows the right answers."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edgepack.tune.cost_model import CostModel, Observation, holdout_error, holdout_quality
from edgepack.tune.space import DenseTask, Hardware, adaptation, candidates

pytestmark = pytest.mark.unit

HW = Hardware(lanes=8, registers=16, cores=2)
TASKS = [DenseTask("qkv", 64, 64, 1, 256), DenseTask("ffn1", 256, 64, 1, 256), DenseTask("ffn2", 64, 256, 1, 256)]


def true_throughput(task, t) -> float:
    """A synthetic board: throughput rises with accumulators until the register budget, prefers K unroll 2."""
    acc = t.rows * t.cols // HW.lanes
    return 5e9 * min(acc, 12) / 12 * (1.1 if t.unroll_k == 2 else 1.0) * (1 + math.log2(task.k) / 20)


def measure(task, t, rows, rng) -> Observation:
    lat = task.flop(rows) / (true_throughput(task, t) * adaptation(task, t, rows, HW.cores))
    return Observation(task, t, rows, lat * rng.uniform(0.97, 1.03))  # 3% measurement noise


def test_learns_from_any_shape_and_predicts_held_back_measurements():
    rng = random.Random(0)
    obs = [measure(task, t, rng.randint(1, 256), rng) for task in TASKS for t in candidates(task, HW)]
    rng.shuffle(obs)
    train, held = obs[: int(0.8 * len(obs))], obs[int(0.8 * len(obs)):]
    model = CostModel(HW)
    model.observe(train)
    model.fit()
    err = holdout_error(model, held)
    assert err < 0.15, f"median relative error {err:.2%}"
    # it ranks: the predicted best configuration is within 10% of the true best on a fresh shape
    task = TASKS[1]
    space = candidates(task, HW)
    pred = model.predict_latency(task, space, 77)
    true = np.array([task.flop(77) / (true_throughput(task, t) * adaptation(task, t, 77, HW.cores)) for t in space])
    assert true[int(np.argmin(pred))] <= 1.1 * true.min()


def test_prior_before_enough_measurements():
    model = CostModel(HW)
    model.fit()  # no observations: analytic prior
    space = candidates(TASKS[0], HW)
    pred = model.predict_latency(TASKS[0], space, 64)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)
    best = space[int(np.argmin(pred))]
    assert best.rows * best.cols // HW.lanes >= 8  # prefers a full register tile


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_orders_held_back_candidates(objective):
    """Each candidate measured on two random shapes; 40% held back (about 45 per task, so the top-20 recall
    is not trivially 1). The rank score, calibrated to a throughput, also predicts latency."""
    rng = random.Random(0)
    obs = [measure(task, t, rng.randint(1, 256), rng) for task in TASKS for t in candidates(task, HW) for _ in "ab"]
    rng.shuffle(obs)
    cut = int(0.6 * len(obs))
    model = CostModel(HW, objective=objective)
    model.observe(obs[:cut])
    model.fit()
    q = holdout_quality(model, obs[cut:])
    print(f"{objective}: tau {q.tau:.3f}, recall top-5 in top-20 {q.recall:.2f}, median error {q.error:.1%}")
    assert q.tau >= 0.8 and q.recall >= 0.8
    assert q.error < (0.25 if objective == "rank" else 0.15)


def test_unknown_objective():
    with pytest.raises(ValueError, match="expected one of reg, rank"):
        CostModel(HW, objective="ndcg").fit()
