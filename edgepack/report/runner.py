"""Measure a package size by size through a Device (any board), optionally interleaved with onnxruntime.

With a baseline, each size is measured in `rounds` rounds, and every round runs edgepack then each
onnxruntime session then the call-cost probe, so all contenders see the same machine state (a shared, noisy
machine drifts over seconds; alternating keeps the ratios honest). The repeat count and minimum time are
split over the rounds; onnxruntime gets as many timed calls per round as edgepack did.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, replace

from ..codegen.bundle import Bundle
from ..deploy.device import BenchSettings
from ..deploy.io import random_inputs
from .schema import BaselineFigures, SizeResult, Stats, operators_of


def settings_from_board(board, warmup=None, repeat=None, min_time_ms=None, threads=None,
                        profile=False) -> BenchSettings:
    """Flags where given, else the board file's [timing]."""
    t = board.timing
    pick = lambda v, d: d if v is None else v  # noqa: E731
    return BenchSettings(warmup=pick(warmup, t.warmup), repeat=pick(repeat, t.repeat),
                         min_time_ms=pick(min_time_ms, t.min_repeat_ms), threads=threads, profile=profile)


def _round_settings(s: BenchSettings, rounds: int, first: bool) -> BenchSettings:
    # profile once per size: the profiled binary runs separately and its per-call means need no repeats
    return replace(s, repeat=max(1, math.ceil(s.repeat / rounds)), min_time_ms=s.min_time_ms // rounds,
                   profile=s.profile and first)


def _baseline_figures(threads: int, samples: list[int], cost: float, ep_median: float) -> BaselineFigures:
    st = Stats.of(samples)
    return BaselineFigures(name="onnxruntime", threads=threads, stats=st, samples=samples, call_cost_ns=cost,
                           speedup=st.median / ep_median,
                           speedup_without_call_cost=max(st.median - cost, 0.0) / ep_median)


def measure_size(device, bundle: Bundle, dims: dict[str, int], settings: BenchSettings, rounds: int = 1,
                 baseline=None) -> SizeResult:
    feeds = baseline.feeds(random_inputs(bundle.manifest, dims)) if baseline else None
    samples: list = []
    calls: list[dict] = []
    threads, unit = None, "ns"
    base: dict[str, list[int]] = {}
    for r in range(rounds):
        res = device.bench(bundle, dims, _round_settings(settings, rounds, r == 0))
        samples += res.samples_ns
        calls = calls or res.calls
        threads, unit = res.threads, res.unit
        if baseline is not None:
            for k, v in baseline.measure(feeds, len(res.samples_ns), settings.warmup).items():
                base.setdefault(k, []).extend(v)
    st = Stats.of(samples)
    figures = {}
    if base:
        cost = statistics.median(base.pop("call_cost"))
        figures = {k: _baseline_figures(baseline.sessions[k][0], v, cost, st.median) for k, v in base.items()}
    return SizeResult(dims=dict(dims), unit=unit, threads=threads, stats=st, samples=samples, calls=calls,
                      operators=operators_of(calls) if calls else [], baselines=figures)


def measure(device, bundle: Bundle, sizes: list[dict[str, int]], settings: BenchSettings, rounds: int = 1,
            baseline=None, cooldown_ms: int = 0, progress: bool = True) -> list[SizeResult]:
    from tqdm import tqdm

    out = []
    for i, dims in enumerate(tqdm(sizes, desc="bench", unit="size", disable=None if progress else True)):
        if i and cooldown_ms:
            time.sleep(cooldown_ms / 1000)  # the board's [timing] cooldown: let clocks and caches settle
        out.append(measure_size(device, bundle, dims, settings, rounds, baseline))
    return out


def settings_dict(s: BenchSettings, rounds: int, cooldown_ms: int) -> dict:
    return asdict(s) | {"rounds": rounds, "cooldown_ms": cooldown_ms}


def package_facts(bundle: Bundle) -> dict:
    m = bundle.manifest
    return {"model": m["model"], "dims": [{k: d[k] for k in ("name", "min", "max")} for d in m["dims"]],
            "board": m["board"], "edgepack_version": m.get("edgepack_version", "unknown"),
            "tvm_version": m.get("tvm_version", "unknown"), "tuned": bool(m.get("tuned", False)),
            "database_id": m.get("database_id"), "created": m.get("created"), "path": str(bundle.path),
            "kernels": sum(len(v) for v in m.get("kernels", {}).values()), "tuning": tuning_facts(m)}


def tuning_facts(manifest: dict) -> list[dict] | None:
    """Per tuned kernel, the cost model's prediction against the latency measured at verification (from the
    tuning database's selection, carried by the manifest); None for a package built without one."""
    ver = (manifest.get("tuning") or {}).get("verification")
    if not ver:
        return None
    num = lambda v: float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None  # noqa: E731
    return [{"kernel": k, "samples": [int(x) for x in v.get("samples", [])],
             "predicted_s": [num(x) for x in v.get("predicted_s", [])],
             "measured_s": [num(x) for x in v.get("measured_s", [])],
             "predicted_over_measured": num(v.get("predicted_over_measured")),
             "model_off_by": num(v.get("model_off_by")), "model_off": bool(v.get("model_off")),
             "measured_picks": int(v.get("measured_picks") or 0), "cost_model": v.get("cost_model"),
             "search_off_by": num(v.get("search_off_by")), "reweighted": num(v.get("reweighted")),
             "measured_trials": int(v.get("measured_trials") or 0)}
            for k, v in ver.items()]
