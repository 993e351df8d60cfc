"""onnxruntime as a baseline: same model, same inputs, this machine, CPU execution provider.

Timed through its Python API, whose fixed per-call cost (argument conversion, output allocation) is not the
model's: it is measured on a one-node Identity model fed the same arrays and reported beside the figures, so a
report can give the ratio with and without it. Also used by benchmarks/encoder_vs_onnxruntime.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def session(model, threads: int):
    """A CPU session with `threads` intra-op threads and default (full) graph optimisation, as users run it."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, o, providers=["CPUExecutionProvider"])


def ort_samples_ns(sess, feeds: dict[str, np.ndarray], repeat: int, warmup: int = 3, min_time_ms: int = 0) -> list[int]:
    """Wall time of `repeat` calls (more while the total is under min_time_ms) after `warmup` calls."""
    for _ in range(warmup):
        sess.run(None, feeds)
    out: list[int] = []
    while len(out) < repeat or sum(out) < min_time_ms * 1_000_000:
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        out.append(time.perf_counter_ns() - t0)
    return out


def identity_model(feeds: dict[str, np.ndarray]) -> bytes:
    """One Identity node per input (any sizes of the same ranks): the Python call cost of these inputs."""
    from onnx import helper

    ins, outs, nodes = [], [], []
    for name, a in feeds.items():
        dt = helper.np_dtype_to_tensor_dtype(a.dtype)
        shape = [f"d{k}" for k in range(a.ndim)]
        ins.append(helper.make_tensor_value_info(name, dt, shape))
        outs.append(helper.make_tensor_value_info(f"{name}_out", dt, shape))
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    g = helper.make_graph(nodes, "identity", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


class OrtBaseline:
    """onnxruntime sessions at the given thread counts, plus the call-cost probe, for one model."""

    def __init__(self, model: str | Path, threads: list[int]):
        import onnxruntime as ort

        self.version = ort.__version__
        self.threads = sorted(set(threads))
        self.sessions = {f"onnxruntime_{t}t": (t, session(model, t)) for t in self.threads}
        first = next(iter(self.sessions.values()))[1]
        self.input_names = [i.name for i in first.get_inputs()]
        self._identity = None

    def info(self) -> dict:
        return {"name": "onnxruntime", "version": self.version, "provider": "CPUExecutionProvider",
                "graph_optimization": "all (default)", "threads": self.threads}

    def feeds(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.input_names, arrays))

    def measure(self, feeds: dict, repeat: int, warmup: int) -> dict[str, list[int]]:
        """One round: every session, then the call-cost probe (key "call_cost"); returns once onnxruntime's
        worker threads have gone idle, so that the next contender does not share the cores with them."""
        out = {k: ort_samples_ns(s, feeds, repeat, warmup) for k, (_, s) in self.sessions.items()}
        if self._identity is None:
            self._identity = session(identity_model(feeds), 1)
        out["call_cost"] = ort_samples_ns(self._identity, feeds, repeat, warmup)
        wait_until_idle()
        return out


def wait_until_idle(max_s: float = 1.0, quantum_s: float = 0.01, busy: float = 0.05) -> float:
    """Sleep until this process's threads use under `busy` of a core over `quantum_s` (at most `max_s`);
    -> seconds waited. onnxruntime's intra-op workers spin after a run (measured: 40 ms at 100% of a core
    after a 2-thread session's run of MiniLM, 2026-12-07): a 2-thread edgepack run started then shares a core
    with them, which made edgepack's 2-thread figures at small sizes up to 3x slow and their spread 100-200%."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        c0 = time.process_time()  # CPU time of every thread of this process
        time.sleep(quantum_s)
        if time.process_time() - c0 < busy * quantum_s:
            break
    return time.monotonic() - t0
