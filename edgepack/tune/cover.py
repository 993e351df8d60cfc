"""Pick a small kernel set for a range of shapes: greedy weighted set cover with a growing slack
(docs/tuning.md#set-cover).

Input: a latency matrix L[samples x kernels] (seconds, predicted or measured; inf = the kernel cannot run the
sample or its measurement failed), sample weights w and a cap K on the number of kernels (a board setting:
code size matters on an MCU).

For each slack s of a growing schedule (1.0, 1.05, ..., inf) a kernel *covers* a sample when its latency is at
most s x the sample's best latency (at s = inf: when it can run it at all). Greedy set cover picks, until every
runnable sample is covered, the kernel covering the largest weighted uncovered mass (ties: more uncovered
samples, then lower weighted latency on the samples it newly covers, then the lower index). The first slack
whose cover has at most K kernels wins: the tightest slack that fits is the fastest set we can afford. Each
sample then runs on its fastest chosen kernel.

If even s = inf needs more than K kernels (some sample is runnable only by kernels that run nothing else),
the first K kernels of the s = inf greedy order are kept (greedy maximum coverage); the samples none of them
can run are reported in `Cover.uncovered` and assigned -1.

Refinement (on by default, `refine=False` gives the plain slack cover): the slack cover bounds each sample's
loss but not the weighted sum, e.g. with K = 1 it takes the first kernel within 2x of every sample's best even
when another kernel has a smaller weighted total. So the kept set is then improved by 1-swap local search
(replace one chosen kernel by one unchosen kernel while that lowers the objective: first never leave a sample
uncovered that was covered, then the weighted latency sum), and kernels no sample runs on are dropped. The
set never grows: the greedy's size is kept as the code-size budget actually needed. With K = 1 the result is
the kernel of least weighted total.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_SLACKS: tuple[float, ...] = (1.0, 1.05, 1.1, 1.25, 1.5, 2.0, math.inf)


@dataclass(frozen=True)
class Cover:
    kernels: list[int]  # chosen kernel (column) indices in greedy pick order (refinement swaps in place); <= K
    assign: np.ndarray  # [samples] int: each sample's fastest chosen kernel, -1 when none of them can run it
    slack: float  # the slack whose greedy cover was kept (inf also when nothing fitted: see `complete`); after
    #               refinement a sample may sit beyond it when that lowers the weighted sum
    cost: float  # sum of w x latency over samples on their assigned kernel (inf if a weighted sample has none)
    complete: bool  # every runnable sample has a chosen kernel that runs it
    uncovered: list[int]  # samples with no runnable chosen kernel (including samples no kernel can run)


def greedy_cover(latency: np.ndarray, weights: Sequence[float] | np.ndarray | None = None, k_max: int = 8,
                 slacks: Sequence[float] = DEFAULT_SLACKS, refine: bool = True) -> Cover:
    """Choose at most `k_max` kernels (columns of `latency`) and a kernel per sample. See the module doc."""
    L, w = _check(latency, weights)
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    sched = _check_slacks(slacks)
    n, m = L.shape
    if n == 0 or m == 0:
        assign = np.full(n, -1, dtype=np.int64)
        return Cover([], assign, sched[0], assignment_cost(L, w, assign), True, list(range(n)))

    finite = np.isfinite(L)
    runnable = finite.any(axis=1)
    best = np.where(runnable, np.where(finite, L, np.inf).min(axis=1), np.inf)
    picks: list[int] = []
    slack = sched[-1]
    for s in sched:
        slack = s
        if math.isinf(s):
            covers = finite
        else:
            covers = finite & (L <= s * best[:, None])
        picks = _greedy(L, w, covers, runnable)
        if len(picks) <= k_max:
            break
    complete = len(picks) <= k_max
    picks = picks[:k_max]
    if refine:
        picks = _refine(L, w, runnable, picks)
    assign = assign_best(L, picks)
    uncovered = [int(i) for i in np.flatnonzero(assign < 0)]
    return Cover(picks, assign, slack, assignment_cost(L, w, assign), complete, uncovered)


def _greedy(L: np.ndarray, w: np.ndarray, covers: np.ndarray, need: np.ndarray) -> list[int]:
    """Greedy set cover of the `need` samples by the columns of the boolean matrix `covers`."""
    uncovered = need.copy()
    wl = np.where(covers, L, 0.0) * w[:, None]  # w x latency where covered (covered => finite)
    tol = 1e-12 * max(float(w.sum()), 1e-300)
    picks: list[int] = []
    while uncovered.any():
        newly = covers & uncovered[:, None]
        mass = w @ newly
        count = newly.sum(axis=0)
        if count.max() == 0:  # cannot happen: each runnable sample is covered by its best kernel at any slack
            break
        cand = np.flatnonzero((count > 0) & (mass >= mass.max() - tol))
        cand = cand[count[cand] == count[cand].max()]
        lat = (wl * newly)[:, cand].sum(axis=0)
        k = int(cand[np.flatnonzero(lat <= lat.min() + 1e-12 * max(abs(lat.min()), 1e-300))[0]])
        picks.append(k)
        uncovered &= ~covers[:, k]
    return picks


def _objective(L: np.ndarray, w: np.ndarray, runnable: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """[3 x candidates] rows to minimise in order: uncovered weight, uncovered count, weighted latency of the
    covered samples. `lat` is [samples x candidates]: each sample's latency on its best kernel of a candidate set."""
    miss = np.isinf(lat) & runnable[:, None]
    return np.stack([w @ miss, miss.sum(axis=0).astype(float), w @ np.where(np.isfinite(lat), lat, 0.0)])


def _refine(L: np.ndarray, w: np.ndarray, runnable: np.ndarray, picks: list[int]) -> list[int]:
    """Best-improvement 1-swap local search on the kernel set, then drop kernels no sample is assigned to."""
    chosen = list(picks)
    if not chosen:
        return chosen
    cur = _objective(L, w, runnable, L[:, chosen].min(axis=1, keepdims=True))[:, 0]
    while True:
        best = None  # (objective, position, kernel)
        for pos in range(len(chosen)):
            rest = [k for i, k in enumerate(chosen) if i != pos]
            base = L[:, rest].min(axis=1) if rest else np.full(L.shape[0], np.inf)
            obj = _objective(L, w, runnable, np.minimum(base[:, None], L))  # [3 x m]: swap chosen[pos] -> k
            obj[:, chosen] = np.inf  # not a swap
            k = int(np.lexsort(obj[::-1])[0])  # lexicographic minimum; ties: the lower index
            ref = cur if best is None else best[0]
            if _less(obj[:, k], ref):
                best = (obj[:, k], pos, k)
        if best is None:
            break
        cur, pos, k = best
        chosen[pos] = k
    used = set(assign_best(L, chosen).tolist())
    return [k for k in chosen if k in used] or chosen[:1]


def _less(a: np.ndarray, b: np.ndarray) -> bool:
    """Lexicographic a < b, each component compared with a relative tolerance (so the search terminates)."""
    for x, y in zip(a.tolist(), b.tolist()):
        if x == y:
            continue
        if math.isinf(x) or math.isinf(y):
            return x < y
        tol = 1e-12 * max(abs(x), abs(y))
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def assign_best(latency: np.ndarray, kernels: Sequence[int]) -> np.ndarray:
    """Each sample's fastest kernel among `kernels` (ties: the earlier in `kernels`), -1 if none can run it."""
    L = np.asarray(latency, dtype=float)
    ks = np.asarray(list(kernels), dtype=np.int64)
    if ks.size == 0:
        return np.full(L.shape[0], -1, dtype=np.int64)
    sub = L[:, ks]
    j = np.argmin(sub, axis=1)  # first minimum: the earlier kernel on ties
    ok = np.isfinite(sub[np.arange(L.shape[0]), j])
    return np.where(ok, ks[j], -1).astype(np.int64)


def assignment_cost(latency: np.ndarray, weights: Sequence[float] | np.ndarray | None,
                    assign: Sequence[int] | np.ndarray) -> float:
    """sum_i w_i x L[i, assign_i]. inf when a sample of positive weight is unassigned (-1) or assigned a kernel
    that cannot run it; samples of weight 0 cost nothing."""
    L, w = _check(latency, weights)
    a = np.asarray(assign, dtype=np.int64)
    if a.shape != (L.shape[0],):
        raise ValueError(f"assign has shape {a.shape}, expected ({L.shape[0]},)")
    if ((a < -1) | (a >= L.shape[1])).any():
        raise ValueError("assign holds kernel indices outside the matrix")
    lat = np.full(L.shape[0], np.inf)
    on = a >= 0
    lat[on] = L[np.flatnonzero(on), a[on]]
    pos = w > 0
    return float((w[pos] * lat[pos]).sum())


def cover_cost(latency: np.ndarray, weights: Sequence[float] | np.ndarray | None, kernels: Sequence[int]) -> float:
    """The weighted latency of a kernel set, each sample on its fastest kernel of the set. Use it to score a
    cover chosen on predicted latencies against measured ones (docs/tuning.md#joint-search, verification)."""
    return assignment_cost(latency, weights, assign_best(latency, kernels))


def _check(latency, weights) -> tuple[np.ndarray, np.ndarray]:
    L = np.asarray(latency, dtype=float)
    if L.ndim != 2:
        raise ValueError(f"latency must be a 2-D [samples x kernels] matrix, got shape {L.shape}")
    if np.isnan(L).any():
        raise ValueError("latency holds NaN: use inf for a kernel that cannot run a sample")
    if (L < 0).any():
        raise ValueError("latency holds negative values")
    if weights is None:
        w = np.ones(L.shape[0])
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (L.shape[0],):
            raise ValueError(f"weights has shape {w.shape}, expected ({L.shape[0]},)")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("weights must be finite and >= 0")
        if L.shape[0] and w.sum() == 0:
            raise ValueError("weights sum to 0")
    return L, w


def _check_slacks(slacks: Sequence[float]) -> list[float]:
    s = [float(x) for x in slacks]
    if not s or any(math.isnan(x) or x < 1.0 for x in s) or any(b <= a for a, b in zip(s, s[1:])):
        raise ValueError(f"slacks must be a strictly increasing sequence of values >= 1, got {list(slacks)}")
    if not math.isinf(s[-1]):
        s.append(math.inf)  # the last resort: any kernel that runs a sample covers it
    return s
