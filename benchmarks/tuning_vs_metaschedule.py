"""Shape-generic tuning (edgepack, DietCode-style) vs per-shape tuning (stock MetaSchedule) on BERT-base-sized
dense layers: Y = X W + b with X [M, 768], W 768x768 and 768x3072, M = seq in 1..256.

- Tuning cost: edgepack tunes both layers for the whole range with T trials each (2T for the model); the
  baseline runs MetaSchedule's `tune_tir` once per sampled M (one static task per sample, T trials each:
  8T per layer), the Ansor-like setup DietCode measured against. Ratio of wall times.
- Kernel quality, per sample: edgepack's dispatched kernel (main micro-kernel on the whole tiles + edge kernel
  on the rest, as the package runs it) vs the per-shape MetaSchedule winner, vs the predicate-guarded symbolic
  kernel (the same tiles without micro-kernels), vs numpy/BLAS. Also at 10 sizes that were not sampled
  (MetaSchedule has no kernel for those without tuning them too).
All kernels are timed through the same TVM RPC server on this machine with the board's timing settings,
interleaved in one batch. Writes benchmarks/results/tuning_vs_metaschedule.json.

    python benchmarks/tuning_vs_metaschedule.py [--trials 16] [--samples even:8] [--ms-samples 8]

The per-shape baseline takes over an hour on 2 cores (stock MetaSchedule needs minutes per static task here:
its build workers each import TVM's tensor intrinsics), so it is resumable: each static task tunes in its own
folder under `--ms-dir` (default benchmarks/results/tmp/metaschedule, kept between runs) and records its wall
time in `done.json` when it finishes; a rerun reloads finished tasks from their MetaSchedule databases and
retunes only the unfinished ones. `--ms-samples N` tunes N of the samples only (evenly picked, both ends
included) for a quick look; the JSON then marks the all-sample tuning time as an estimate.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgepack.board import load_board
from edgepack.model.symexpr import to_sym
from edgepack.pipeline import lower_model, prepare
from edgepack.schedule.dense import schedule_dense
from edgepack.schedule.pack import pack_func, packing
from edgepack.schedule.variants import specialize_rows
from edgepack.tune.farm import LocalRPC
from edgepack.tune.measure import MeasureInput
from edgepack.tune.rpc_measurer import RPCMeasurer
from edgepack.tune.search import tiles_of
from edgepack.tune.tasks import extract_tasks
from edgepack.tune.trial import main_variant_input
from edgepack.tune.tuner import TuneOptions, tune_model

RESULTS = Path(__file__).resolve().parent / "results"
LAYERS = {"qkv_like": 768, "ffn_up": 3072}
D = 768


# MetaSchedule's build workers: import it up front or time out (docs/tvm-facts.md#tensor-intrinsics-import)
def _init_builder() -> None:
    import tvm.s_tir.tensor_intrin  # noqa: F401


def bert_dense_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for name, n in LAYERS.items():
        inits += [numpy_helper.from_array((rng.standard_normal((D, n)) / 30).astype(np.float32), f"{name}_w"),
                  numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"{name}_b")]
        nodes += [helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_mm"]),
                  helper.make_node("Add", [f"{name}_mm", f"{name}_b"], [name])]
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["seq", n]))
    g = helper.make_graph(nodes, "bert_dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", D])],
                          outs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def static_func(task, rows: int):
    """The layer's kernel at a fixed M (a static task for MetaSchedule)."""
    import tvm

    f = specialize_rows(task.func, task.split, rows)
    return f.specialize({f.params[-1]: tvm.tirx.IntImm("int64", 1)})


def spec_of(func, env: dict) -> list:
    out = []
    for p in func.params:
        shape = getattr(p, "shape", None)
        out.append(env["mt"] if shape is None else ([to_sym(s).eval(env) for s in shape], str(p.dtype)))
    return out


def metaschedule_winner(task, rows: int, trials: int, board, work: Path) -> tuple[object, float]:
    """The per-shape winner and the wall time its tuning took. A finished task (work/done.json) is reloaded
    from its database; an unfinished one starts again from an empty folder."""
    import shutil

    import tvm
    import tvm.s_tir.meta_schedule as ms

    mod = tvm.IRModule({"main": static_func(task, rows).with_attr("global_symbol", "main")})
    done = work / "done.json"
    if done.exists() and json.loads(done.read_text()).get("trials") == trials:
        db = ms.database.JSONDatabase(work_dir=str(work), module_equality="structural")
        seconds = json.loads(done.read_text())["seconds"]
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        timing = board.timing
        runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
            number=timing.number, repeat=timing.repeat, min_repeat_ms=timing.min_repeat_ms))
        t0 = time.perf_counter()
        db = ms.tune_tir(mod, board.tvm_target(), str(work), max_trials_global=trials, num_trials_per_iter=8,
                         builder=ms.builder.LocalBuilder(initializer=_init_builder, timeout_sec=60), runner=runner)
        seconds = time.perf_counter() - t0
        done.write_text(json.dumps({"seconds": seconds, "trials": trials}))
    sch = ms.tir_integration.compile_tir(db, mod, board.tvm_target())
    return (None if sch is None else sch.mod["main"]), seconds


def numpy_us(n: int, rows: int, reps: int = 30) -> float:
    rng = np.random.default_rng(rows)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((rows, D), (D, n), (n,)))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.add(x @ w, b)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def ours_inputs(task, sel: dict, dispatch, rows: int, par: bool, lanes: int) -> list[MeasureInput]:
    """edgepack's kernels for `rows` as the package runs them (packed weights, main + edge)."""
    t = tiles_of(sel["mains"][dispatch(rows)])
    whole, rest = rows - rows % t.rows, rows % t.rows
    out = [main_variant_input(task.func, task.split, task.block, t, whole, par, lanes)] if whole else []
    return out + ([main_variant_input(task.func, task.split, task.block, tiles_of(sel["edge"]), rest, par, lanes)]
                  if rest else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16, help="T: trials per layer (per sample for MetaSchedule)")
    ap.add_argument("--samples", default="even:8")  # the MetaSchedule baseline was tuned on these
    ap.add_argument("--ms-samples", type=int, default=8, help="samples the per-shape baseline really tunes")
    ap.add_argument("--ms-dir", type=Path, default=RESULTS / "tmp" / "metaschedule",
                    help="where the per-shape baseline keeps its databases (resumable)")
    a = ap.parse_args()
    board = load_board("host")
    par = board.target.cores > 1
    from edgepack.schedule.defaults import schedules_for
    from edgepack.tune.db import TuningDB, kernel_variant
    from edgepack.tune.apply import dispatcher_of
    from edgepack.tune.samples import make_samples

    with tempfile.TemporaryDirectory() as tmp, LocalRPC(key=board.rpc_key) as farm, \
            RPCMeasurer.local(board, farm, timeout_s=60) as m:
        tmp = Path(tmp)
        model_path = bert_dense_model(tmp / "bert_dense.onnx")
        dims = {"seq": (1, 256)}
        t0 = time.perf_counter()
        rep = tune_model(model_path, board, dims, tmp / "t.db", m,
                         TuneOptions(trials=a.trials * len(LAYERS), samples=a.samples, progress=False))
        ours_s = time.perf_counter() - t0
        model, dr = prepare(model_path, dims)
        tasks = {t.kernel: t for t in extract_tasks(lower_model("bert_dense", model, dr), dr)}
        with TuningDB(tmp / "t.db") as db:
            variant = kernel_variant(schedules_for(board))
            sels = {k: db.selection(db.find_workload("dense", t.static_dims, t.dtype, board.name, variant),
                                    {"m": [1, 256]}) for k, t in tasks.items()}
        samples = make_samples(a.samples, dr[0]).values
        idx = sorted({round(i * (len(samples) - 1) / max(1, a.ms_samples - 1)) for i in range(a.ms_samples)})
        ms_samples = [samples[i] for i in idx]
        ms_s, winners = 0.0, {}
        for k, t in tasks.items():
            for s in ms_samples:
                winners[(k, s)], sec = metaschedule_winner(t, s, a.trials, board, a.ms_dir / f"{k}_m{s}")
                ms_s += sec
                print(f"metaschedule {k} M={s}: {sec:.0f} s", flush=True)
        rng = np.random.default_rng(1)
        unsampled = sorted(set(int(v) for v in rng.integers(1, 257, 40)) - set(samples))[:10]
        rows_out = []
        for k, t in tasks.items():
            sel = sels[k]
            td = dispatcher_of(sel, dr[0])
            dispatch = lambda r: td.choose({"seq": r})  # noqa: E731
            # the same tiles on the symbolic function (weights packed the same way): only the micro-kernels differ
            pk = packing(t.func, t.block, board.vector_lanes_f32)
            sym = pack_func(t.func, t.block, pk[0], pk[2]) if pk else t.func
            guarded = schedule_dense(sym, t.block, tiles_of(sel["mains"][0]), par).with_attr("global_symbol", "guarded")
            for s in list(samples) + unsampled:
                ours = ours_inputs(t, sel, dispatch, s, par, board.vector_lanes_f32)
                g = MeasureInput(guarded, "guarded", spec_of(guarded, {t.split.dim: s, "seq": s}))
                w = winners.get((k, s))
                wi = [MeasureInput(w.with_attr("global_symbol", "ms"), "ms", spec_of(w, {}))] if w is not None else []
                res = m.measure_batch(ours + [g] + wi)
                ours_us = sum(r.median_s for r in res[:len(ours)]) * 1e6
                row = {"layer": k, "n": t.op.n, "m": s, "sampled": s in samples, "edgepack_us": ours_us,
                       "guarded_us": res[len(ours)].median_s * 1e6, "numpy_us": numpy_us(t.op.n, s)}
                if wi and res[-1].ok:
                    row["metaschedule_us"] = res[-1].median_s * 1e6
                    row["vs_metaschedule"] = row["metaschedule_us"] / ours_us
                row["vs_guarded"], row["vs_numpy"] = row["guarded_us"] / ours_us, row["numpy_us"] / ours_us
                rows_out.append(row)
                print(json.dumps(row), flush=True)
    sampled = [r for r in rows_out if r["sampled"] and "vs_metaschedule" in r]
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")  # noqa: E731
    ms_total = ms_s * len(samples) / len(ms_samples)  # measured when every sample was tuned
    summary = {
        "tuning_seconds": {"edgepack": ours_s, "metaschedule_per_shape_measured": ms_s,
                           "metaschedule_tasks_measured": len(ms_samples) * len(tasks),
                           "metaschedule_per_shape_all_samples": ms_total,
                           "all_samples_is_estimate": len(ms_samples) < len(samples), "ratio": ms_total / ours_s},
        "trials": {"edgepack": a.trials * len(LAYERS), "metaschedule": a.trials * len(samples) * len(LAYERS)},
        "speed_vs_metaschedule": {"geomean": geo([r["vs_metaschedule"] for r in sampled]),
                                  "min": min((r["vs_metaschedule"] for r in sampled), default=float("nan"))},
        "speed_vs_guarded": {"geomean": geo([r["vs_guarded"] for r in rows_out])},
        "speed_vs_numpy": {"geomean": geo([r["vs_numpy"] for r in rows_out])},
        "cost_model_median_error": rep.cost_model_error,
    }
    print(json.dumps(summary, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tuning_vs_metaschedule.json").write_text(json.dumps(
        {"benchmark": "tuning_vs_metaschedule", "machine": platform.processor() or platform.machine(),
         "cores": board.target.cores, "samples": list(samples), "metaschedule_samples": ms_samples,
         "unsampled": unsampled, "summary": summary,
         "rows": rows_out, "note": "vs_X = X latency / edgepack latency (> 1: edgepack faster)"}, indent=1) + "\n")


if __name__ == "__main__":
    main()
