#!/usr/bin/env python
"""Does edgepack's C path compute what ONNX says? ONNX backend node tests, built and run as C packages.

Regenerates ONNX's backend node tests with ``onnx.backend.test.case.node.collect_testcases()`` and keeps
the cases whose op type is a candidate (default: ``edgepack.model.ops.SUPPORTED_OPS``; ``--ops A,B``
to choose; ``--sample`` = one case per op, see below). For each case:

  1. the test model is saved to a temporary directory and compiled with
     ``edgepack.pipeline.build_package(model, "host", dim_ranges, out)``;
  2. the package's C ``run`` program is run on the test inputs with ``edgepack.deploy.local.run_local``;
  3. every output is compared with the expected one: float32/float64 within rtol = atol = 1e-4
     (float16/bfloat16 1e-3/1e-2, float8 1e-2), ints and bools exactly, dtype and shape must match.

Two ways to feed a case (the "constant retry"):
  * ``as_is``: every input of the test graph is a graph input (the ONNX test as written);
  * ``const_args``: tried only when ``as_is`` fails and the graph has more than one input: every input
    but the first becomes an initializer holding the test's value. Real exported models carry
    shape/axes/pads arguments as constants, and edgepack needs shapes known at build time.

A third attempt, ``first_output``, is made when both fail and the (single-node) graph has more than one
output: the node's and the graph's outputs after the first are dropped (with constant arguments when the
graph has several inputs). edgepack refuses the optional extra outputs TVM does not compute
(LayerNormalization's Mean/InvStdDev, MaxPool's Indices, BatchNormalization's training statistics,
Dropout's mask); exporters only use output 0. A case passing this way is counted apart
(``passed_first_output_only``), not as passed.

Dynamic dims (``dim_param``) of a test graph get the range [v, v] of the test data's extent.

Isolation: cases run in worker processes (``--jobs``, default 1); an exception is recorded by its first
line, a crash or a timeout kills and restarts the worker, and the run goes on. Every package is built
under one temporary directory, removed at the end.

-Werror: the generated Makefile compiles with ``-Wall -Wextra -Werror``. When a build fails only
because of a warning (``[-Werror=...]``), the warning is recorded in the case's ``werror`` field and the
case is rebuilt with ``-Wno-error`` added to the host board's cflags, so a codegen warning does not hide
the op's numerics. ``--strict`` turns this off. The summary lists every such warning: they are bugs.

``_expanded`` cases (the op's ONNX function body) are run and reported separately; they do not count
towards the op's totals.

``--sample``: per op, the first case that matched in TVM's Relax VM (scripts/op_shortlist.json, as
written or with constant arguments), else the op's first case. tests/test_conformance_sample.py runs it.

Common dtypes (what SUPPORTED_OPS is judged on): FLOAT, DOUBLE, INT64, INT32, INT8, UINT8, BOOL. A case
touching any other tensor type (float16, bfloat16, float8, int16, uint16/32/64, 4-/2-bit, string) is
"uncommon" and listed apart.

Each case also carries the Relax VM verdict from scripts/op_shortlist.json; ``vm_passed_edgepack_failed``
lists the cases where TVM's VM matched but edgepack's C path did not (in any mode): those are edgepack bugs.

Usage:
    python scripts/conformance.py                      # full run -> benchmarks/results/conformance.{json,md}
    python scripts/conformance.py --ops Add,Conv --out /tmp/c.json
    python scripts/conformance.py --sample [--jobs 2]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import nodetests  # scripts/nodetests.py: case collection, comparison, worker process (shared with op_shortlist.py)
from nodetests import TOL_DEFAULT, const_args_model, first_line, to_numpy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "conformance.json"
SHORTLIST_JSON = HERE / "op_shortlist.json"

if str(ROOT) not in sys.path:  # run as `python scripts/conformance.py` from anywhere
    sys.path.insert(0, str(ROOT))

# (TOL_DEFAULT, for float8 and other exotic floats, is nodetests'.)
TOL = {"float32": (1e-4, 1e-4), "float64": (1e-4, 1e-4), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}
# Every numpy dtype kind but float and complex is compared exactly, ml_dtypes' bfloat16/float8/4-bit
# types (kind "V") included; op_shortlist.py compares those within tolerance.
EXACT_KINDS = "biumMOSUV"
COMMON_DTYPES = {"FLOAT", "DOUBLE", "INT64", "INT32", "INT8", "UINT8", "BOOL"}
WERROR = re.compile(r"\[-Werror=([\w-]+)\]")


def supported_ops() -> list[str]:
    from edgepack.model.ops import SUPPORTED_OPS  # plain module: does not import TVM

    return sorted(SUPPORTED_OPS)


# ----------------------------------------------------------------------------- collecting cases

def collect_cases(ops: list[str], expanded: bool = True) -> list[dict]:
    """Picklable jobs, one per test case, in ONNX's collection order (see nodetests.collect_cases)."""
    jobs = nodetests.collect_cases(ops, expanded)
    for j in jobs:
        j["common"] = all(d in COMMON_DTYPES for d in j["meta"]["dtypes"])
    return jobs


def vm_results(path: Path = SHORTLIST_JSON) -> dict[str, dict]:
    """case name -> {"match": bool, "mode": as_is|const_args} from the Relax VM survey (empty if absent)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    out = {}
    for c in data.get("cases", []):
        best = c[c["best"]] if isinstance(c["best"], str) else c["best"]
        out[c["name"]] = {"match": bool(best["match"]), "mode": best["mode"],
                          "as_is_match": bool(c["as_is"]["match"])}
    return out


def sample_cases(jobs: list[dict], vm: dict[str, dict] | None = None) -> list[dict]:
    """Per op: the first (non-expanded) case the Relax VM matched, as written or with constants, else the first."""
    vm = vm_results() if vm is None else vm
    first: dict[str, dict] = {}
    first_vm_ok: dict[str, dict] = {}
    for j in jobs:
        if j["expanded"]:
            continue
        first.setdefault(j["op"], j)
        if vm.get(j["name"], {}).get("match"):
            first_vm_ok.setdefault(j["op"], j)
    return [first_vm_ok.get(op, first[op]) for op in first]


# ----------------------------------------------------------------------------- one case (in a worker)

def _dim_ranges(model, arrays: list[np.ndarray]) -> dict[str, tuple[int, int]]:
    """[v, v] for each dim_param of a graph input, v taken from the test data."""
    inits = {i.name for i in model.graph.initializer}
    ranges: dict[str, tuple[int, int]] = {}
    for vi, a in zip([v for v in model.graph.input if v.name not in inits], arrays):
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value") and axis < a.ndim:
                name = d.dim_param or f"{vi.name}_dim{axis}"  # the name edgepack gives an anonymous dim
                ranges.setdefault(name, (int(a.shape[axis]), int(a.shape[axis])))
    return ranges


def _first_output_model(model):
    """The single-node graph with only its first output (optional trailing outputs dropped)."""
    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    node = g.node[0]
    del node.output[1:]
    keep = list(g.output[:1])
    del g.output[:]
    g.output.extend(keep)
    return m


def _relaxed(board):
    tc = dataclasses.replace(board.toolchain, cflags=tuple(board.toolchain.cflags) + ("-Wno-error",))
    return dataclasses.replace(board, toolchain=tc)


def run_case(job: dict, mode: str, tmp_root: str, strict: bool = False, run_timeout: float = 120) -> dict:
    """Build one case with edgepack, run its C program, compare. Every failure is returned, not raised."""
    import onnx

    from edgepack.board import load_board
    from edgepack.deploy.local import run_local
    from edgepack.errors import BuildError, EdgepackError
    from edgepack.pipeline import build_package

    res = {"mode": mode, "match": False, "stage": "prepare", "error": None, "werror": None}
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="case-", dir=tmp_root))
    try:
        model = onnx.load_from_string(job["model"])
        inputs = job["inputs"]
        want = job["outputs"]
        if mode in ("const_args", "first_output") and len(inputs) > 1:
            model, inputs = const_args_model(model, inputs)
        if mode == "first_output":
            model, want = _first_output_model(model), want[:1]
        arrays = [np.require(to_numpy(a), requirements="C") for a in inputs]  # keeps 0-d arrays 0-d
        want = [to_numpy(a) for a in want]
        path = tmp / "model.onnx"
        onnx.save(model, str(path))
        dims = _dim_ranges(model, arrays)

        res["stage"] = "build"
        board = load_board("host")
        try:
            built = build_package(path, board, dims, tmp / "pkg", name="conf")
        except BuildError as e:
            w = WERROR.search(str(e))
            if strict or not w:
                raise
            res["werror"] = str(e)[:300]
            built = build_package(path, _relaxed(board), dims, tmp / "pkg", name="conf")

        res["stage"] = "run"
        paths = run_local(built.bundle, arrays, tmp / "out", timeout=run_timeout)
        got = [np.load(p, allow_pickle=False) for p in paths]

        res["stage"] = "compare"
        if len(got) != len(want):
            raise AssertionError(f"{len(got)} outputs, expected {len(want)}")
        reasons = []
        for i, (g, w) in enumerate(zip(got, want)):
            ok, why, _ = nodetests.compare(g, w, TOL, exact_kinds=EXACT_KINDS, note_equal_values=False,
                                           err_without_finite=float("nan"))
            if i == 0:  # optional extra outputs (Mean/InvStdDev, Indices, mask) rarely matter at inference
                res["first_output_match"] = ok
            if not ok:
                reasons.append(f"output {i}: {why}")
        if reasons:
            res["error"] = "; ".join(reasons)[:300]
        else:
            res["match"], res["stage"] = True, "done"
    except Exception as exc:  # noqa: BLE001 - every failure is data here
        res["error"] = first_line(exc)
        # Errors a user can act on are EdgepackError; anything else leaking out of edgepack is a bug.
        res["edgepack_error"] = isinstance(exc, EdgepackError)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def _setup_worker(tmp_root: str, strict: bool, extra_ops: tuple[str, ...]):
    """In the worker (nodetests.Runner): import edgepack once; returns the per-case function."""
    sys.path.insert(0, str(ROOT))
    import edgepack.pipeline  # noqa: F401 - pay the TVM import once, before "ready"
    from edgepack.model import onnx_load

    if extra_ops:  # candidates outside SUPPORTED_OPS: check_ops would reject them before compiling
        onnx_load.SUPPORTED_OPS = frozenset(onnx_load.SUPPORTED_OPS | set(extra_ops))
    return functools.partial(run_case, tmp_root=tmp_root, strict=strict)


# What nodetests.Runner returns for a case whose worker crashed or timed out (mode and error filled in).
CRASH_RESULT = {"mode": None, "match": False, "stage": "crash", "error": None, "werror": None}


def run_cases(jobs: list[dict], jobs_n: int = 1, timeout: float = 300, const_retry: bool = True,
              strict: bool = False, log_path: str | None = None, progress=None,
              extra_ops: tuple[str, ...] = (), first_output_retry: bool = True) -> tuple[list[dict], int]:
    """Run every job (with the constant retry) in `jobs_n` worker processes; rows in the order of `jobs`.

    Returns (rows, worker restarts). Each row: name, op, expanded, opset, meta, common, as_is, const_args
    and first_output (attempt results or None), passed ("as_is" | "const_args" | None). `extra_ops` are
    accepted by the workers' operator check although they are not in SUPPORTED_OPS (to measure candidates).
    """
    tmp_root = tempfile.mkdtemp(prefix="edgepack-conformance-")
    log_path = log_path or os.path.join(tmp_root, "worker.log")
    local = threading.local()
    runners: list[nodetests.Runner] = []
    lock = threading.Lock()
    done = [0]

    def one(job: dict) -> dict:
        if not hasattr(local, "runner"):
            local.runner = nodetests.Runner(_setup_worker, (tmp_root, strict, tuple(extra_ops)), timeout, log_path,
                                            what="edgepack worker", crash_fields=CRASH_RESULT)
            with lock:
                runners.append(local.runner)
        as_is = local.runner.run(job, "as_is")
        const = None
        if not as_is["match"] and const_retry and len(job["inputs"]) > 1:
            const = local.runner.run(job, "const_args")
        passed = "as_is" if as_is["match"] else ("const_args" if const and const["match"] else None)
        first = None
        if passed is None and first_output_retry and len(job["outputs"]) > 1 and _single_node(job):
            first = local.runner.run(job, "first_output")
        row = {k: job[k] for k in ("name", "op", "expanded", "opset", "meta", "common")}
        row.update(as_is=as_is, const_args=const, first_output=first, passed=passed)
        if progress:
            with lock:
                done[0] += 1
                progress(done[0], len(jobs), row)
        return row

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs_n)) as pool:
            rows = list(pool.map(one, jobs))
    finally:
        for r in runners:
            r.close()
        shutil.rmtree(tmp_root, ignore_errors=True)
    return rows, sum(r.restarts for r in runners)


def _single_node(job: dict) -> bool:
    import onnx

    return len(onnx.load_from_string(job["model"]).graph.node) == 1


def final(row: dict) -> dict:
    """The attempt that decides a case: the constant retry when it was tried, else as written."""
    return row["const_args"] or row["as_is"]


def describe(row: dict) -> str:
    """One line: how the case passed, or why it failed."""
    if row["passed"] == "as_is":
        return "ok"
    if row["passed"] == "const_args":
        return "ok (const args)"
    f = final(row)
    if row.get("first_output") and row["first_output"]["match"]:
        return f"output 0 only (full: FAIL[{f['stage']}] {f['error']})"
    return f"FAIL[{f['stage']}{'/const' if row['const_args'] else ''}] {f['error']}"


# ----------------------------------------------------------------------------- summarising

def _attempts(row: dict) -> list[dict]:
    return [a for a in (row["as_is"], row["const_args"], row.get("first_output")) if a]


def _op_summary(rows: list[dict]) -> dict:
    n = len(rows)
    as_is = sum(r["passed"] == "as_is" for r in rows)
    const = sum(r["passed"] == "const_args" for r in rows)
    common = [r for r in rows if r["common"]]
    common_ok = sum(r["passed"] is not None for r in common)
    if as_is + const == n:
        verdict = "pass"
    elif common and common_ok == len(common):
        verdict = "pass_common_dtypes"
    elif as_is + const:
        verdict = "partial"
    else:
        verdict = "fail"
    return {
        "cases": n,
        "passed_as_written": as_is,
        "passed_with_const_args": const,
        "failed": n - as_is - const,
        "common_dtype_cases": len(common),
        "common_dtype_passed": common_ok,
        # failed, but output 0 matches once the optional extra outputs are dropped (first_output attempt)
        "passed_first_output_only": sum(r["passed"] is None and bool((r.get("first_output") or {}).get("match"))
                                        for r in rows),
        "verdict": verdict,
        "failures": [
            {"case": r["name"], "common_dtypes": r["common"], "dtypes": r["meta"]["dtypes"],
             "stage": final(r)["stage"], "error": final(r)["error"],
             **({"as_written_error": r["as_is"]["error"]} if r["const_args"] else {}),
             **({"first_output_only": r["first_output"]["match"] or r["first_output"]["error"]}
                if r.get("first_output") else {})}
            for r in rows if r["passed"] is None
        ],
        "werror_cases": [r["name"] for r in rows if any((a or {}).get("werror") for a in _attempts(r))],
    }


def summarise(rows: list[dict], vm: dict[str, dict] | None = None) -> dict:
    vm = vm_results() if vm is None else vm
    by = collections.defaultdict(lambda: {"native": [], "expanded": []})
    for r in rows:
        by[r["op"]]["expanded" if r["expanded"] else "native"].append(r)
    ops = {op: _op_summary(by[op]["native"]) for op in sorted(by) if by[op]["native"]}
    expanded = {op: _op_summary(by[op]["expanded"]) for op in sorted(by) if by[op]["expanded"]}
    native = [r for r in rows if not r["expanded"]]
    # VM matched (either mode) but edgepack's C package did not, in any mode: edgepack bugs.
    regressions = [
        {"case": r["name"], "op": r["op"], "expanded": r["expanded"], "vm_mode": vm[r["name"]]["mode"],
         "stage": final(r)["stage"], "error": final(r)["error"],
         **({"as_written_error": r["as_is"]["error"]} if r["const_args"] else {})}
        for r in rows if r["passed"] is None and vm.get(r["name"], {}).get("match")
    ]
    # VM matched as written, edgepack only with constant arguments (by design: shapes fixed at build time).
    needs_const = [r["name"] for r in rows if r["passed"] == "const_args" and vm.get(r["name"], {}).get("as_is_match")]
    werrors = collections.Counter()
    werror_cases = collections.defaultdict(list)
    for r in rows:
        for a in _attempts(r):
            if a.get("werror"):
                key = re.sub(r"src/\w+\.c:\d+:\d+", "src/…", a["werror"])
                werrors[key] += 1
                if r["name"] not in werror_cases[key]:
                    werror_cases[key].append(r["name"])
    leaks = [{"case": r["name"], "mode": a["mode"], "error": a["error"]}
             for r in rows for a in _attempts(r)
             if a.get("edgepack_error") is False and a["stage"] != "prepare"]  # prepare: the harness
    totals = {
        "cases": len(native),
        "passed_as_written": sum(r["passed"] == "as_is" for r in native),
        "passed_with_const_args": sum(r["passed"] == "const_args" for r in native),
        "passed_first_output_only": sum(r["passed"] is None and bool((r.get("first_output") or {}).get("match"))
                                        for r in native),
        "failed": sum(r["passed"] is None for r in native),
        "common_dtype_cases": sum(r["common"] for r in native),
        "common_dtype_passed": sum(r["common"] and r["passed"] is not None for r in native),
        "expanded_cases": len(rows) - len(native),
        "expanded_passed": sum(r["passed"] is not None for r in rows if r["expanded"]),
    }
    return {
        "totals": totals,
        "ops": ops,
        "expanded": expanded,
        "vm_passed_edgepack_failed": regressions,
        "vm_as_written_edgepack_needs_const_args": needs_const,
        "werror_warnings": [{"count": len(werror_cases[w]), "warning": w, "cases": sorted(werror_cases[w])}
                            for w, _ in werrors.most_common()],
        "non_edgepack_exceptions": leaks,
    }


def markdown(summary: dict) -> str:
    lines = ["| op | passed / total | as written | with constant args | common dtypes | failed, output 0 only ok |",
             "|---|---|---|---|---|---|"]

    def row(name: str, c: dict) -> str:
        return (f"| {name} | {c['passed_as_written'] + c['passed_with_const_args']} / {c['cases']} | "
                f"{c['passed_as_written']} | {c['passed_with_const_args']} | "
                f"{c['common_dtype_passed']} / {c['common_dtype_cases']} | {c['passed_first_output_only'] or ''} |")

    lines += [row(op, c) for op, c in summary["ops"].items()]
    lines.append(row("**all**", summary["totals"]))
    if summary["expanded"]:
        lines += ["", "Expanded (function-body) cases, not counted above:", "",
                  "| op | passed / total |", "|---|---|"]
        for op, c in summary["expanded"].items():
            lines.append(f"| {op} | {c['passed_as_written'] + c['passed_with_const_args']} / {c['cases']} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated ops (default: SUPPORTED_OPS)")
    ap.add_argument("--sample", action="store_true", help="one case per op (see the module docstring)")
    ap.add_argument("--cases", help="regex on case names (debugging)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per build+run before the worker is killed")
    ap.add_argument("--no-expanded", action="store_true", help="skip the *_expanded function-body cases")
    ap.add_argument("--no-const-retry", action="store_true", help="do not retry failures with constant args")
    ap.add_argument("--no-first-output-retry", action="store_true",
                    help="no output-0-only attempt for failing multi-output cases")
    ap.add_argument("--strict", action="store_true", help="no -Wno-error rebuild when a build fails on a warning")
    ap.add_argument("--out", type=Path, help="JSON path (default for a full run: benchmarks/results/conformance.json)")
    ap.add_argument("--worker-log", help="where the workers' stdout/stderr go (default: a temp file, deleted)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-case progress lines")
    args = ap.parse_args(argv)

    full = not (args.ops or args.sample or args.cases or args.no_expanded or args.no_const_retry
                or args.no_first_output_retry)
    ops = supported_ops() if not args.ops else [o.strip() for o in args.ops.split(",") if o.strip()]
    extra = sorted(set(ops) - set(supported_ops()))
    if extra:
        print(f"note: not in SUPPORTED_OPS, allowed for this run: {extra}", file=sys.stderr)

    t_start = time.perf_counter()
    jobs = collect_cases(ops, expanded=not (args.no_expanded or args.sample))
    if args.sample:
        jobs = sample_cases(jobs)
    if args.cases:
        jobs = [j for j in jobs if re.search(args.cases, j["name"])]
    print(f"{len(jobs)} cases for {len({j['op'] for j in jobs})} ops "
          f"(collected in {time.perf_counter() - t_start:.1f} s)", flush=True)

    def progress(i, n, row):
        if not args.quiet:
            print(f"[{i:>4}/{n}] {row['name']:<60} {describe(row)}"[:220], flush=True)

    rows, restarts = run_cases(jobs, args.jobs, args.timeout, not args.no_const_retry, args.strict,
                               args.worker_log, progress, tuple(extra),
                               not args.no_first_output_retry)
    elapsed = time.perf_counter() - t_start
    vm = vm_results()
    summary = summarise(rows, vm)
    for r in rows:
        r["vm_match"] = vm.get(r["name"], {}).get("match")

    report = {
        "generated_by": " ".join(["scripts/conformance.py", *(argv if argv is not None else sys.argv[1:])]),
        "versions": nodetests.versions(),
        "board": "host",
        "tolerances": {"float": TOL, "other_float": TOL_DEFAULT, "int_bool": "exact"},
        "common_dtypes": sorted(COMMON_DTYPES),
        "modes": {
            **nodetests.MODES,
            "first_output": "last attempt for a failed multi-output single-node case: outputs after the first "
                            "dropped (constant args when several inputs); counted apart, not as passed",
        },
        "werror_policy": "strict" if args.strict else "a build failing only on a -Werror warning is rebuilt with "
                                                       "-Wno-error; the warning is kept in the case's 'werror'",
        "runtime_seconds": round(elapsed, 1),
        "worker_restarts": restarts,
        **summary,
        "cases": rows,
    }
    out = args.out or (DEFAULT_OUT if full else None)
    md = markdown(summary)
    print()
    print(md)
    t = summary["totals"]
    nodetests.print_verdicts(summary["ops"], ("pass", "pass_common_dtypes", "partial", "fail"))
    print(f"\nnative cases {t['cases']}: as written {t['passed_as_written']}, with const args "
          f"{t['passed_with_const_args']}, failed {t['failed']} (output 0 only ok: "
          f"{t['passed_first_output_only']}); common dtypes {t['common_dtype_passed']}/"
          f"{t['common_dtype_cases']}; expanded {t['expanded_passed']}/{t['expanded_cases']}")
    print(f"Relax VM passed, edgepack failed: {len(summary['vm_passed_edgepack_failed'])} case(s); "
          f"-Werror warnings: {sum(w['count'] for w in summary['werror_warnings'])}; "
          f"non-EdgepackError exceptions: {len(summary['non_edgepack_exceptions'])}")
    print(f"runtime {elapsed:.0f} s, worker restarts {restarts}")
    if out:
        write_report(report, out)
        print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


def write_report(report: dict, out: Path) -> None:
    """The JSON at `out` and the Markdown table beside it (same stem, .md)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(nodetests.dump_report(report))
    n_werror = len({c for w in report["werror_warnings"] for c in w["cases"]})
    head = (
        "# edgepack conformance: ONNX backend node tests\n\n"
        "Generated by `python scripts/conformance.py` (details per case in "
        f"`{out.name}`). Each case is built for the host board and run through the package's C `run` "
        "program; passed = as written, or with every input but the first made a constant. Floats within "
        "rtol = atol = 1e-4, ints and bools exact, every output compared. Common dtypes: "
        f"{', '.join(report['common_dtypes'])}. Runtime {report['runtime_seconds']:.0f} s.\n\n"
    )
    if n_werror:
        head += (f"{n_werror} case(s) hit a `-Werror` warning in the generated C and were rebuilt with "
                 "`-Wno-error` (listed under `werror_warnings` in the JSON: codegen bugs).\n\n")
    out.with_suffix(".md").write_text(head + markdown({k: report[k] for k in ("ops", "expanded", "totals")}))


if __name__ == "__main__":
    sys.exit(main())
