#!/usr/bin/env python
"""Which ONNX operators does TVM 0.27's Relax ONNX frontend handle correctly?

Regenerates ONNX's backend node tests (onnx >= 1.23 no longer ships their data) with
``onnx.backend.test.case.node.collect_testcases()``, keeps the cases whose op type is in CANDIDATES,
and for each one: imports it with ``from_onnx``, compiles with ``tvm.compile(target=llvm)``, runs it in
``relax.VirtualMachine`` and compares with the case's expected outputs.

Every case runs in a worker process (one at a time by default): an exception is recorded by its first
line, a crash (segfault) or a timeout kills and restarts the worker, and the script goes on.

Two ways to feed a case:
  * ``as_is``: every input of the test graph is a graph input (how the ONNX test is written). Shape-like
    arguments (Reshape's shape, Slice's starts, Pad's pads, ...) are then runtime tensors.
  * ``const_args``: tried only when ``as_is`` fails and the node has more than one input; every input
    but the first becomes an initializer (a constant), as in a real exported model. An op that passes
    this way is usable by edgepack when those arguments are constants.

``_expanded`` cases (the op's ONNX function body, e.g. LayerNormalization spelled out as ReduceMean,
Sub, ...) are run and reported separately; they do not count towards the op's own row.

Verdict per op: ``pass`` (every case matches as written), ``pass_with_const_args`` (every case matches,
some only with constant arguments), ``pass_first_output_only`` (the first output always matches but
optional extra outputs, e.g. LayerNormalization's Mean/InvStdDev, do not), ``partial``, ``fail``.
Ints and bools must match exactly, dtypes included (a C runtime hands out buffers of the declared dtype).

Per case the JSON also records whether it uses only float32/int64/bool tensors with fully static
shapes (graph inputs, outputs and every inferred intermediate), the subset edgepack targets first
("simple"), and whether it uses an exotic dtype (float8, 4-/2-bit ints, float4, string: not "common").

Table columns: cases; import/run/match as written (as_is); +const = matches counting the const_args
retry; out0 = first output matches (either mode); simple = matching/total simple cases.

Usage:
    python scripts/op_shortlist.py [--ops Add,Conv] [--timeout 120] [--no-expanded] [--out PATH]
Writes scripts/op_shortlist.json and prints a table.
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import nodetests  # scripts/nodetests.py: case collection, comparison, worker process (shared with conformance.py)
from nodetests import TOL_DEFAULT, collect_cases, const_args_model, first_line, to_numpy

CANDIDATES = """
Abs Add And ArgMax AveragePool BatchNormalization Cast Ceil Clip Concat Constant ConstantOfShape Conv
Cos DequantizeLinear Div Einsum Elu Equal Erf Exp Expand Flatten Floor Gather Gelu Gemm
GlobalAveragePool GlobalMaxPool Greater HardSigmoid HardSwish Identity InstanceNormalization
LayerNormalization LeakyRelu Less Log LogSoftmax MatMul Max MaxPool Mean Min Mul Neg Not Or Pad Pow
PRelu Range Reciprocal ReduceL2 ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize
Shape Sigmoid Sign Sin Slice Softmax Softplus Split Sqrt Squeeze Sub Sum Tanh Tile Transpose Unsqueeze
Where Xor
""".split()

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "op_shortlist.json"

# Comparison tolerances by expected dtype kind; ints and bools must be exact.
# (TOL_DEFAULT, for float8 and other exotic floats, is nodetests'.)
TOL = {"float64": (1e-5, 1e-5), "float32": (1e-4, 1e-4), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}


# ----------------------------------------------------------------------------- running one case (worker)

def run_case(job: dict, mode: str, tvm_mods) -> dict:
    """Import, compile, run and compare one case. Returns a dict with the stage reached."""
    import onnx

    tvm, relax, from_onnx, target = tvm_mods
    from tvm_ffi import Shape
    res = {"mode": mode, "import_ok": False, "run_ok": False, "match": False, "first_output_match": False,
           "error": None, "stage": "prepare"}
    t0 = time.perf_counter()
    try:
        model = onnx.load_from_string(job["model"])
        inputs = job["inputs"]
        if mode == "const_args":
            model, inputs = const_args_model(model, inputs)
        in_arrays = [to_numpy(a) for a in inputs]
        want = [to_numpy(a) for a in job["outputs"]]

        res["stage"] = "import"
        mod = from_onnx(model)
        main = mod["main"]
        if len(main.params) != len(in_arrays):
            raise RuntimeError(f"main has {len(main.params)} params for {len(in_arrays)} graph inputs")
        res["import_ok"] = True

        res["stage"] = "compile"
        exe = tvm.compile(mod, target=target)
        res["stage"] = "run"
        vm = relax.VirtualMachine(exe, tvm.cpu())
        # np.ascontiguousarray would turn 0-d scalars into shape (1,): keep 0-d as 0-d.
        args_in = [tvm.runtime.tensor(a if a.flags.c_contiguous else a.copy()) for a in in_arrays]
        out = vm["main"](*args_in)
        # One output comes back as a Tensor, or as a Shape (a tuple subclass) when the frontend
        # turned a shape computation into an R.Shape; several come back as an Array.
        single = isinstance(out, (tvm.runtime.Tensor, Shape))
        got, notes = [], []
        for i, o in enumerate([out] if single else list(out)):
            if isinstance(o, tvm.runtime.Tensor):
                got.append(o.numpy())
            elif isinstance(o, Shape):
                got.append(np.array(tuple(o), dtype=np.int64))
                notes.append(f"output {i} is an R.Shape, not a tensor")
            else:  # a scalar PrimValue
                got.append(np.asarray(o))
                notes.append(f"output {i} is a {type(o).__name__}")
        if notes:
            res["note"] = "; ".join(notes)
        res["run_ok"] = True

        res["stage"] = "compare"
        if len(got) != len(want):
            raise AssertionError(f"{len(got)} outputs, expected {len(want)}")
        worst, reasons = 0.0, []
        for i, (g, w) in enumerate(zip(got, want)):
            ok, why, err = nodetests.compare(g, w, TOL)
            if i == 0:
                # Optional extra outputs (LayerNormalization's Mean/InvStdDev, BatchNormalization's
                # training statistics) rarely matter for inference: record the first output apart.
                res["first_output_match"] = ok
            if not ok:
                reasons.append(f"output {i}: {why}")
            if err == err:  # not NaN
                worst = max(worst, err)
        res["max_abs_err"] = worst
        if reasons:
            res["error"] = "; ".join(reasons)[:300]
        else:
            res["match"] = True
            res["stage"] = "done"
    except Exception as exc:  # noqa: BLE001 - every failure is data here
        res["error"] = first_line(exc)
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def _setup_worker():
    """In the worker (nodetests.Runner): import TVM once; returns the per-case function."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.target import Target

    return functools.partial(run_case, tvm_mods=(tvm, relax, from_onnx, Target({"kind": "llvm"})))


# What nodetests.Runner returns for a case whose worker crashed or timed out (mode and error filled in).
CRASH_RESULT = {"mode": None, "import_ok": False, "run_ok": False, "match": False, "first_output_match": False,
                "stage": "crash", "error": None}


# ----------------------------------------------------------------------------- summarising

def _rank(r: dict) -> tuple:
    """How far a result got; the const_args retry replaces as_is only when it got further."""
    return (r["match"], r["first_output_match"], r["run_ok"], r["import_ok"])


def _counts(rows: list[dict]) -> dict:
    def best(r):  # as_is result, upgraded by const_args when that was tried and got further
        return r["best"]
    n = len(rows)
    return {
        "cases": n,
        "import_ok": sum(r["as_is"]["import_ok"] for r in rows),
        "run_ok": sum(r["as_is"]["run_ok"] for r in rows),
        "match": sum(r["as_is"]["match"] for r in rows),
        "match_with_const_args": sum(best(r)["match"] for r in rows),
        "first_output_match": sum(best(r)["first_output_match"] for r in rows),
        "common_dtype_cases": sum(not r["meta"]["exotic"] for r in rows),
        "common_dtype_match": sum(not r["meta"]["exotic"] and best(r)["match"] for r in rows),
        "simple_cases": sum(r["meta"]["simple"] for r in rows),
        "simple_match": sum(r["meta"]["simple"] and best(r)["match"] for r in rows),
    }


def summarise(results: list[dict]) -> dict:
    by_op = collections.defaultdict(lambda: {"native": [], "expanded": []})
    for r in results:
        by_op[r["op"]]["expanded" if r["expanded"] else "native"].append(r)
    ops = {}
    for op in sorted(by_op):
        entry = {}
        for kind in ("native", "expanded"):
            rows = by_op[op][kind]
            if not rows:
                continue
            c = _counts(rows)
            if c["match"] == c["cases"]:
                verdict = "pass"
            elif c["match_with_const_args"] == c["cases"]:
                verdict = "pass_with_const_args"
            elif c["first_output_match"] == c["cases"]:
                verdict = "pass_first_output_only"
            elif c["match_with_const_args"] > 0:
                verdict = "partial"
            else:
                verdict = "fail"
            c["verdict"] = verdict
            # Group failures by their message with numbers blanked out; keep the first as the example.
            groups: dict[str, list] = {}
            for r in rows:
                if not r["best"]["match"]:
                    msg = f'{r["best"]["stage"]}: {r["best"]["error"]}'
                    key = re.sub(r"\d[\d.e+-]*", "#", msg)
                    groups.setdefault(key, [msg, []])[1].append(r["name"])
            c["failure_reasons"] = [
                {"count": len(names), "reason": msg, "cases": sorted(names)}
                for msg, names in sorted(groups.values(), key=lambda g: -len(g[1]))
            ]
            notes = collections.Counter(r["best"]["note"] for r in rows if r["best"].get("note"))
            if notes:
                c["notes"] = [{"count": k, "note": v} for v, k in notes.most_common()]
            c["const_args_only_cases"] = sorted(
                r["name"] for r in rows if not r["as_is"]["match"] and r["best"]["match"]
            )
            entry[kind] = c
        ops[op] = entry
    return ops


def print_table(ops: dict) -> None:
    hdr = (f'{"op":<24}{"cases":>6}{"import":>7}{"run":>5}{"match":>6}{"+const":>7}{"out0":>5}{"simple":>8}'
           "  verdict | most common failure")
    print(hdr)
    print("-" * len(hdr))
    for op, entry in ops.items():
        for kind, c in entry.items():
            name = op if kind == "native" else f"  {op}[exp]"
            reason = ""
            if c["failure_reasons"]:
                reason = " | " + c["failure_reasons"][0]["reason"][:90]
            print(f'{name:<24}{c["cases"]:>6}{c["import_ok"]:>7}{c["run_ok"]:>5}{c["match"]:>6}'
                  f'{c["match_with_const_args"]:>7}{c["first_output_match"]:>5}'
                  f'{str(c["simple_match"]) + "/" + str(c["simple_cases"]):>8}'
                  f'  {c["verdict"]}{reason}')


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated subset of the candidate ops")
    ap.add_argument("--cases", help="regex on case names (debugging)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per case before the worker is killed")
    ap.add_argument("--no-expanded", action="store_true", help="skip the *_expanded function-body cases")
    ap.add_argument("--no-const-retry", action="store_true", help="do not retry failures with constant args")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--worker-log", help="where the worker's stdout/stderr go (default: a file in the temp dir)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-case progress lines")
    args = ap.parse_args(argv)

    ops = CANDIDATES if not args.ops else [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = sorted(set(ops) - set(CANDIDATES))
    if unknown:
        print(f"note: not in the candidate list (run anyway): {unknown}", file=sys.stderr)

    t_start = time.perf_counter()
    jobs = collect_cases(ops, expanded=not args.no_expanded)
    if args.cases:
        jobs = [j for j in jobs if re.search(args.cases, j["name"])]
    t_collect = time.perf_counter() - t_start
    print(f"{len(jobs)} cases for {len({j['op'] for j in jobs})} ops (collected in {t_collect:.1f} s)", flush=True)

    log_path = args.worker_log or os.path.join(tempfile.gettempdir(), f"op_shortlist.worker.{os.getpid()}.log")
    runner = nodetests.Runner(_setup_worker, (), args.timeout, log_path, what="TVM worker",
                              crash_fields=CRASH_RESULT)
    results = []
    try:
        for i, job in enumerate(jobs, 1):
            as_is = runner.run(job, "as_is")
            best = as_is
            const = None
            if not as_is["match"] and not args.no_const_retry and len(job["inputs"]) > 1:
                const = runner.run(job, "const_args")
                if _rank(const) > _rank(as_is):
                    best = const
            row = {k: job[k] for k in ("name", "op", "expanded", "opset", "meta")}
            row.update(as_is=as_is, const_args=const, best=best)
            results.append(row)
            if not args.quiet:
                status = "ok" if as_is["match"] else ("ok(const)" if best["match"] else f'FAIL[{best["stage"]}]')
                err = "" if best["match"] else f' {best["error"]}'[:140]
                print(f"[{i:>4}/{len(jobs)}] {job['name']:<60} {status}{err}", flush=True)
    finally:
        runner.close()

    ops_summary = summarise(results)
    elapsed = time.perf_counter() - t_start
    report = {
        "generated_by": "scripts/op_shortlist.py",
        "versions": nodetests.versions(),  # the parent never imports TVM itself
        "target": {"kind": "llvm"},
        "tolerances": {"float": TOL, "other_float": TOL_DEFAULT, "int_bool": "exact"},
        "modes": nodetests.MODES,
        "simple_definition": "only FLOAT/INT64/BOOL tensors and every shape (incl. inferred intermediates) static",
        "runtime_seconds": round(elapsed, 1),
        "worker_restarts": runner.restarts,
        "totals": _counts([r for r in results if not r["expanded"]]) if results else {},
        "ops": ops_summary,
        "cases": results,
    }
    for r in report["cases"]:  # "best" is one of the two results above: name it, do not repeat it
        r["best"] = r["best"]["mode"]
    args.out.write_text(nodetests.dump_report(report))

    print()
    print_table(ops_summary)
    native = {op: e["native"] for op, e in ops_summary.items() if "native" in e}
    print()
    nodetests.print_verdicts(native, ("pass", "pass_with_const_args", "pass_first_output_only", "partial", "fail"))
    t = report["totals"]
    if t:
        print(f"\nnative cases: {t['cases']}, import ok {t['import_ok']}, run ok {t['run_ok']}, match {t['match']}, "
              f"match incl. const args {t['match_with_const_args']}, first output matches {t['first_output_match']}; "
              f"common dtypes (no float8/4-bit/2-bit/string) {t['common_dtype_match']}/{t['common_dtype_cases']}; "
              f"simple (f32/i64/bool, static) {t['simple_match']}/{t['simple_cases']}")
    print(f"runtime {elapsed:.0f} s, worker restarts {runner.restarts}; wrote {args.out}; worker log {log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
