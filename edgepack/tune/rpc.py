"""On-device measurement for the shape-generic tuner, through TVM RPC (docs/tuning.md#measurers: "Measure on
the board (TVM RPC, repeated timed runs, median)").

- `LocalRPC`: a tracker and N RPC servers on loopback (tests, and tuning for the machine edgepack runs on).
- `export_kernel`: build a TIR kernel for a board and link it into a shared object ON THE HOST with the
  board's compiler (boards have no compiler, docs/tvm-facts.md#rpc-export).
- `Measurer`: runs kernels on the servers registered under one key (a board farm behind one tracker), one
  thread and at most one session per server, a fresh session per candidate: the server's session timeout
  then bounds each candidate, and a crash takes only that candidate's session with it.

Faults. A candidate that fails to build, times out, raises on the device or crashes the server comes back
as a `MeasureResult` with `error` set and the batch goes on. A server that disappears (killed, rebooted,
network) costs no candidate: the one in flight is measured again on another server. With no server left
the measurer waits up to `wait_s` for one to (re)register, then raises `RPCUnavailableError`.

TVM 0.27 RPC behaviour this module works around (checked on this machine):
- `rpc_server`/`rpc_tracker` search ports in [--port, --port-end) with --port-end defaulting to 9199:
  a free port above 9199 fails with "cannot bind to any port in [P, 9199)" unless --port-end is given.
- `tvm.rpc.connect_tracker` retries a refused connection for 60 s in 5 s steps; the tracker's
  REQUEST blocks until a server is free, forever. This module speaks the tracker's JSON protocol itself.
- A candidate that crashes the session process (SIGSEGV) kills the server's listen thread
  ("Child process N exited unsuccessfully with error code -11"): the process stays alive, leaves the
  tracker, and its port still accepts TCP connections but never answers. The client sees
  "Check failed: (code == RPCCode::kReturn) is false: code=kShutdown", the same as when the server is
  killed; a refused TCP probe of the server's port tells the two apart.
- `tvm.support.cc.cross_compiler(...)` appends the options of every call to its own base options: build a
  fresh one per export.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
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
from ..net import free_port

log = logging.getLogger(__name__)

# tvm.rpc.base constants, repeated so that LocalRPC and the tracker client need no `import tvm` (seconds)
_TRACKER_MAGIC = 0x2F271
_TRACKER_SUCCESS = 0
_TRACKER_REQUEST = 4
_TRACKER_SUMMARY = 6


# ---------------------------------------------------------------------------------------------------------
# tracker protocol: [int32 length][json], after a 4-byte magic handshake


class _TrackerConn:
    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock.sendall(struct.pack("<i", _TRACKER_MAGIC))
            if struct.unpack("<i", self._recv(4))[0] != _TRACKER_MAGIC:
                raise ConnectionError(f"{host}:{port} is not a TVM RPC tracker")
        except BaseException:
            self.sock.close()
            raise

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("RPC tracker closed the connection")
            buf += chunk
        return buf

    def send(self, msg: list) -> None:
        data = json.dumps(msg).encode()
        self.sock.sendall(struct.pack("<i", len(data)) + data)

    def recv(self) -> Any:
        n = struct.unpack("<i", self._recv(4))[0]
        return json.loads(self._recv(n).decode())

    def summary(self) -> dict:
        self.send([_TRACKER_SUMMARY])
        code, value = self.recv()
        if code != _TRACKER_SUCCESS:
            raise ConnectionError(f"RPC tracker summary failed: {value!r}")
        return value

    def close(self) -> None:
        self.sock.close()


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> dict:
    """The tracker's summary: {"queue_info": {key: {"free", "pending"}}, "server_info": [{"key": "server:K",
    "addr": [host, port]}, ...]}. Raises OSError when the tracker does not answer."""
    conn = _TrackerConn(host, port, timeout)
    try:
        return conn.summary()
    finally:
        conn.close()


def registered_servers(summary: dict, key: str) -> list[tuple[str, int]]:
    """Addresses of the servers registered under `key` (busy ones included)."""
    return [(str(s["addr"][0]), int(s["addr"][1])) for s in summary.get("server_info", [])
            if s.get("key") == f"server:{key}"]


# ---------------------------------------------------------------------------------------------------------
# LocalRPC


@dataclass
class _Proc:
    popen: subprocess.Popen
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


class LocalRPC:
    """A tracker and `servers` RPC servers on loopback, each in its own process group.

        with LocalRPC(key="host", servers=2) as lr:
            m = Measurer(board, tracker=(lr.tracker_host, lr.tracker_port), key=lr.key)

    Also `lr = LocalRPC(...).start()` / `lr.stop()`; a farm not stopped is stopped at interpreter exit.
    `restart=True` keeps the farm at strength: a server that leaves the tracker (killed, or turned into a
    listener that never answers by a crashing candidate) is killed and started again on a new port.
    Starting one server costs two TVM imports (~7 s each on this machine).
    """

    def __init__(self, key: str = "local", servers: int = 1, *, host: str = "127.0.0.1",
                 start_timeout: float = 120.0, log_dir: str | Path | None = None, restart: bool = False,
                 python: str = sys.executable, env: dict[str, str] | None = None):
        if servers < 1:
            raise ValueError("LocalRPC needs at least one server")
        self.key = key
        self.n_servers = servers
        self.tracker_host = host
        self.tracker_port = 0
        self.start_timeout = start_timeout
        self.restart = restart
        self._python = python
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._own_log_dir = log_dir is None
        self._log_dir = Path(log_dir) if log_dir else None
        self._tracker: _Proc | None = None
        self._servers: list[_Proc] = []
        self._all: list[_Proc] = []  # every process ever started (stop() kills and reaps them all)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._guardian: subprocess.Popen | None = None
        self._n_started = 0

    # -- life cycle ----------------------------------------------------------------------------------------
    def __enter__(self) -> LocalRPC:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> LocalRPC:
        if self._tracker is not None:
            return self
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="edgepack-rpc-"))
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        atexit.register(self.stop)
        (self._log_dir / "groups").write_text("")
        self._guardian = subprocess.Popen([self._python, "-c", _GUARDIAN, str(os.getpid()), str(self._log_dir / "groups")],
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._start_tracker()
            for _ in range(self.n_servers):
                self._servers.append(self._spawn_server())
            self.wait_registered(self.n_servers, self.start_timeout)
        except BaseException:
            self.stop()
            raise
        if self.restart:
            self._watchdog = threading.Thread(target=self._watch, name="edgepack-rpc-watchdog", daemon=True)
            self._watchdog.start()
        return self

    def stop(self) -> None:
        """Kill every process group started (SIGKILL: the server's forked session children keep the port
        after SIGTERM) and reap them. Safe to call twice."""
        self._stopping.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=10)
        self._watchdog = None
        with self._lock:
            procs, self._all, self._servers, self._tracker = self._all, [], [], None
        guardian, self._guardian = self._guardian, None
        _kill_groups([p.popen for p in procs] + ([guardian] if guardian else []))
        atexit.unregister(self.stop)
        if self._own_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    # -- introspection ---------------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """Process group ids of everything this farm has started and not yet reaped."""
        with self._lock:
            return [p.pid for p in self._all]

    @property
    def servers(self) -> list[str]:
        """"host:port" of each server (the id a MeasureResult carries)."""
        with self._lock:
            return [f"{self.tracker_host}:{p.port}" for p in self._servers]

    def server_log(self, i: int) -> str:
        with self._lock:
            path = self._servers[i].log
        return path.read_text(errors="replace") if path.exists() else ""

    def registered(self) -> list[tuple[str, int]]:
        return registered_servers(tracker_summary(self.tracker_host, self.tracker_port), self.key)

    def kill_server(self, i: int) -> None:
        """Kill server i's process group now (fault injection); with restart=True the watchdog replaces it."""
        with self._lock:
            p = self._servers[i]
        _kill_group(p.popen, reap=True)

    def wait_registered(self, n: int | None = None, timeout: float | None = None) -> None:
        """Block until the tracker lists this farm's servers (at least n of them) as registered and free."""
        n = self.n_servers if n is None else n
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        seen: list = []
        while True:
            self._check_alive()
            try:
                summary = tracker_summary(self.tracker_host, self.tracker_port, timeout=2.0)
                with self._lock:
                    ours = {p.port for p in self._servers}
                seen = [a for a in registered_servers(summary, self.key) if a[1] in ours]
                free = summary.get("queue_info", {}).get(self.key, {}).get("free", 0)
                if len(seen) >= n and free >= n:
                    return
            except OSError:
                pass  # tracker not listening yet
            if time.monotonic() > deadline:
                raise EdgepackError(
                    f"RPC servers with key '{self.key}' did not register with the tracker "
                    f"{self.tracker_host}:{self.tracker_port} within {timeout:g} s ({len(seen)}/{n} registered); "
                    f"logs in {self._log_dir}")
            time.sleep(0.25)

    # -- internals -------------------------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str], port: int) -> _Proc:
        self._n_started += 1
        log_path = self._log_dir / f"{name}-{self._n_started}.log"
        with open(log_path, "wb") as f:
            popen = subprocess.Popen([self._python, "-m", *args], stdin=subprocess.DEVNULL, stdout=f,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=self._env)
        p = _Proc(popen, port, log_path)
        with self._lock:
            self._all.append(p)
            with open(self._log_dir / "groups", "a") as g:
                g.write(f"{popen.pid}\n")
        return p

    def _start_tracker(self) -> None:
        for _attempt in range(3):
            port = free_port(self.tracker_host)
            p = self._spawn("tracker", ["tvm.exec.rpc_tracker", "--host", self.tracker_host, "--port", str(port),
                                        "--port-end", str(port + 1)], port)
            deadline = time.monotonic() + self.start_timeout
            while p.popen.poll() is None and time.monotonic() < deadline:
                try:
                    tracker_summary(self.tracker_host, port, timeout=2.0)
                    self._tracker, self.tracker_port = p, port
                    return
                except OSError:
                    time.sleep(0.25)
            _kill_group(p.popen)
            if "cannot bind" not in _tail(p.log):  # lost a race for the port: try another one
                break
        raise EdgepackError(f"the RPC tracker did not start on {self.tracker_host}: {_tail(p.log) or 'no output'}")

    def _spawn_server(self) -> _Proc:
        port = free_port(self.tracker_host)
        return self._spawn("server", ["tvm.exec.rpc_server", "--tracker", f"{self.tracker_host}:{self.tracker_port}",
                                      "--key", self.key, "--host", self.tracker_host, "--port", str(port),
                                      "--port-end", str(port + 1)], port)

    def _check_alive(self) -> None:
        with self._lock:
            procs = ([self._tracker] if self._tracker else []) + list(self._servers)
        for i, p in enumerate(procs):
            if p.popen.poll() is None:
                continue
            if p is not self._tracker and "cannot bind" in _tail(p.log):  # lost a port race: start it again
                with self._lock:
                    self._servers[self._servers.index(p)] = self._spawn_server()
                continue
            what = "tracker" if p is self._tracker else "RPC server"
            raise EdgepackError(f"the {what} (pid {p.pid}) exited with code {p.popen.returncode}: "
                                f"{_tail(p.log) or 'no output'} (log {p.log})")

    def _watch(self) -> None:
        """restart=True: replace servers that left the tracker for more than 3 s or exited."""
        missing_since: dict[int, float] = {}
        started: dict[int, float] = {}
        while not self._stopping.wait(1.0):
            try:
                reg = {a[1] for a in self.registered()}
            except OSError:
                continue  # the tracker is gone: nothing a server restart would fix
            now = time.monotonic()
            with self._lock:
                for i, p in enumerate(list(self._servers)):
                    if p.port in reg:
                        missing_since.pop(p.pid, None)
                        started.pop(p.pid, None)
                        continue
                    if p.pid in started and p.popen.poll() is None and now - started[p.pid] < self.start_timeout:
                        continue  # still starting
                    first = missing_since.setdefault(p.pid, now)
                    if now - first < 3.0 and p.popen.poll() is None:
                        continue
                    if self._stopping.is_set():
                        return
                    log.warning("RPC server %s:%d (key %s) left the tracker: restarting it",
                                self.tracker_host, p.port, self.key)
                    _kill_group(p.popen)
                    self._all.remove(p)
                    q = self._spawn_server()
                    self._servers[i] = q
                    started[q.pid] = now


def _tail(path: Path, n: int = 1) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


# Runs beside a LocalRPC in its own session: if the process that owns the farm dies without stopping it
# (SIGKILL, a crash), it kills every process group the farm started. Process groups, because an RPC server
# forks session workers that outlive it otherwise (they hold their own pipe open and never see EOF).
_GUARDIAN = r'''
import os, signal, sys, time
owner, groups = sys.argv[1], sys.argv[2]
def owner_alive():
    try:
        with open(f"/proc/{owner}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while os.path.exists(groups) and owner_alive():
    time.sleep(0.3)
if os.path.exists(groups):
    for pgid in open(groups).read().split():
        try:
            os.killpg(int(pgid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
'''


def _kill_group(popen: subprocess.Popen, reap: bool = True) -> None:
    _kill_groups([popen], reap)


def _kill_groups(popens: Sequence[subprocess.Popen], reap: bool = True) -> None:
    """SIGKILL each process group, reap the leaders, wait (<= 5 s) until no member is left running.
    Members whose parent died are reparented and reaped by init: they may linger as zombies for a moment."""
    for p in popens:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if not reap:
        return
    for p in popens:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("process %d did not exit after SIGKILL", p.pid)
    deadline = time.monotonic() + 5
    while any(group_alive(p.pid) for p in popens) and time.monotonic() < deadline:
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    """True while a process of group `pgid` is running (zombies waiting for init to reap them don't count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


# ---------------------------------------------------------------------------------------------------------
# building a kernel for a board


def export_kernel(func_or_mod, board: Board, path: str | Path, *, name: str | None = None,
                  asserts: bool = True) -> Path:
    """Build a TIR PrimFunc / IRModule (or take a built runtime Module) for `board.tvm_target()` and link it
    into a shared object on the host with the board's compiler. Returns `path`.

    Asserts stay ON by default: a kernel called with shapes or dtypes it was not built for fails with an
    error instead of reading or writing out of bounds (which would crash the server). They cost a few
    checks at kernel entry, outside every loop; packages build with asserts off (codegen/kernels.py)."""
    import tvm
    from tvm.support import cc

    path = Path(path)
    if board.toolchain.platform != "posix":
        raise BuildError(f"board '{board.name}': RPC measurement needs a board that loads shared objects "
                         f"(toolchain.platform 'posix'), this one is '{board.toolchain.platform}'")
    what = name or "kernel"
    try:
        if isinstance(func_or_mod, tvm.runtime.Module):
            lib = func_or_mod
        else:
            if isinstance(func_or_mod, tvm.tirx.PrimFunc):
                attrs = func_or_mod.attrs
                has_sym = attrs is not None and "global_symbol" in attrs
                sym = name or (str(attrs["global_symbol"]) if has_sym else "main")
                what = sym
                mod = tvm.IRModule({sym: func_or_mod.with_attr("global_symbol", sym)})
            elif isinstance(func_or_mod, tvm.IRModule):
                mod = func_or_mod
            else:
                raise TypeError(f"expected a PrimFunc, IRModule or runtime Module, got {type(func_or_mod).__name__}")
            config = {} if asserts else {"tirx.disable_assert": True}
            with tvm.transform.PassContext(opt_level=3, config=config):
                lib = tvm.tirx.build(mod, target=board.tvm_target())
        path.parent.mkdir(parents=True, exist_ok=True)
        # a fresh cross_compiler per export: it accumulates the options of every call it serves
        fcompile = cc.cross_compiler(board.toolchain.cc,
                                     options=[*board.toolchain.cflags, *board.toolchain.ldflags])
        lib.export_library(str(path), fcompile=fcompile)
    except Exception as e:  # TVM errors derive from several bases (ValueError, RuntimeError, TVMError...)
        raise BuildError(f"building {what} for board '{board.name}' failed: {one_line(e)}") from None
    return path


# ---------------------------------------------------------------------------------------------------------
# measuring


ArgSpec = tuple[Sequence[int], str] | int


@dataclass(frozen=True)
class MeasureInput:
    """One kernel run: `kernel` is a shared object (path) built by `export_kernel`, a built runtime Module,
    or a PrimFunc / IRModule that the measurer builds. `args_spec` has one entry per parameter:
    (shape, dtype) for a buffer (a random tensor made on the device) or an int for an int64 scalar."""

    kernel: Any
    func_name: str
    args_spec: Sequence[ArgSpec]


@dataclass(frozen=True)
class MeasureResult:
    """`median_s` is None exactly when `error` is set (as in tune/db.py). `samples_s` has one mean per
    repeat. `server` is "host:port" of the server that ran it, `attempts` the sessions it took (> 1 when a
    server disappeared mid-run)."""

    median_s: float | None
    samples_s: list[float] = field(default_factory=list)
    error: str | None = None
    server: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


class _Lost(Exception):
    """The server went away (not the candidate's fault): measure the candidate again elsewhere."""


class Measurer:
    """Measures kernels on the RPC servers of one board.

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

    @classmethod
    def local(cls, board: Board, farm: LocalRPC, **kw) -> Measurer:
        return cls(board, tracker=(farm.tracker_host, farm.tracker_port), key=farm.key, **kw)

    def __enter__(self) -> Measurer:
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
                conn = _TrackerConn(th, tp, timeout=5.0)
            except OSError:
                deadline = self._waiting(deadline, f"the RPC tracker {th}:{tp} (for key '{self.key}')")
                continue
            try:
                if not registered_servers(conn.summary(), self.key):
                    deadline = self._waiting(deadline)
                    continue
                deadline = None
                conn.send([_TRACKER_REQUEST, self.key, "", self.priority])
                while True:
                    ready, _, _ = select.select([conn.sock], [], [], 1.0)
                    if ready:
                        code, value = conn.recv()
                        if code != _TRACKER_SUCCESS:
                            raise ConnectionError(f"tracker refused the request: {value!r}")
                        host, port, matchkey = value
                        return str(host), int(port), str(matchkey)
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
        if self.tracker:
            th, tp = self.tracker
            return (f"no RPC server with key '{self.key}' on tracker {th}:{tp} for {self.wait_s:g} s: start one on "
                    f"the board (python -m tvm.exec.rpc_server --tracker {th}:{tp} --key {self.key}) or raise "
                    f"wait_s")
        h, p = self.server
        return (f"no RPC server at {h}:{p} for {self.wait_s:g} s: start it on the board "
                f"(python -m tvm.exec.rpc_server --host 0.0.0.0 --port {p} --port-end {p + 1}) or raise wait_s")


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
