"""On-device measurement through TVM RPC (docs/tuning.md#measurers): a `tune.measure.Measurer`, beside the
microcontroller one (tune/mcu_trials.py).

`RPCMeasurer`: runs kernels on the servers registered under one key (a board farm behind one tracker,
  tune/tracker.py; `tune.farm.LocalRPC` on loopback), one thread and at most one session per server, a fresh
  session per candidate: the server's session timeout then bounds each candidate, and a crash takes only that
  candidate's session with it. Kernels are built with `tune.export.export_kernel`.

Faults. A candidate that fails to build, times out, raises on the device or crashes the server comes back
as a `MeasureResult` with `error` set and the batch goes on. A server that disappears (killed, rebooted,
network) costs no candidate: the one in flight is measured again on another server. With no server left
the measurer waits up to `wait_s` for one to (re)register, then raises `RPCUnavailableError`.

TVM 0.27 RPC behaviour this module works around (docs/tvm-facts.md#rpc-traps):
- A candidate that crashes the session process (SIGSEGV) kills the server's listen thread
  ("Child process N exited unsuccessfully with error code -11"): the process stays alive, leaves the
  tracker, and its port still accepts TCP connections but never answers. The client sees
  "Check failed: (code == RPCCode::kReturn) is false: code=kShutdown", the same as when the server is
  killed; a refused TCP probe of the server's port tells the two apart.
- `tvm.rpc.connect_tracker` blocks (tune/tracker.py speaks the tracker's protocol instead).
"""

from __future__ import annotations

import logging
import select
import shutil
import socket
import statistics
import tempfile
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..board import Board
from ..errors import BuildError, EdgepackError, RPCUnavailableError, one_line
from .export import export_kernel
from .farm import LocalRPC
from .measure import ArgSpec, MeasureInput, MeasureResult
from .tracker import TrackerConn, registered_servers, tracker_summary

log = logging.getLogger(__name__)


class _Lost(Exception):
    """The server went away (not the candidate's fault): measure the candidate again elsewhere."""


class RPCMeasurer:
    """Measures kernels on the RPC servers of one board (a `Measurer`).

    Endpoint: `tracker=(host, port)` and `key` (default `board.rpc_key`), or `server=(host, port)` for a
    single server started without a tracker (then `key` is that server's --key, default "").
    Timing follows `board.timing`: `warmup` calls in all (time_evaluator makes one, the others are plain
    calls first), then `repeat` means of `number` calls (`number` raised until a repeat lasts
    `min_repeat_ms`), `cooldown_ms` between repeats. The median of the repeats is the figure.
    `timeout_s` bounds one candidate's session (upload, load, runs); `wait_s` how long to wait for a server
    to come back when none is left. `flush_cache` (default: the board's timing.flush_cache) flushes the
    CPU cache before each repeat (all arguments but the first, TVM's "cache_flush_cpu_non_first_arg").
    """

    MAX_LOST = 3  # sessions a candidate may lose to vanishing servers before it is given up

    def __init__(self, board: Board, *, tracker: tuple[str, int] | None = None, key: str | None = None,
                 server: tuple[str, int] | None = None, timeout_s: float = 30.0, wait_s: float = 60.0,
                 flush_cache: bool | None = None, priority: int = 1, workdir: str | Path | None = None,
                 connect_timeout_s: float = 20.0):
        if (tracker is None) == (server is None):
            raise ValueError("Measurer needs exactly one of tracker=(host, port) or server=(host, port)")
        self.board = board
        self.tracker = (tracker[0], int(tracker[1])) if tracker else None
        self.server = (server[0], int(server[1])) if server else None
        self.key = key if key is not None else (board.rpc_key if tracker else "")
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self.flush_cache = board.timing.flush_cache if flush_cache is None else flush_cache
        self.priority = priority
        self.connect_timeout_s = connect_timeout_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="edgepack-measure-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        # a measurer dropped without close() still removes its own build directory
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.workdir), True) if self._own_workdir else None
        self._n_built = 0
        self._log_lock = threading.Lock()
        self._last_wait_log = 0.0
        self.server_threads: dict[str, int] = {}  # "host:port" -> threads its kernels run on

    @classmethod
    def local(cls, board: Board, farm: LocalRPC, **kw) -> RPCMeasurer:
        return cls(board, tracker=(farm.tracker_host, farm.tracker_port), key=farm.key, **kw)

    def __enter__(self) -> RPCMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup()

    # -- public ------------------------------------------------------------------------------------------------
    def measure(self, inp: MeasureInput) -> MeasureResult:
        return self.measure_batch([inp])[0]

    def measure_batch(self, inputs: Sequence[MeasureInput],
                      on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        """Measure every input; results in input order. Kernels to build are built first, here (one heavy
        process at a time), then the runs are spread over all servers registered under the key, a thread
        per server. `on_result(index, result)` is called (from a worker thread) as each result lands."""
        results: list[MeasureResult | None] = [None] * len(inputs)
        paths: list[Path | None] = [None] * len(inputs)
        built: dict[tuple[int, str], Path | EdgepackError] = {}  # one build per kernel object and name
        for i, inp in enumerate(inputs):
            try:
                paths[i] = self._prepare(inp, built)
            except EdgepackError as e:
                results[i] = MeasureResult(None, [], str(e))
                if on_result:
                    on_result(i, results[i])
        try:
            todo = deque(i for i in range(len(inputs)) if results[i] is None)
            if not todo:
                return results
            try:
                n_workers = 1 if self.server else max(1, len(self._wait_for_servers()))
            except RPCUnavailableError as e:
                raise RPCUnavailableError(str(e), results) from None
            state = _Batch(todo, results, paths, inputs, on_result)
            workers = [threading.Thread(target=self._worker, args=(state,), name=f"edgepack-measure-{w}",
                                        daemon=True) for w in range(min(n_workers, len(todo)))]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            if state.fatal is not None:
                raise RPCUnavailableError(str(state.fatal), results)
            return results
        finally:
            for p in built.values():
                if isinstance(p, Path):
                    p.unlink(missing_ok=True)

    # -- building ----------------------------------------------------------------------------------------------
    def _prepare(self, inp: MeasureInput, built: dict) -> Path:
        k = inp.kernel
        if isinstance(k, (str, Path)):
            p = Path(k)
            if not p.is_file():
                raise BuildError(f"kernel file {p} not found")
            return p
        key = (id(k), inp.func_name)  # the objects live through the batch: ids are stable
        if key not in built:
            self._n_built += 1
            safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in inp.func_name)[:40]
            try:
                built[key] = export_kernel(k, self.board, self.workdir / f"k{self._n_built}_{safe}.so",
                                           name=inp.func_name)
            except EdgepackError as e:
                built[key] = e
        if isinstance(built[key], EdgepackError):
            raise built[key]
        return built[key]

    # -- the worker loop -----------------------------------------------------------------------------------------
    def _worker(self, st: _Batch) -> None:
        while True:
            with st.lock:
                if st.fatal is not None or not st.todo:
                    return
                i = st.todo.popleft()
                st.attempts[i] += 1
                attempt = st.attempts[i]
            try:
                res = self._attempt(st.inputs[i], st.paths[i], attempt)
            except _Lost as e:
                with st.lock:
                    st.lost[i] += 1
                    if st.lost[i] >= self.MAX_LOST:
                        res = MeasureResult(None, [], f"lost the RPC session {st.lost[i]} times: {e}",
                                            attempts=attempt)
                    else:
                        log.warning("%s; measuring %s again on another server", e, st.inputs[i].func_name)
                        st.todo.appendleft(i)
                        continue
            except RPCUnavailableError as e:
                with st.lock:
                    st.todo.appendleft(i)
                    if st.fatal is None:
                        st.fatal = e
                return
            except Exception as e:  # a bug here must not hang the batch: report it on the candidate
                res = MeasureResult(None, [], f"measurement failed: {one_line(e)}", attempts=attempt)
            st.results[i] = res
            if st.on_result:
                st.on_result(i, res)

    def _attempt(self, inp: MeasureInput, path: Path, attempt: int) -> MeasureResult:
        sess, server_id = self._session()
        if server_id not in self.server_threads:
            self._check_threads(sess, server_id)
        kind, value = _run_on_session(sess, path, inp, self.board.timing, self.flush_cache)
        if kind == "lost":
            sess = None  # drop the dead session before probing
            host, port = server_id.rsplit(":", 1)
            if _still_listening(host, int(port)):
                return MeasureResult(None, [], f"crashed the RPC session on {server_id} ({value}); a TVM 0.27 "
                                               f"Python RPC server stops serving after that: restart it",
                                     server=server_id, attempts=attempt)
            raise _Lost(f"RPC server {server_id} went away during a session ({value})")
        if kind == "timeout":
            return MeasureResult(None, [], f"timed out after {self.timeout_s:g} s on {server_id} ({value})",
                                 server=server_id, attempts=attempt)
        if kind == "error":
            return MeasureResult(None, [], value, server=server_id, attempts=attempt)
        samples = [float(s) for s in value]
        return MeasureResult(statistics.median(samples), samples, None, server=server_id, attempts=attempt)

    def _check_threads(self, sess, server_id: str) -> None:
        """Once per server: warn when its kernels run on another number of threads than the board's cores
        (the package uses them all). Parallel candidates would be measured on the wrong number of cores:
        TVM's default on x86_64 is half the logical CPUs (docs/tvm-facts.md#cpu-thread-pool)."""
        try:
            n = int(sess.get_function("runtime.NumThreads")())
        except Exception:  # a runtime without the function: nothing to check against
            return
        with self._log_lock:
            self.server_threads[server_id] = n
        if n != self.board.target.cores:
            log.warning("RPC server %s runs kernels on %d thread(s) but board '%s' has %d cores: parallel "
                        "candidates are measured on too %s cores; start the server with TVM_NUM_THREADS=%d",
                        server_id, n, self.board.name, self.board.target.cores,
                        "few" if n < self.board.target.cores else "many", self.board.target.cores)

    # -- sessions ----------------------------------------------------------------------------------------------
    def _session(self):
        """A fresh session on a free server: (RPCSession, "host:port")."""
        failures = 0
        while True:
            if self.tracker:
                host, port, matchkey = self._request()
            else:
                host, port = self.server
                matchkey = self.key
            try:
                return _connect(host, port, matchkey, self.timeout_s, self.connect_timeout_s), f"{host}:{port}"
            except Exception as e:
                failures += 1
                msg = one_line(e)
                if self.server is not None:
                    if "Connect to" in msg and "failed" in msg:  # refused: wait for it to come back
                        self._wait_direct()
                        continue
                    raise RPCUnavailableError(f"cannot open a session on RPC server {host}:{port}: {msg}; check "
                                              f"that it runs and its --key is '{self.key}'") from None
                if failures >= 5:
                    raise RPCUnavailableError(
                        f"tracker {self.tracker[0]}:{self.tracker[1]} hands out RPC server {host}:{port} for key "
                        f"'{self.key}' but sessions on it fail ({msg}): check the server's --host/--custom-addr "
                        f"is reachable from here") from None
                log.info("RPC server %s:%d refused a session (%s); asking the tracker again", host, port, msg)
                time.sleep(0.2)

    def _request(self) -> tuple[str, int, str]:
        """Ask the tracker for a free server under the key, waiting while at least one is registered."""
        th, tp = self.tracker
        deadline = None
        while True:
            try:
                conn = TrackerConn(th, tp, timeout=5.0)
            except OSError:
                deadline = self._waiting(deadline, f"the RPC tracker {th}:{tp} (for key '{self.key}')")
                continue
            try:
                if not registered_servers(conn.summary(), self.key):
                    deadline = self._waiting(deadline)
                    continue
                deadline = None
                conn.request(self.key, self.priority)
                while True:
                    ready, _, _ = select.select([conn.sock], [], [], 1.0)
                    if ready:
                        return conn.reply()
                    # still queued: fine while some server is registered (it is busy), else count down
                    if registered_servers(tracker_summary(th, tp, timeout=5.0), self.key):
                        deadline = None
                    else:
                        deadline = self._waiting(deadline)
            except OSError:
                deadline = self._waiting(deadline, f"the RPC tracker {th}:{tp} (for key '{self.key}')")
            finally:
                conn.close()

    def _wait_for_servers(self) -> list[tuple[str, int]]:
        th, tp = self.tracker
        deadline = None
        while True:
            try:
                reg = registered_servers(tracker_summary(th, tp, timeout=5.0), self.key)
                if reg:
                    return reg
                deadline = self._waiting(deadline)
            except OSError:
                deadline = self._waiting(deadline, f"the RPC tracker {th}:{tp} (for key '{self.key}')")

    def _wait_direct(self) -> None:
        host, port = self.server
        deadline = None
        while not _port_open(host, port):
            deadline = self._waiting(deadline, f"the RPC server {host}:{port}")

    def _waiting(self, deadline: float | None, what: str | None = None) -> float:
        """One step of waiting for a server: log, sleep ~1 s, raise RPCUnavailableError once wait_s is up."""
        now = time.monotonic()
        if deadline is None:
            deadline = now + self.wait_s
        left = deadline - now
        tracker_down = what is not None and self.tracker is not None
        if what is None:
            th, tp = self.tracker
            what = f"an RPC server with key '{self.key}' on tracker {th}:{tp}"
        if left <= 0:
            raise RPCUnavailableError(self._unavailable_message(tracker_down))
        with self._log_lock:
            if now - self._last_wait_log >= 5.0:
                self._last_wait_log = now
                log.warning("waiting for %s (%.0f s left)", what, left)
        time.sleep(min(1.0, max(left, 0.05)))
        return deadline

    def _unavailable_message(self, tracker_down: bool = False) -> str:
        if self.tracker and tracker_down:
            th, tp = self.tracker
            return (f"the RPC tracker {th}:{tp} did not answer for {self.wait_s:g} s (key '{self.key}'): start it "
                    f"(python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {tp} --port-end {tp + 1}) or fix the "
                    f"address")
        server = f"TVM_NUM_THREADS={self.board.target.cores} python -m tvm.exec.rpc_server"
        if self.tracker:
            th, tp = self.tracker
            return (f"no RPC server with key '{self.key}' on tracker {th}:{tp} for {self.wait_s:g} s: start one on "
                    f"the board ({server} --tracker {th}:{tp} --key {self.key}) or raise wait_s")
        h, p = self.server
        return (f"no RPC server at {h}:{p} for {self.wait_s:g} s: start it on the board "
                f"({server} --host 0.0.0.0 --port {p} --port-end {p + 1}) or raise wait_s")


@dataclass
class _Batch:
    todo: deque
    results: list
    paths: list
    inputs: Sequence[MeasureInput]
    on_result: Callable | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    fatal: BaseException | None = None
    attempts: dict = field(default_factory=lambda: _ZeroDict())
    lost: dict = field(default_factory=lambda: _ZeroDict())


class _ZeroDict(dict):
    def __missing__(self, key):
        return 0


def _port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if something accepts TCP connections on host:port (a refused or silent port: False)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _still_listening(host: str, port: int) -> bool:
    """After a lost session: does the server's port still take connections half a second later? A killed
    server's port refuses (its session child may hold the listening socket for a few milliseconds more,
    hence the pause); a TVM 0.27 server whose session process crashed keeps it open, and once its backlog
    is full it stops answering SYNs: a silent port counts as still there too."""
    time.sleep(0.5)
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:  # timed out (a full backlog) or unreachable
        return True


def _connect(host: str, port: int, key: str, session_timeout: float, connect_timeout: float):
    """tvm.rpc.connect, given up after connect_timeout: a server whose listen thread died still accepts the
    TCP connection and then never answers the handshake (the abandoned thread ends when that process dies)."""
    from tvm import rpc

    box: dict = {}

    def run():
        try:
            box["sess"] = rpc.connect(host, port, key, session_timeout=session_timeout)
        except Exception as e:  # handed to the caller
            box["err"] = e

    t = threading.Thread(target=run, name="edgepack-rpc-connect", daemon=True)
    t.start()
    t.join(connect_timeout)
    if t.is_alive():
        raise ConnectionError(f"RPC server {host}:{port} accepted the connection but did not answer "
                              f"the handshake within {connect_timeout:g} s")
    if "err" in box:
        raise box.pop("err")
    return box["sess"]


def _run_on_session(sess, path: Path, inp: MeasureInput, timing, flush_cache: bool) -> tuple[str, Any]:
    """Upload, load, time. Returns ("ok", samples) | ("timeout", msg) | ("error", msg) | ("lost", msg).
    Every remote object lives in this frame only, so the session closes when it returns."""
    import tvm

    try:
        remote_name = f"{uuid.uuid4().hex[:12]}_{path.name}"
        sess.upload(str(path), remote_name)
        mod = sess.load_module(remote_name)
        dev = sess.cpu(0)
        args = _alloc_args(sess, dev, inp.args_spec)
        f = mod.get_function(inp.func_name)
        for _ in range(max(0, timing.warmup - 1)):  # time_evaluator makes one more warm-up call
            f(*args)
        dev.sync()
        evaluator = mod.time_evaluator(
            inp.func_name, dev, number=timing.number, repeat=timing.repeat, min_repeat_ms=timing.min_repeat_ms,
            cooldown_interval_ms=timing.cooldown_ms, repeats_to_cooldown=1,
            f_preproc="cache_flush_cpu_non_first_arg" if flush_cache else "")
        return "ok", list(evaluator(*args).results)
    except tvm.error.RPCSessionTimeoutError as e:
        return "timeout", one_line(e)
    except Exception as e:
        msg = one_line(e)
    # the candidate failed: is the session still there (an error raised on the device) or gone (a crash)?
    try:  # a round trip (0.27 servers have no listdir)
        sess.get_function("tvm.rpc.server.workpath")("ping")
    except Exception:
        return "lost", msg
    return "error", msg


def _alloc_args(sess, dev, spec: Sequence[ArgSpec]) -> list:
    import numpy as np
    import tvm

    try:
        fill = sess.get_function("tvm.contrib.random.random_fill_for_measure")
    except Exception:
        fill = None
    args: list = []
    rng = np.random.default_rng(0)
    for a in spec:
        if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            args.append(int(a))
            continue
        shape, dtype = a
        shape = tuple(int(s) for s in shape)
        if fill is not None:
            t = tvm.runtime.empty(shape, dtype, dev)
            fill(t)
        else:  # a server built without the random contrib: generate here, copy over
            host = rng.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f" else \
                rng.integers(-8, 8, shape).astype(dtype)
            t = tvm.runtime.tensor(host, dev)
        args.append(t)
    return args
