"""Tuned against untuned on a real export, and the cost model's objective chosen by the final kernels: the
MiniLM-6 of transformer_zoo.py (HF BertModel, hidden 384, TorchScript export with an attention mask, dims
batch x seq) is tuned on the host with `edgepack tune --trials T` once per objective (`--cost-model reg`,
`--cost-model rank`, same budget, same samples), each tuning timed; then transformer_zoo.py builds and
benchmarks the untuned package and each tuned one against onnxruntime (1 and 2 threads, same run).

    python benchmarks/tune_zoo.py [--trials 400] [--rounds 3] [--samples 8] [--objectives reg,rank]

Writes benchmarks/results/tune_zoo.json (and transformer_zoo_<tag>.json per package). The databases are kept
in benchmarks/results/tmp/ (`edgepack tune` resumes them: an interrupted run keeps its measurements).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

from transformer_zoo import MAX_BATCH, MAX_SEQ, RESULTS, cpu_facts, export_minilm

TMP = RESULTS / "tmp"
OBJECTIVES = ("reg", "rank")


def tune(model: Path, db: Path, objective: str, trials: int, samples: str) -> float:
    """Tune (or resume) the database; -> the seconds every run on it took in all (an interrupted run: up to
    its last measurement), so a resumed tuning still reports its whole cost."""
    subprocess.run([sys.executable, "-m", "edgepack.cli", "tune", str(model), "--dim", f"batch=1:{MAX_BATCH}",
                    "--dim", f"seq=1:{MAX_SEQ}", "--trials", str(trials), "--cost-model", objective,
                    "--samples", samples, "--db", str(db), "--no-progress"], check=True)
    with sqlite3.connect(db) as c:
        return float(c.execute(
            "SELECT SUM(COALESCE(r.finished, (SELECT MAX(m.created) FROM measurements m WHERE m.run_id = r.id))"
            " - r.started) FROM runs r").fetchone()[0] or 0.0)


def zoo(model: Path, tag: str, rounds: int, db: Path | None) -> dict:
    cmd = [sys.executable, str(Path(__file__).with_name("transformer_zoo.py")), "--model", str(model),
           "--tag", tag, "--rounds", str(rounds)]
    subprocess.run(cmd + (["--db", str(db)] if db else []), check=True)
    return json.loads((RESULTS / f"transformer_zoo_{tag}.json").read_text())


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", default="8", help="edgepack tune --samples (one database per value)")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES), help="cost-model objectives to tune with")
    a = ap.parse_args()
    objectives = a.objectives.split(",")
    TMP.mkdir(parents=True, exist_ok=True)
    model = TMP / "minilm6.onnx"
    if not model.exists():
        export_minilm(model, 6)
    dbs = {o: TMP / f"tune_zoo_{o}_{a.samples.replace(':', '-')}.db" for o in objectives}
    seconds = {o: tune(model, dbs[o], o, a.trials, a.samples) for o in objectives}
    runs = {"untuned": zoo(model, "tune_zoo_untuned", a.rounds, None)}
    runs.update({o: zoo(model, f"tune_zoo_{o}", a.rounds, dbs[o]) for o in objectives})
    table = []
    for i, row in enumerate(runs["untuned"]["rows"]):
        entry = {"dims": row["dims"]}
        for name, run in runs.items():
            r, one = run["rows"][i], (run["rows_edgepack_1_thread"] + [None] * 9)[i]
            entry[name] = {"edgepack_us": r["edgepack_us"], "vs_ort_1t": r["speedup_vs_onnxruntime_1t"],
                           "vs_ort_2t": r["speedup_vs_onnxruntime_2t"],
                           "one_thread_vs_ort_1t": one["speedup_vs_onnxruntime_1t"] if one else None}
        table.append(entry)
    # same sizes, each package against the onnxruntime of its own run: the ratio of ratios cancels the noise
    # between runs better than latencies do
    summary = {"tuning_seconds": seconds, "trials": a.trials, "samples": a.samples, "goal_seconds_400_trials": 900,
               "geomean_vs_ort_2t": {n: geomean([e[n]["vs_ort_2t"] for e in table]) for n in runs},
               "geomean_vs_ort_1t": {n: geomean([e[n]["vs_ort_1t"] for e in table]) for n in runs}}
    if set(OBJECTIVES) <= set(objectives):
        summary["rank_speed_over_reg"] = geomean([e["rank"]["vs_ort_2t"] / e["reg"]["vs_ort_2t"] for e in table])
        summary["faster_objective"] = "rank" if summary["rank_speed_over_reg"] > 1 else "reg"
    out = RESULTS / "tune_zoo.json"
    out.write_text(json.dumps({"benchmark": "tune_zoo", "cpu": cpu_facts(), "model": runs["untuned"]["model"],
                               "summary": summary, "sizes": table,
                               "note": "vs_ort_X = onnxruntime X threads median / edgepack median, same run "
                                       "(> 1: edgepack faster); edgepack on the board's cores unless one_thread"},
                              indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
