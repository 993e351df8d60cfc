"""`edgepack rpc-server [start|stop|status] --board rpi4 --host H`: TVM's RPC server on a Linux board over SSH.

The server (`python -m tvm.exec.rpc_server`, from the apache-tvm wheel installed on the board) runs in its own
session on the board (setsid), so stopping it kills its whole process group, forked workers included (workers
keep the port after SIGTERM otherwise: docs/tvm-facts.md#rpc-server-process-group). Its pid and log are kept
in the deploy directory.
"""

from __future__ import annotations

import argparse
import re
import shlex
import time

from .. import argtypes

START_TIMEOUT_S = 180  # the aarch64 wheel takes ~20-50 s to start under emulation (load-dependent), a few s on a Pi


def _server_words(board, a: argparse.Namespace, python: str) -> list[str]:
    rpc = board.section("rpc")
    port = int(a.rpc_port or rpc.get("port", 9090))
    words = [python, "-m", "tvm.exec.rpc_server", "--host", a.bind or rpc.get("bind", "0.0.0.0"),
             "--port", str(port), "--port-end", str(port + 1)]  # exactly this port, not the next free one
    if a.tracker:
        words += ["--tracker", a.tracker, "--key", a.rpc_key or board.rpc_key]
    # kernels on every core the board file declares: TVM's default on x86_64 is half the logical CPUs
    # (docs/tvm-facts.md#cpu-thread-pool), and tuning would measure parallel candidates on too few cores
    env = {"TVM_NUM_THREADS": str(board.target.cores), **rpc.get("env", {})}
    return ["env", *[f"{k}={v}" for k, v in env.items()]] + words


def _start(dev, board, a, python: str) -> str:
    d = shlex.quote(dev.deploy_dir)
    running = _pid(dev)
    if running:
        return f"already running on {dev.t.where} (pid {running}); stop it with `edgepack rpc-server stop`"
    dev.must(f"mkdir -p {d} && cd {d} && rm -f rpc_server.log && "
             f"{{ setsid {shlex.join(_server_words(board, a, python))} > rpc_server.log 2>&1 < /dev/null & echo $! > rpc_server.pid; }}",
             "starting the RPC server")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        log = dev.sh(f"cat {d}/rpc_server.log")[1]
        if not _pid(dev):
            from ..errors import DeviceError, last_line

            last = last_line(log, "no output")[:200]
            raise DeviceError(f"the RPC server exited on {dev.t.where}: {last}; install apache-tvm there "
                              f"(pip install apache-tvm) or set [rpc] python in {board.path}")
        if re.search(r"bind to [\w.:-]+:\d+", log):
            return f"running on {dev.t.where} (pid {_pid(dev)}): " + log.strip().splitlines()[-1].split("INFO ")[-1]
        time.sleep(0.5)
    _stop(dev)
    from ..errors import DeviceError

    raise DeviceError(f"the RPC server did not start within {START_TIMEOUT_S} s on {dev.t.where}; see "
                      f"{dev.deploy_dir}/rpc_server.log there")


def _pid(dev) -> int | None:
    """The server's pid (= its process group) when it is running."""
    f = shlex.quote(f"{dev.deploy_dir}/rpc_server.pid")
    rc, out, _ = dev.sh(f"pid=$(cat {f} 2>/dev/null) && kill -0 \"$pid\" 2>/dev/null && echo \"$pid\"")
    return int(out) if rc == 0 and out.strip().isdigit() else None


def _stop(dev) -> str:
    pid = _pid(dev)
    if pid is None:
        dev.sh(["rm", "-f", f"{dev.deploy_dir}/rpc_server.pid"])
        return f"not running on {dev.t.where}"
    # the whole process group: the server and the workers it forked
    dev.sh(f"kill -TERM -- -{pid}; for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- -{pid} 2>/dev/null || break; sleep 0.5; done; "
           f"kill -KILL -- -{pid} 2>/dev/null; rm -f {shlex.quote(dev.deploy_dir + '/rpc_server.pid')}")
    return f"stopped on {dev.t.where} (pid {pid})"


def _cmd(a: argparse.Namespace) -> int:
    from ._connection import board_for, connection_from_args, ssh_device

    board = board_for(a, None)
    conn = connection_from_args(a, board)
    # a stand-in names its own emulated Python with TVM; a real board's is in its board file
    python = conn.extra.get("rpc_python") or board.section("rpc").get("python", "python3")
    dev = ssh_device(board, a, conn)
    try:
        msg = {"start": lambda: _start(dev, board, a, python), "stop": lambda: _stop(dev),
               "status": lambda: f"running on {dev.t.where} (pid {_pid(dev)})" if _pid(dev) else f"not running on {dev.t.where}"}[a.action]()
    finally:
        dev.close()
    print(f"RPC server {msg}")
    return 0


def register(sub) -> None:
    from ._connection import add_connection_args

    p = sub.add_parser("rpc-server", help="start or stop TVM's RPC server on a Linux board (for on-board tuning)")
    p.add_argument("action", nargs="?", choices=["start", "stop", "status"], default="start")
    add_connection_args(p, board_required=True)
    p.add_argument("--tracker", metavar="HOST:PORT", help="register with this RPC tracker (as the board's [rpc] key)")
    p.add_argument("--rpc-key", help="tracker key (default: the board file's [rpc] key)")
    p.add_argument("--rpc-port", type=argtypes.port,
                   help="port the server listens on (default: the board file's [rpc] port)")
    p.add_argument("--bind", help="address the server listens on (default: the board file's [rpc] bind)")
    p.set_defaults(fn=_cmd)
