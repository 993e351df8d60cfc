"""The tuner's on-device measurement layer against a real TVM RPC tracker and two real servers on loopback.

The tests share one farm (starting it costs ~20-30 s of TVM imports on 2 cores) and run in file order:
the later ones take servers away (killed mid-batch, crashed by a candidate, all killed).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid

import pytest

pytestmark = pytest.mark.e2e

tvm = pytest.importorskip("tvm")
from tvm import te  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

from edgepack.board import Timing, load_board  # noqa: E402
from edgepack.errors import EdgepackError, RPCUnavailableError  # noqa: E402
from edgepack.tune.export import export_kernel  # noqa: E402
from edgepack.tune.farm import LocalRPC, group_alive  # noqa: E402
from edgepack.tune.measure import MeasureInput  # noqa: E402
from edgepack.tune.rpc_measurer import RPCMeasurer  # noqa: E402
from edgepack.tune.tracker import tracker_summary  # noqa: E402

K = 256  # matmul K = N


def _matmul_symbolic_m():
    m = te.var("m", "int64")  # int64 symbolic dims (docs/tvm-facts.md#int64-dims)
    a = te.placeholder((m, K), name="A")
    b = te.placeholder((K, K), name="B")
    k = te.reduce_axis((0, K), "k")
    c = te.compute((m, K), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    return te.create_prim_func([a, b, c])


@T.prim_func
def axpy(a: T.handle, b: T.handle, n: T.int64):
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in range(n):
        B[i] = A[i] * T.float32(2) + B[i]


@T.prim_func
def does_not_build(A: T.Buffer((16,), "float32")):
    for i in range(1000):
        A[i * 10000000] = T.float32(1)  # index literal overflows int32: TVM refuses it


@T.prim_func
def crashes(A: T.Buffer((16,), "float32")):
    for i in range(2000):
        A[i * 1000000] = T.float32(1)  # writes far out of bounds: SIGSEGV in the server's session process


@T.prim_func
def runs_forever(A: T.Buffer((16,), "float32")):
    for i, j, k in T.grid(100000, 100000, 100):
        A[0] = A[0] * T.float32(0.99999) + T.float32(1)


@pytest.fixture(scope="module")
def board():
    # short runs: the figures are checked loosely, the machinery strictly
    return dataclasses.replace(load_board("host"), timing=Timing(warmup=2, number=1, repeat=5, min_repeat_ms=20))


@pytest.fixture(scope="module")
def farm():
    lr = LocalRPC(key=f"edgepack-test-{uuid.uuid4().hex[:8]}", servers=2)
    lr.start()
    started = list(lr.pids)
    yield lr
    lr.stop()
    assert not [pid for pid in started if _alive(pid)]


def _alive(pid: int) -> bool:
    """The group leader not reaped yet, or any member of its process group still running."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return group_alive(pid)


@pytest.fixture(scope="module")
def matmul_so(board, tmp_path_factory):
    return export_kernel(_matmul_symbolic_m(), board, tmp_path_factory.mktemp("kernels") / "matmul.so", name="mm")


def mm(so, m: int) -> MeasureInput:
    return MeasureInput(so, "mm", [((m, K), "float32"), ((K, K), "float32"), ((m, K), "float32")])


def test_measure_shapes_on_both_servers(farm, board, matmul_so):
    assert len(farm.registered()) == 2
    inputs = [mm(matmul_so, 4), mm(matmul_so, 64), mm(matmul_so, 256),
              MeasureInput(axpy, "axpy", [((4096,), "float32"), ((4096,), "float32"), 4096])]
    with RPCMeasurer.local(board, farm, wait_s=10) as meas:
        res = meas.measure_batch(inputs)
    assert [r.error for r in res] == [None] * 4
    for r in res:
        assert r.median_s > 0 and len(r.samples_s) == board.timing.repeat and min(r.samples_s) > 0
        assert min(r.samples_s) <= r.median_s <= max(r.samples_s)
    # 64x the work: only a loose ordering (the machine is shared and noisy)
    assert res[2].median_s > 4 * res[0].median_s
    # one session per server at a time: two candidates in flight land on the two servers
    assert {r.server for r in res} == set(farm.servers)
    for i in range(2):
        assert "load_module" in farm.server_log(i)
    print("figures (repeat=5, number>=1 raised to 20 ms/repeat):",
          [(r.median_s, min(r.samples_s), max(r.samples_s)) for r in res])


def test_servers_run_kernels_on_every_core_and_a_mismatch_is_reported(farm, board, matmul_so, caplog):
    # TVM's own default on x86_64 is half the logical CPUs (1 thread on a 2-core machine): the farm sets it
    caplog.set_level(logging.WARNING, logger="edgepack.tune.rpc_measurer")
    with RPCMeasurer.local(board, farm, wait_s=10) as meas:
        assert meas.measure_batch([mm(matmul_so, 4)])[0].ok
    assert list(meas.server_threads.values()) == [os.cpu_count()] and board.target.cores == os.cpu_count()
    assert "TVM_NUM_THREADS" not in caplog.text
    bigger = dataclasses.replace(board, target=dataclasses.replace(board.target, cores=board.target.cores + 1))
    with RPCMeasurer.local(bigger, farm, wait_s=10) as meas:
        assert meas.measure_batch([mm(matmul_so, 4)])[0].ok
    assert f"has {bigger.target.cores} cores" in caplog.text
    assert f"TVM_NUM_THREADS={bigger.target.cores}" in caplog.text


def test_failures_are_results_and_the_batch_goes_on(farm, board, matmul_so):
    inputs = [MeasureInput(does_not_build, "does_not_build", [((16,), "float32")]),
              mm(matmul_so, 8),
              MeasureInput(runs_forever, "runs_forever", [((16,), "float32")]),
              mm(matmul_so, 16),
              MeasureInput(matmul_so, "mm", [((5, K), "float32"), ((K, K), "float32"), ((6, K), "float32")]),
              MeasureInput(matmul_so, "no_such_function", [((16,), "float32")])]
    with RPCMeasurer.local(board, farm, timeout_s=2, wait_s=10) as meas:
        res = meas.measure_batch(inputs)
    assert res[0].error.startswith("building does_not_build for board 'host' failed") and res[0].median_s is None
    assert res[2].error.startswith("timed out after 2 s") and res[2].median_s is None
    assert "Mismatched matmul.shape[0]" in res[4].error  # asserts stay on in measurement builds
    assert res[5].error and "no_such_function" in res[5].error
    assert res[1].ok and res[3].ok and res[1].median_s > 0 and res[3].median_s > 0
    assert all("\n" not in r.error for r in res if r.error)
    # the servers survived all of it
    assert len(farm.registered()) == 2


def test_kill_one_server_mid_batch(farm, board, matmul_so):
    slow_board = dataclasses.replace(board, timing=Timing(warmup=2, number=1, repeat=5, min_repeat_ms=60))
    killed: list[str] = []

    def kill_when_next_candidate_loaded(idx: int, loads_before: int) -> None:
        deadline = time.monotonic() + 20
        while farm.server_log(idx).count("load_module") <= loads_before and time.monotonic() < deadline:
            time.sleep(0.01)
        farm.kill_server(idx)  # os.killpg(SIGKILL) on its process group, mid-run of its next candidate

    def on_result(i, r):
        if not killed and r.ok:
            killed.append(r.server)
            idx = farm.servers.index(r.server)
            threading.Thread(target=kill_when_next_candidate_loaded,
                             args=(idx, farm.server_log(idx).count("load_module"))).start()

    inputs = [mm(matmul_so, m) for m in (4, 8, 16, 32, 4, 8)]
    t0 = time.monotonic()
    with RPCMeasurer.local(slow_board, farm, wait_s=10) as meas:
        res = meas.measure_batch(inputs, on_result=on_result)
    elapsed = time.monotonic() - t0
    assert [r.error for r in res] == [None] * len(inputs)
    survivor = next(s for s in farm.servers if s != killed[0])
    retried = [r for r in res if r.attempts > 1]
    assert retried and all(r.server == survivor for r in retried)  # the candidate in flight moved over
    assert {r.server for r in res} == set(farm.servers)
    host, port = survivor.rsplit(":", 1)
    assert farm.registered() == [(host, int(port))]
    assert elapsed < 30


def test_crashing_candidate(farm, board, matmul_so):
    inputs = [mm(matmul_so, 4), mm(matmul_so, 8), MeasureInput(crashes, "crashes", [((16,), "float32")])]
    with RPCMeasurer.local(board, farm, wait_s=10) as meas:
        res = meas.measure_batch(inputs)
    assert res[0].ok and res[1].ok
    assert res[2].error.startswith(f"crashed the RPC session on {res[2].server}")
    # TVM 0.27: the crashed server's process lives on but has left the tracker
    assert all(f"127.0.0.1:{port}" != res[2].server for _, port in farm.registered())


def test_all_servers_gone(farm, board, matmul_so, caplog):
    for i in range(len(farm.servers)):
        farm.kill_server(i)
    caplog.set_level(logging.WARNING, logger="edgepack.tune.rpc_measurer")
    t0 = time.monotonic()
    with RPCMeasurer.local(board, farm, wait_s=3) as meas, pytest.raises(RPCUnavailableError) as err:
        meas.measure_batch([mm(matmul_so, 4), mm(matmul_so, 8)])
    elapsed = time.monotonic() - t0
    assert 3 <= elapsed < 10
    msg = str(err.value)
    assert isinstance(err.value, EdgepackError) and "\n" not in msg
    assert f"key '{farm.key}'" in msg and f"127.0.0.1:{farm.tracker_port}" in msg and "rpc_server" in msg
    assert err.value.results == [None, None]
    assert f"waiting for an RPC server with key '{farm.key}' on tracker 127.0.0.1:{farm.tracker_port}" in caplog.text


def test_stop_leaves_no_process(farm):
    pids = farm.pids
    port = farm.tracker_port
    assert len(pids) == 3  # tracker + 2 servers (process group leaders)
    farm.stop()
    assert not [pid for pid in pids if _alive(pid)]
    with pytest.raises(OSError):
        tracker_summary("127.0.0.1", port, timeout=1)
    farm.stop()  # twice is fine
