"""Greedy weighted set cover with a growing slack, on synthetic latency matrices with known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from edgepack.tune.cover import assign_best, assignment_cost, cover_cost, greedy_cover

pytestmark = pytest.mark.unit

INF = math.inf


def identity_like(n: int, off: float = 10.0) -> np.ndarray:
    L = np.full((n, n), off)
    np.fill_diagonal(L, 1.0)
    return L


def test_identity_like_with_enough_budget_picks_one_per_sample():
    for k in (5, 6, 50):
        c = greedy_cover(identity_like(5), k_max=k)
        assert sorted(c.kernels) == [0, 1, 2, 3, 4]
        assert c.assign.tolist() == [0, 1, 2, 3, 4]
        assert c.slack == 1.0 and c.cost == 5.0 and c.complete and c.uncovered == []


def test_one_dominant_kernel_is_the_whole_cover():
    rng = np.random.default_rng(0)
    L = rng.uniform(2.0, 5.0, size=(20, 6))
    L[:, 3] = rng.uniform(0.5, 1.9, size=20)
    c = greedy_cover(L, k_max=4)
    assert c.kernels == [3] and (c.assign == 3).all() and c.slack == 1.0


def test_k1_picks_the_least_weighted_total():
    rng = np.random.default_rng(1)
    plain_differs = 0
    for _ in range(50):
        L = rng.uniform(0.1, 10.0, size=(rng.integers(1, 12), rng.integers(1, 9)))
        w = rng.uniform(0.0, 3.0, size=L.shape[0]) + 0.01
        c = greedy_cover(L, w, k_max=1)
        assert c.kernels == [int(np.argmin(w @ L))]
        assert c.cost == pytest.approx(float(np.min(w @ L)))
        plain = greedy_cover(L, w, k_max=1, refine=False)
        assert plain.cost >= c.cost
        plain_differs += plain.kernels != c.kernels
    assert plain_differs > 0  # why the refinement exists: the slack cover alone takes the first kernel in slack
    # where every kernel runs every sample within one slack step, the plain cover agrees
    L = np.array([[1.0, 1.02, 1.01], [1.0, 1.01, 1.02]])
    assert greedy_cover(L, [1, 1], k_max=1, refine=False).kernels == [0]
    assert greedy_cover(L, [1, 10], k_max=1, refine=False).kernels == [0]


def test_weights_change_the_answer():
    # two regimes (small / large shapes), one kernel each, budget 1: the heavier regime wins
    L = np.array([[1.0, 3.0], [1.0, 3.0], [3.0, 1.0]])
    assert greedy_cover(L, [1, 1, 1], k_max=1).kernels == [0]
    assert greedy_cover(L, [1, 1, 5], k_max=1).kernels == [1]
    # the plain slack cover with two kernels at slack 1.25: uniform weights take 0 (covers s0, s2) then 1 (s1,
    # cheaper than 2 there); a heavy s1 makes kernel 2 (covers s1 and s2) the first pick, then 0 for s0
    L = np.array([[1.0, 9.0, 9.0], [9.0, 1.0, 1.2], [1.2, 9.0, 1.0]])
    a = greedy_cover(L, [1, 1, 1], k_max=2, refine=False)
    b = greedy_cover(L, [1, 10, 1], k_max=2, refine=False)
    assert a.slack == b.slack == 1.25
    assert a.kernels == [0, 1] and a.assign.tolist() == [0, 1, 0]
    assert b.kernels == [2, 0] and b.assign.tolist() == [0, 2, 2]
    # refined, the heavy s1 gets its own best kernel: {0, 1} costs 1 + 10 + 1.2 < {2, 0}'s 1 + 12 + 1
    r = greedy_cover(L, [1, 10, 1], k_max=2)
    assert sorted(r.kernels) == [0, 1] and r.cost == pytest.approx(12.2) and r.cost < b.cost
    # and weights move the refined choice too: heavy s2 makes {0, 2} (s2 at 1.0) beat {0, 1} (s2 at 1.2)
    assert sorted(greedy_cover(L, [1, 1, 10], k_max=2).kernels) == [0, 2]


def test_growing_slack_stops_at_the_first_fit():
    # three samples, each with its own best kernel, and a generalist kernel 3 within 8% of each: K=1 takes
    # the generalist at slack 1.1, not any specialist
    L = np.array([[1.0, 5.0, 5.0, 1.08], [5.0, 1.0, 5.0, 1.08], [5.0, 5.0, 1.0, 1.08]])
    c = greedy_cover(L, k_max=1)
    assert c.kernels == [3] and c.slack == 1.1
    assert greedy_cover(L, k_max=3).kernels == [0, 1, 2]
    assert greedy_cover(L, k_max=1, slacks=[1.0, 1.05, 1.5]).slack == 1.5


def test_inf_entries_are_never_assigned():
    rng = np.random.default_rng(2)
    for _ in range(100):
        L = rng.uniform(0.1, 10.0, size=(15, 8))
        L[rng.random(L.shape) < 0.6] = INF
        k = int(rng.integers(1, 5))
        c = greedy_cover(L, rng.uniform(0.1, 2.0, 15), k_max=k)
        for i, j in enumerate(c.assign):
            if j >= 0:
                assert np.isfinite(L[i, j]) and j in c.kernels
                assert L[i, j] == min(L[i, kk] for kk in c.kernels)  # its best chosen kernel
            else:
                assert i in c.uncovered and all(np.isinf(L[i, kk]) for kk in c.kernels)
        if c.complete:
            assert c.uncovered == [i for i in range(15) if np.isinf(L[i]).all()]


def test_unrunnable_samples_are_reported_not_guessed():
    L = np.array([[1.0, INF], [INF, INF], [2.0, 1.0]])
    c = greedy_cover(L, k_max=2)
    assert c.assign.tolist() == [0, -1, 1] and c.uncovered == [1] and c.complete
    assert c.cost == INF
    assert greedy_cover(L, [1, 0, 1], k_max=2).cost == 2.0  # a sample of weight 0 costs nothing


def test_k_cap_is_respected_and_falls_back_to_max_coverage():
    rng = np.random.default_rng(3)
    for _ in range(100):
        L = rng.uniform(0.1, 10.0, size=(12, 10))
        k = int(rng.integers(1, 6))
        for refine in (True, False):
            c = greedy_cover(L, k_max=k, refine=refine)
            assert 1 <= len(c.kernels) <= k and len(set(c.kernels)) == len(c.kernels) and c.complete
            if math.isfinite(c.slack) and not refine:  # every sample within the slack of its best
                assert (L[np.arange(12), c.assign] <= c.slack * L.min(axis=1) + 1e-12).all()
    # only specialists (inf elsewhere): nothing fits K=2, keep the two heaviest samples' kernels
    L = np.full((4, 4), INF)
    np.fill_diagonal(L, 1.0)
    c = greedy_cover(L, [1, 5, 2, 3], k_max=2)
    assert c.kernels == [1, 3] and not c.complete and c.uncovered == [0, 2]
    assert c.assign.tolist() == [-1, 1, -1, 3] and c.cost == INF


def test_zero_weight_samples_are_still_covered():
    L = identity_like(3, off=INF)
    c = greedy_cover(L, [1, 0, 1], k_max=3)
    assert sorted(c.kernels) == [0, 1, 2] and c.complete and c.cost == 2.0


def test_cover_is_close_to_optimal_on_small_cases():
    """Against brute force over every set of at most K kernels (the cover may use fewer than K)."""
    rng = np.random.default_rng(4)
    worst = {True: 1.0, False: 1.0}
    for _ in range(200):
        L = rng.uniform(0.5, 4.0, size=(6, 5)) * rng.uniform(0.5, 2.0, size=(1, 5))
        w = rng.uniform(0.1, 3.0, 6)
        k = int(rng.integers(1, 4))
        for refine in (True, False):
            c = greedy_cover(L, w, k_max=k, refine=refine)
            size = len(c.kernels)
            opt = min(cover_cost(L, w, s) for s in itertools.combinations(range(5), size))
            assert c.cost >= opt - 1e-12
            worst[refine] = max(worst[refine], c.cost / opt)
    # sanity bounds, not guarantees: local search gets within a few % of the best set of its size
    assert worst[True] < 1.05 and worst[True] <= worst[False] < 2.0
    print(f"worst cost / optimum at the same size: refined {worst[True]:.3f}, plain {worst[False]:.3f}")


def test_costs_and_assignment_helpers():
    L = np.array([[1.0, 2.0, INF], [3.0, 1.0, 2.0]])
    assert assign_best(L, [2, 0]).tolist() == [0, 2]
    assert assign_best(L, []).tolist() == [-1, -1]
    assert cover_cost(L, [1, 2], [2, 0]) == 1.0 + 2 * 2.0
    assert assignment_cost(L, None, [2, 1]) == INF
    assert assignment_cost(L, [0, 1], [2, 1]) == 1.0
    c = greedy_cover(L, [1, 2], k_max=2)
    assert c.cost == assignment_cost(L, [1, 2], c.assign) == cover_cost(L, [1, 2], c.kernels)


def test_bad_inputs():
    L = identity_like(2)
    for bad in (dict(latency=np.array([[np.nan, 1.0]])), dict(latency=-L), dict(latency=np.ones(3)),
                dict(latency=L, k_max=0), dict(latency=L, weights=[1, -1]), dict(latency=L, weights=[0, 0]),
                dict(latency=L, weights=[1, 2, 3]), dict(latency=L, slacks=[1.5, 1.2]), dict(latency=L, slacks=[0.9])):
        with pytest.raises(ValueError):
            greedy_cover(**bad)
    assert greedy_cover(np.zeros((0, 3))).kernels == []
    c = greedy_cover(np.zeros((2, 0)))
    assert c.kernels == [] and c.uncovered == [0, 1]
