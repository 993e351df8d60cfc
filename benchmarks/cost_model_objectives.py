"""Cost-model objective: `--cost-model rank` vs `reg` on the same trial budget (issue 15, part 1).

A small comparison, not the zoo: one BERT-sized dense layer (Y = X W + b, X [M, 768], W 768x768, M = seq in
1..256) tuned with T trials on this machine (board "host", TVM RPC), once per objective and seed, each run in
a fresh database. Every (kernel, rows) pair is measured for real once and the number replayed to every later
run that asks for it (a measurement cache in front of the RPC measurer), so the runs differ only by what the
search chose, not by the noise of the machine.
Figures per run: the final kernel set's weighted latency over the samples (every run's set re-measured side by
side at the end, as the package runs it: the machine is shared, numbers taken minutes apart do not compare),
and the cost model on held-back measurements (median relative error, Kendall's tau, measured top 5 among
predicted top 20). Writes benchmarks/results/cost_model_objectives.json.

    nice python benchmarks/cost_model_objectives.py [--trials 8 16] [--seeds 0 1] [--out NAME.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgepack.board import load_board
from edgepack.tune.farm import LocalRPC
from edgepack.tune.rpc_measurer import RPCMeasurer
from edgepack.tune.trial import kernel_name
from edgepack.tune.tuner import TuneOptions, tune_model

RESULTS = Path(__file__).resolve().parent / "results"
D = 768


def dense_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((D, D)) / 30).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])]
    g = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", D])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


class CachedMeasurer:
    """The RPC measurer, each (kernel name, arguments) measured once and replayed after that."""

    def __init__(self, inner):
        self.inner, self.cache, self.real = inner, {}, 0

    def measure_batch(self, inputs):
        keys = [(i.func_name, repr(i.args_spec)) for i in inputs]
        todo = [j for j, k in enumerate(keys) if k not in self.cache]
        todo = list({keys[j]: j for j in todo}.values())
        for j, r in zip(todo, self.inner.measure_batch([inputs[j] for j in todo]) if todo else []):
            self.cache[keys[j]] = r
        self.real += len(todo)
        return [self.cache[k] for k in keys]


def final_latencies(runs: list[dict], model: Path, board, m, rounds: int) -> None:
    """Every run's final kernels re-measured together, as the package runs them (main kernel on each sample's
    whole tiles, edge kernel on the rest), `rounds` times in shuffled order: the machine is shared, so only
    numbers taken side by side compare. Sets run["final_latency_us"] (weighted over the samples)."""
    from edgepack.pipeline import lower_model, prepare
    from edgepack.tune.tasks import extract_tasks
    from edgepack.tune.trial import main_variant_input

    mod, dr = prepare(model, {"seq": (1, 256)})
    (task,) = extract_tasks(lower_model("dense", mod, dr), dr)
    par, lanes = board.target.cores > 1, board.vector_lanes_f32
    need = {}
    for r in runs:
        t = r["_result"]
        r["_parts"] = []
        for s, j in zip(t.samples.values, t.assign):
            main = t.mains[j]
            whole, rest = s - s % main.rows, s % main.rows
            parts = ([(main, whole)] if whole else []) + ([(t.edge, rest)] if rest else [])
            r["_parts"].append(parts)
            need.update(dict.fromkeys(parts))
    pairs = list(need)
    inputs = {p: main_variant_input(task.func, task.split, task.block, p[0], p[1], par, lanes) for p in pairs}
    times = {p: [] for p in pairs}
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        order = [pairs[i] for i in rng.permutation(len(pairs))]
        for p, res in zip(order, m.measure_batch([inputs[p] for p in order])):
            times[p].append(res.median_s)
    med = {p: float(np.median(v)) for p, v in times.items()}
    for r in runs:
        t = r.pop("_result")
        w = np.array(t.samples.weights)
        lat = [sum(med[p] for p in parts) for parts in r.pop("_parts")]
        r["final_latency_us"] = float(np.dot(w, lat) / w.sum() * 1e6)


def _commit() -> str:
    import subprocess

    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent)
    return r.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, nargs="+", default=[8, 16], help="budgets (one run per budget, seed, objective)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--samples", default="8")
    ap.add_argument("--rounds", type=int, default=3, help="re-measurements of every final kernel set, interleaved")
    ap.add_argument("--out", default="cost_model_objectives.json", help="file name under benchmarks/results/")
    a = ap.parse_args()
    board = load_board("host")
    runs = []
    with tempfile.TemporaryDirectory() as tmp, LocalRPC(key=board.rpc_key) as farm, \
            RPCMeasurer.local(board, farm, timeout_s=60) as m:
        tmp = Path(tmp)
        cached = CachedMeasurer(m)
        model = dense_model(tmp / "dense.onnx")
        for trials, seed in ((tr, sd) for tr in a.trials for sd in a.seeds):
            for objective in ("reg", "rank"):
                t0 = time.perf_counter()
                rep = tune_model(model, board, {"seq": (1, 256)}, tmp / f"{objective}_{trials}_{seed}.db", cached,
                                 TuneOptions(trials=trials, samples=a.samples, seed=seed, progress=False,
                                             cost_model=objective))
                (t,) = rep.tasks
                w = np.array(t.samples.weights)
                row = {"objective": objective, "budget": trials, "seed": seed, "seconds": time.perf_counter() - t0,
                       "weighted_latency_us": float(np.dot(w, t.measured_s) / w.sum() * 1e6),
                       "kernels": [kernel_name(k) for k in t.mains], "edge": kernel_name(t.edge) if t.edge else None,
                       "holdout": rep.holdout.to_json(), "model_off_by": t.model_off_by,
                       "measured_picks": t.measured_picks, "trials": t.trials, "verified": t.verified}
                runs.append(row | {"_result": t})
                print(json.dumps(row), flush=True)
        real = cached.real
        final_latencies(runs, model, board, m, a.rounds)
    def mean(rs, f):
        v = [f(r) for r in rs if f(r) is not None]
        return float(np.mean(v)) if v else None

    summary = {}
    for trials in a.trials:
        by = {o: [r for r in runs if r["objective"] == o and r["budget"] == trials] for o in ("reg", "rank")}
        sm = {o: {"final_latency_us_mean": mean(rs, lambda r: r["final_latency_us"]),
                  "weighted_latency_us_mean": mean(rs, lambda r: r["weighted_latency_us"]),
                  "tau_mean": mean(rs, lambda r: r["holdout"]["tau"]),
                  "recall_mean": mean(rs, lambda r: r["holdout"]["recall"]),
                  "median_error_mean": mean(rs, lambda r: r["holdout"]["error"])} for o, rs in by.items()}
        sm["rank_vs_reg_latency"] = (sm["reg"]["final_latency_us_mean"]
                                     / sm["rank"]["final_latency_us_mean"])  # > 1: rank's kernels faster
        summary[f"trials_{trials}"] = sm
    out = {"benchmark": "cost_model_objectives", "machine": platform.processor() or platform.machine(),
           "cores": board.target.cores, "layer": f"dense {D}x{D}, M = seq in 1..256", "budgets": a.trials, "commit": _commit(),
           "samples": a.samples, "seeds": a.seeds, "real_measurements": real, "summary": summary, "runs": runs,
           "note": "one layer, few seeds: too small to choose the default. weighted_latency_us: the run's own "
                   "verification numbers (taken at different times on a shared machine); final_latency_us: every "
                   "run's kernels re-measured side by side (compare these). rank_vs_reg_latency > 1: rank's final "
                   "kernels are faster"}
    print(json.dumps(summary, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
