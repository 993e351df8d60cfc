"""ONNX backend node tests as picklable jobs, and a crash-isolating worker process to run them.

Shared by scripts/op_shortlist.py (each case through TVM's Relax VM) and scripts/conformance.py (each
case built and run as an edgepack C package):

  * ``collect_cases``: regenerates ONNX's node tests (onnx >= 1.23 no longer ships their data) with
    ``onnx.backend.test.case.node.collect_testcases()`` and keeps the cases of the given op types;
  * ``const_args_model``: the "constant retry", every graph input but the first made an initializer;
  * ``compare``: one output against the expected one, with tolerances for floats;
  * ``first_line``: an exception as one line (TVM messages carry tracebacks);
  * ``Runner``: one worker process running a per-case function, restarted after a crash or a timeout;
  * ``dump_report``, ``versions``, ``print_verdicts``: report helpers.

Imported by its module name (scripts/ is on sys.path when a script runs and in
tests/test_conformance_sample.py): spawned workers unpickle ``_worker`` and their setup function by
module name.
"""
from __future__ import annotations

import collections
import contextlib
import json
import multiprocessing as mp
import os
import platform
import re
import warnings

import numpy as np

TOL_DEFAULT = (1e-2, 1e-2)  # float8 and other exotic floats
SIMPLE_ELEM_TYPES = {1, 7, 9}  # TensorProto.FLOAT, INT64, BOOL
# float8 / 4-bit / 2-bit / string / complex: outside anything edgepack targets.
EXOTIC_TYPE_NAME = re.compile(r"FLOAT8|FLOAT4|INT4|INT2|STRING|COMPLEX|^non-tensor")
# numpy dtype kinds compared exactly by default (bool, ints, object/strings); others within tolerance.
EXACT_KINDS = "biuOUS"
MODES = {
    "as_is": "all test inputs are graph inputs (the ONNX test as written)",
    "const_args": "retry of a failed case: every input but the first is an initializer",
}


# ----------------------------------------------------------------------------- collecting cases

def first_line(exc: BaseException) -> str:
    """Exception type plus the first meaningful line of its message (TVM messages carry tracebacks)."""
    msg = str(exc)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Traceback", "File \"", "at ", "File "))] or lines
    first = lines[0] if lines else ""
    first = re.sub(r"0x[0-9a-f]{6,}", "0x…", first)
    return f"{type(exc).__name__}: {first}"[:300]


def to_numpy(a):
    """Test data arrives as ndarray, numpy scalar, TensorProto (exotic dtypes), list (sequence) or None."""
    import onnx
    from onnx import numpy_helper

    if isinstance(a, onnx.TensorProto):
        return numpy_helper.to_array(a)
    if isinstance(a, np.ndarray):
        return a
    if isinstance(a, np.generic):
        return np.asarray(a)
    raise TypeError(f"unsupported test value kind {type(a).__name__} (sequence/optional)")


def case_meta(model) -> dict:
    """dtypes and static-ness of every tensor the graph touches (inputs, outputs, inferred intermediates)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - fall back to the declared types
        inferred = model
    g = inferred.graph
    elem_types, static = set(), True
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            static = False
            elem_types.add(f"non-tensor:{t.WhichOneof('value')}")
            continue
        elem_types.add(t.tensor_type.elem_type)
        if not t.tensor_type.HasField("shape") or any(
            not d.HasField("dim_value") for d in t.tensor_type.shape.dim
        ):
            static = False
    for init in g.initializer:
        elem_types.add(init.data_type)
    # Outputs without an inferred type (data-dependent ops) also make the case non-static.
    typed = {vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)} | {i.name for i in g.initializer}
    for node in g.node:
        if any(o and o not in typed for o in node.output):
            static = False
    names = sorted(
        onnx.TensorProto.DataType.Name(e) if isinstance(e, int) else e for e in elem_types
    )
    simple_types = all(isinstance(e, int) and e in SIMPLE_ELEM_TYPES for e in elem_types)
    exotic = any(EXOTIC_TYPE_NAME.search(n) for n in names)
    return {"dtypes": names, "static": static, "simple": simple_types and static, "exotic": exotic}


def collect_cases(ops: list[str], expanded: bool) -> list[dict]:
    """Regenerate ONNX's node tests and keep the cases of `ops`; each job is picklable for a worker.

    Jobs come in ONNX's collection order. ``_expanded`` cases (the op's ONNX function body) count as
    the op's and are kept only when `expanded` is true.
    """
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        cases = collect_testcases()
    base_op = {
        t.name: t.model.graph.node[0].op_type for t in cases if "_expanded" not in t.name and t.model is not None
    }
    wanted = set(ops)
    jobs = []
    for t in cases:
        if t.model is None or t.kind != "node":
            continue
        is_exp = "_expanded" in t.name
        op = base_op.get(re.sub(r"_expanded.*$", "", t.name)) if is_exp else t.model.graph.node[0].op_type
        if op not in wanted or (is_exp and not expanded):
            continue
        (inputs, outputs), = t.data_sets  # node tests have exactly one data set
        opset = max((o.version for o in t.model.opset_import if o.domain in ("", "ai.onnx")), default=None)
        jobs.append({
            "name": t.name,
            "op": op,
            "expanded": is_exp,
            "opset": opset,
            "model": t.model.SerializeToString(),
            "inputs": list(inputs),
            "outputs": list(outputs),
            "meta": case_meta(t.model),
            "case_tol": [t.rtol, t.atol],
        })
    return jobs


# ----------------------------------------------------------------------------- running one case

def const_args_model(model, inputs):
    """Every graph input but the first becomes an initializer holding the test's value."""
    from onnx import numpy_helper

    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    keep = list(g.input[:1])
    for vi, val in zip(list(g.input[1:]), inputs[1:]):
        g.initializer.append(numpy_helper.from_array(to_numpy(val), vi.name))
    del g.input[:]
    g.input.extend(keep)
    return m, inputs[:1]


def compare(got: np.ndarray, want: np.ndarray, tol: dict[str, tuple[float, float]], *,
            tol_default: tuple[float, float] = TOL_DEFAULT, exact_kinds: str = EXACT_KINDS,
            note_equal_values: bool = True, err_without_finite: float = 0.0) -> tuple[bool, str, float]:
    """(match, why not, max |diff|) of one output. Shape and dtype must match.

    A dtype whose numpy kind is in `exact_kinds` must match exactly; any other (floats, and ml_dtypes'
    bfloat16/float8/4-bit types, numpy kind "V") within ``tol[str(dtype)]`` (rtol, atol), else
    `tol_default`. max |diff| is over the elements finite on both sides (`err_without_finite` when there
    are none), NaN when shape or dtype differ or an exact comparison fails. `note_equal_values` adds
    " (values equal)" to a dtype mismatch whose values are the same.
    """
    if got.shape != want.shape:
        return False, f"shape {list(got.shape)} != expected {list(want.shape)}", float("nan")
    if got.dtype != want.dtype:
        # A C runtime hands out buffers of the declared dtype: a different dtype is a real mismatch.
        why = f"dtype {got.dtype} != expected {want.dtype}"
        if note_equal_values and got.dtype.kind in "biuf" and want.dtype.kind in "biuf" \
                and np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True):
            why += " (values equal)"
        return False, why, float("nan")
    if want.dtype.kind in exact_kinds:
        if np.array_equal(got, want):
            return True, "", 0.0
        return False, f"{int(np.count_nonzero(got != want))} of {want.size} elements differ", float("nan")
    rtol, atol = tol.get(str(want.dtype), tol_default)
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w64) & np.isfinite(g64)
    err = float(np.max(np.abs(g64 - w64)[finite])) if finite.any() else err_without_finite
    if np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
        return True, "", err
    nonfinite = int(np.count_nonzero(~finite & ~((g64 == w64) | (np.isnan(g64) & np.isnan(w64)))))
    why = f"max |diff| {err:.3g} > tol (rtol={rtol}, atol={atol})"
    if nonfinite:
        why += f", {nonfinite} inf/nan mismatches"
    return False, why, err


# ----------------------------------------------------------------------------- worker process

def _worker(conn, log_path: str | None, setup, setup_args: tuple) -> None:
    """A worker's main: ``run = setup(*setup_args)`` once, then ``run(job, mode)`` per message until None."""
    # One process runs the cases; keep its runtime thread pool small (the machine is shared).
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    # TVM's C++ logging writes straight to fd 2 ("BlockBuilder destroyed with remaining blocks!"):
    # send the worker's fds 1 and 2 to a log file so the parent's output stays readable.
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = setup(*setup_args)  # pay the heavy imports once, before "ready"
        conn.send("ready")
        while True:
            msg = conn.recv()
            if msg is None:
                return
            job, mode = msg
            conn.send(run(job, mode))


class Runner:
    """A single worker process, restarted after a crash or a timeout.

    The worker calls ``setup(*setup_args)`` once and runs each case with the function it returns,
    ``run(job, mode) -> dict``. `setup` must be a module-level function: the worker is spawned and
    unpickles it by module name. A crashed or timed-out case's result is `crash_fields` (key order
    kept) with "mode" and "error" filled in.
    """

    def __init__(self, setup, setup_args: tuple, timeout: float, log_path: str | None, *,
                 what: str = "worker", crash_fields: dict | None = None):
        self.setup, self.setup_args = setup, tuple(setup_args)
        self.timeout = timeout
        self.log_path = log_path
        self.what = what
        self.crash_fields = crash_fields or {"mode": None, "match": False, "stage": "crash", "error": None}
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None
        self.restarts = 0

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.log_path, self.setup, self.setup_args),
                                daemon=True)
        proc.start()  # spawn: this module and setup's must be importable by name (scripts/ on sys.path)
        self.proc = proc
        child.close()
        self.conn = parent
        try:
            ok = self.conn.poll(300) and self.conn.recv() == "ready"
        except EOFError:
            ok = False
        if not ok:
            self._stop(kill=True)
            raise RuntimeError(f"{self.what} did not start (see {self.log_path})")

    def _stop(self, kill: bool):
        if self.proc is None:
            return
        if kill:
            self.proc.kill()  # only ever the worker this Runner started
        else:
            with contextlib.suppress(Exception):
                self.conn.send(None)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def run(self, job: dict, mode: str) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send((job, mode))
        try:
            if self.conn.poll(self.timeout):
                return self.conn.recv()
            reason = f"timeout after {self.timeout:g} s"
        except EOFError:
            self.proc.join(5)
            code = self.proc.exitcode
            reason = f"worker crashed (exit code {code}" + (f", signal {-code})" if code and code < 0 else ")")
        self._stop(kill=True)
        self.restarts += 1
        return {**self.crash_fields, "mode": mode, "error": reason}

    def close(self):
        self._stop(kill=False)


# ----------------------------------------------------------------------------- reports

def versions() -> dict[str, str]:
    """Versions of what the results depend on (read from package metadata: TVM is not imported)."""
    from importlib.metadata import version

    return {"apache-tvm": version("apache-tvm"), "onnx": version("onnx"), "numpy": np.__version__,
            "python": platform.python_version()}


def dump_report(report: dict) -> str:
    """Indented JSON, except one compact line per case (smaller and diff-friendly)."""
    cases = report.pop("cases")
    text = json.dumps(report, indent=1, default=str)
    lines = ",\n".join("  " + json.dumps(c, default=str, separators=(",", ":")) for c in cases)
    report["cases"] = cases
    return text[:-2] + ',\n "cases": [\n' + lines + "\n ]\n}\n"


def print_verdicts(summaries: dict[str, dict], verdicts: tuple[str, ...]) -> None:
    """One line per verdict, in the order of `verdicts`: how many ops got it, and which."""
    by_verdict = collections.defaultdict(list)
    for op, c in summaries.items():
        by_verdict[c["verdict"]].append(op)
    for v in verdicts:
        print(f"{v} ({len(by_verdict[v])}): {' '.join(by_verdict[v])}")
