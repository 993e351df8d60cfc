"""A local RPC farm: a TVM RPC tracker and N RPC servers on loopback, for the tests and for tuning the machine
edgepack runs on, with the process-group handling TVM's servers need.

- Every process runs in its own session and is stopped by killing its process group: an RPC server forks
  session workers that keep its port after SIGTERM (docs/tvm-facts.md#rpc-server-process-group).
- Ports are free ones (bound to port 0 first), passed with `--port-end P+1`: TVM's tracker and server refuse
  ports above their default --port-end 9199 otherwise (docs/tvm-facts.md#rpc-commands).
- A guardian process beside the farm kills every group it started if the owner dies without stopping it.
- `restart=True`: a watchdog replaces a server that leaves the tracker, which a candidate that crashes its
  session makes it do (docs/tvm-facts.md#rpc-traps).
- Servers run kernels on `threads` threads (default: every core of this machine, what a package built for it
  uses). TVM's own default on x86_64 is half the logical CPUs, one thread on a 2-core machine, which measured
  every parallel candidate on one core (docs/tvm-facts.md#cpu-thread-pool).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import EdgepackError
from ..net import free_port
from .tracker import registered_servers, tracker_summary

log = logging.getLogger(__name__)


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
            m = RPCMeasurer(board, tracker=(lr.tracker_host, lr.tracker_port), key=lr.key)

    Also `lr = LocalRPC(...).start()` / `lr.stop()`; a farm not stopped is stopped at interpreter exit.
    `restart=True` keeps the farm at strength: a server that leaves the tracker (killed, or turned into a
    listener that never answers by a crashing candidate) is killed and started again on a new port.
    Starting one server costs two TVM imports (~7 s each on this machine).
    """

    def __init__(self, key: str = "local", servers: int = 1, *, host: str = "127.0.0.1",
                 start_timeout: float = 120.0, log_dir: str | Path | None = None, restart: bool = False,
                 python: str = sys.executable, env: dict[str, str] | None = None, threads: int | None = None):
        if servers < 1:
            raise ValueError("LocalRPC needs at least one server")
        self.key = key
        self.n_servers = servers
        self.tracker_host = host
        self.tracker_port = 0
        self.start_timeout = start_timeout
        self.restart = restart
        self._python = python
        self.threads = threads or os.cpu_count() or 1
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", "TVM_NUM_THREADS": str(self.threads), **(env or {})}
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
