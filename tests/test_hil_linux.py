"""Hardware in the loop, Arm Linux boards over SSH: build, flash, run (vs onnxruntime on the host), bench,
rollback, and the faults. Against the qemu-aarch64 stand-in by default (started here, stopped at the end), or
a real board: `pytest -m hil --board rpi4 --board-host H [--board-user U --board-key K --board-port P]`."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from edgepack.board import Board, Connection, load_board
from edgepack.check import max_rel_error, random_inputs
from edgepack.codegen.bundle import Bundle
from edgepack.deploy.device import BenchSettings, open_device
from edgepack.errors import DeviceError
from edgepack.errors import BoardError, RunError
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.hil
TOL = 1e-4
LOG = {}  # figures for the report, printed at the end of the module


@dataclass
class Hil:
    board: Board
    conn: Connection
    cli: list[str]  # connection flags for the CLI
    env: dict  # environment for CLI subprocesses (where the stand-in's connection is saved)
    standin: bool
    rpc_skip: str = ""  # why the RPC path cannot be tested here, if it cannot

    def device(self, **kw):
        from edgepack.deploy import ssh

        return ssh.open_device(self.board, self.conn, **kw)

    def edgepack(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "edgepack.cli", *args], capture_output=True, text=True,
                              env=self.env, cwd=ROOT, timeout=timeout)


def _real_board(config, name: str) -> Hil:
    board = load_board(name)
    host = config.getoption("--board-host")
    if not host:
        pytest.skip(f"--board {name} needs --board-host (and --board-user/--board-key)")
    conn = Connection(host=host, port=config.getoption("--board-port"), user=config.getoption("--board-user"),
                      key=config.getoption("--board-key"))
    cli = ["--board", name, "--host", host, "--port", str(conn.port)]
    cli += ["--user", conn.user] if conn.user else []
    cli += ["--key", conn.key] if conn.key else []
    return Hil(board, conn, cli, dict(os.environ), standin=False)


def _arm64_tvm() -> str:
    """Build (once, cached) the stand-in's arm64 Python + TVM; '' when it is there, else why not."""
    from edgepack.standin import qemu_linux

    try:
        t0 = time.perf_counter()
        qemu_linux.build_rootfs()
        LOG["arm64 TVM env ready (s)"] = round(time.perf_counter() - t0, 1)
        return ""
    except BoardError as e:
        return f"the stand-in's arm64 TVM environment could not be built: {e}"


@pytest.fixture(scope="module")
def hil(request, tmp_path_factory):
    names = [n for n in request.config.getoption("--board") if load_board(n).transport_kind == "ssh"]
    if request.config.getoption("--board") and not names:
        pytest.skip("no Linux (SSH) board among --board")
    if names:
        yield _real_board(request.config, names[0])
        return
    from edgepack.standin import qemu_linux

    board = load_board("qemu-aarch64")
    root = tmp_path_factory.mktemp("standins")
    state = root / board.name
    rpc_skip = _arm64_tvm()
    try:
        t0 = time.perf_counter()
        conn = qemu_linux.up(board, state)
        LOG["standin up (s)"] = round(time.perf_counter() - t0, 2)
    except BoardError as e:
        qemu_linux.down(board, state)
        pytest.skip(f"the qemu-aarch64 stand-in cannot start here: {e}")
    (state / "connection.json").write_text(json.dumps(dataclasses.asdict(conn)))  # what `standin up` saves
    try:
        yield Hil(board, conn, ["--board", board.name], dict(os.environ, EDGEPACK_STATE_DIR=str(root)), standin=True,
                  rpc_skip=rpc_skip)
    finally:
        qemu_linux.down(board, state)
        assert not qemu_linux.alive(board, state)
        print("\nstand-in figures:", json.dumps(LOG))


@pytest.fixture(scope="module")
def encoder(hil, tmp_path_factory) -> Bundle:
    """The bundled encoder (seq 1..256), built for the board by the CLI."""
    out = tmp_path_factory.mktemp("hil") / "encoder"
    r = hil.edgepack("build", "--board", hil.board.name, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return Bundle.open(out)


@pytest.fixture(scope="module")
def mlp_versions(hil, tmp_path_factory) -> tuple[Bundle, Bundle]:
    """Two versions of one package ('mlp'), differing in their batch range."""
    from edgepack.pipeline import build_package

    d = tmp_path_factory.mktemp("hil")
    ex = EXAMPLES["mlp"]
    return tuple(build_package(ex.path, hil.board, {"batch": (1, hi)}, d / f"mlp{hi}", name="mlp").bundle
                 for hi in (64, 32))


def _onnxruntime(model: Path, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})


def encoder_model() -> Path:
    return EXAMPLES["encoder"].path


def _current(hil: Hil, package: str) -> dict:
    dev = hil.device()
    try:
        return dev.installed(package)
    finally:
        dev.close()


# --- the happy path ---------------------------------------------------------------------------------------------

def test_flash_run_matches_onnxruntime(hil, encoder, tmp_path):
    t0 = time.perf_counter()
    r = hil.edgepack("flash", str(encoder.path), *hil.cli)
    LOG["flash encoder, CLI (s)"] = round(time.perf_counter() - t0, 2)
    assert r.returncode == 0, r.stderr
    assert "sha256 verified on the board" in r.stdout and "encoder/current" in r.stdout
    dev = hil.device()
    try:
        errs = {}
        for seq in (1, 7, 64, 256):
            arrays = random_inputs(encoder.manifest, {"seq": seq}, seed=seq)
            t0 = time.perf_counter()
            outs = dev.run(encoder, arrays, tmp_path / f"out{seq}")
            LOG[f"run seq={seq} (s)"] = round(time.perf_counter() - t0, 2)
            errs[seq] = max_rel_error(np.load(outs[0]), _onnxruntime(encoder_model(), arrays)[0])
        LOG["max rel error vs onnxruntime"] = {k: float(f"{v:.2e}") for k, v in errs.items()}
        assert all(e < TOL for e in errs.values()), errs
    finally:
        dev.close()


def test_run_cli_on_board(hil, encoder, tmp_path):
    x = np.random.default_rng(5).standard_normal((1, 13, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = hil.edgepack("run", str(encoder.path), *hil.cli, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "o" / "0_y.npy")
    assert max_rel_error(np.load(tmp_path / "o" / "0_y.npy"), _onnxruntime(encoder_model(), [x])[0]) < TOL
    r = hil.edgepack("run", str(encoder.path), *hil.cli, "--input", str(tmp_path / "x.npy"), "--input",
                     str(tmp_path / "x.npy"), "-o", str(tmp_path / "o2"))  # refused before anything is sent
    assert r.returncode == 2 and "takes 1 input(s) (x), got 2" in r.stderr


def test_bench(hil, encoder):
    dev = hil.device()
    try:
        for seq in (1, 32):
            t0 = time.perf_counter()
            res = dev.bench(encoder, {"seq": seq}, BenchSettings(warmup=1, repeat=5))
            LOG[f"bench seq={seq}, 1+5 runs (s)"] = round(time.perf_counter() - t0, 2)
            LOG[f"bench seq={seq} median (us, emulated)"] = round(float(np.median(res.samples_ns)) / 1e3, 1)
            assert res.dims == {"seq": seq} and len(res.samples_ns) == 5 and min(res.samples_ns) > 0
            assert res.threads == hil.board.target.cores
        with pytest.raises(Exception, match="dim seq = 300 is outside the package's range 1..256"):
            dev.bench(encoder, {"seq": 300}, BenchSettings())
        prof = dev.bench(encoder, {"seq": 16}, BenchSettings(warmup=1, repeat=2, profile=True))  # on the board
        plan_calls = [c["kernel"] for c in json.loads((encoder.path / "plan.json").read_text())["calls"]]
        assert [c["name"] for c in prof.calls] == plan_calls and all(c["ns"] > 0 for c in prof.calls)
    finally:
        dev.close()


def test_board_gets_the_program_and_manifest_only(hil, encoder):
    """What goes to the board holds the weights once: the device program and the manifest, nothing else."""
    dev = hil.device()
    try:
        release = dev.install(encoder)
        listed = sorted(dev.must(["sh", "-c", f"cd {shlex.quote(release)} && find . -type f"], "find").split())
        assert listed == ["./ep", "./manifest.json"]
    finally:
        dev.close()


def test_flash_proves_outputs_and_refuses_wrong_ones(hil, mlp_versions, tmp_path):
    """flash runs the package's test cases on the board; when one differs it says so, exits 2 and makes the
    previous version current again."""
    import shutil

    from test_verify import tamper_expected_output

    v1, v2 = mlp_versions
    r = hil.edgepack("flash", str(v1.path), *hil.cli)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ok  ") == 3, r.stdout
    before = _current(hil, "mlp")
    bad = tmp_path / "mlp"
    shutil.copytree(v2.path, bad)
    tamper_expected_output(bad)
    r = hil.edgepack("flash", str(bad), *hil.cli)
    _one_line_exit_2(r, "differ from onnxruntime's")
    assert "rolled back" in r.stderr and "DIFF" in r.stdout
    assert _current(hil, "mlp")["current"] == before["current"]
    r = hil.edgepack("verify", str(v1.path), *hil.cli)
    assert r.returncode == 0 and r.stdout.count("ok  ") == 3, r.stdout + r.stderr


def test_flash_rollback(hil, mlp_versions):
    v1, v2 = mlp_versions
    for b in (v1, v2):
        r = hil.edgepack("flash", str(b.path), *hil.cli)
        assert r.returncode == 0, r.stderr
    state = _current(hil, "mlp")
    assert state["current"] != state["previous"] and state["previous"] is not None
    assert "--rollback" in r.stdout  # tells how to undo
    r = hil.edgepack("flash", str(v2.path), *hil.cli, "--rollback")
    assert r.returncode == 0, r.stderr
    assert _current(hil, "mlp") == {"current": state["previous"], "previous": state["current"]}
    r = hil.edgepack("flash", "mlp", *hil.cli, "--rollback")  # by package name; back again
    assert r.returncode == 0, r.stderr
    assert _current(hil, "mlp") == state


# --- faults -------------------------------------------------------------------------------------------------------

def _one_line_exit_2(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_unreachable_host(hil, encoder):
    from edgepack.net import free_port

    port = free_port()  # nothing listens there
    r = hil.edgepack("flash", str(encoder.path), "--board", hil.board.name, "--host", "127.0.0.1", "--port", str(port))
    _one_line_exit_2(r, f"cannot reach 127.0.0.1:{port}")
    assert "check the board is on the network and --host/--port" in r.stderr


def test_wrong_key(hil, tmp_path):
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(DeviceError, match=r"refused the key .*other_key; pass --key with a key in the board's"):
        open_device(hil.board, dataclasses.replace(hil.conn, key=str(key)))


def test_unknown_host_key_refused_then_accepted(hil, tmp_path):
    known = tmp_path / "known_hosts"
    conn = dataclasses.replace(hil.conn, extra=dict(hil.conn.extra, known_hosts=str(known)))
    with pytest.raises(DeviceError, match=r"host key of .* is not in .*known_hosts; .*pass --accept-new-host-key"):
        open_device(hil.board, conn)
    assert not known.exists()
    open_device(hil.board, dataclasses.replace(conn, accept_new_host_key=True)).close()
    assert known.read_text().count("\n") == 1
    open_device(hil.board, conn).close()  # now known: accepted without the flag
    # a changed key (a reinstalled board, or someone in between) is refused even with the flag
    host, kind, _ = known.read_text().split()
    known.write_text(f"{host} {kind} AAAAC3NzaC1lZDI1NTE5AAAAIGx0cHCTbj8cj9ivE7LtTHDfsvOW0CfG7mS3GNxr8YaV\n")
    with pytest.raises(DeviceError, match="does not match .*ssh-keygen -f .* -R"):
        open_device(hil.board, dataclasses.replace(conn, accept_new_host_key=True))


def test_package_for_another_board_refused(hil, build_cache):
    ex = EXAMPLES["mlp"]
    host_bundle = build_cache(ex.path, dict(ex.dims), "mlp")
    before = _current(hil, "mlp")
    r = hil.edgepack("flash", str(host_bundle.path), *hil.cli)
    _one_line_exit_2(r, f"was built for board 'host', not '{hil.board.name}'")
    assert _current(hil, "mlp") == before


def test_dropped_connection_mid_upload(hil, mlp_versions, tmp_path):
    v1, v2 = mlp_versions
    dev = hil.device()
    dev.must(["rm", "-rf", f"{dev.deploy_dir}/mlp"], "removing earlier versions")  # v2 must really be uploaded
    dev.install(v1)
    old = dev.installed("mlp")["current"]
    dev.close()

    def drop_after_1(rel, done, total):
        if done == 1:  # the network goes away: the socket is shut under paramiko's feet
            import socket

            dev.client.get_transport().sock.shutdown(socket.SHUT_RDWR)

    dev = hil.device(progress=drop_after_1)
    with pytest.raises(DeviceError, match="dropped during upload.*installed version is unchanged; flash again to resume"):
        dev.install(v2)
    dev.close()

    dev = hil.device()
    try:
        assert dev.installed("mlp")["current"] == old  # the old version is still the current one, and works
        x = random_inputs(v1.manifest, {"batch": 3})
        assert max_rel_error(np.load(dev.run(v1, x, tmp_path / "o")[0]), _onnxruntime(EXAMPLES["mlp"].path, x)[0]) < TOL
        dev.install(v2)  # resumes: the file sent before the drop (the program) is not sent again
        rep = dev.last_flash
        assert rep.reused == 1 and rep.uploaded == len(v2.manifest["device_files"]) + 1 - 1
        assert dev.installed("mlp") == {"current": f"releases/{rep.version}", "previous": old}
    finally:
        dev.close()


def test_full_disk(hil, encoder, tmp_path):
    """The upload does not fit: refused, nothing half-installed, the installed version intact and working."""
    if not hil.standin:
        pytest.skip("fills the device's disk: only on the stand-in (its disk is a tmpfs), not on a real board")
    from edgepack.pipeline import build_package

    ex = EXAMPLES["mlp"]
    new = build_package(ex.path, hil.board, {"batch": (1, 48)}, tmp_path / "mlp48", name="mlp48").bundle
    dev = hil.device()
    filler = f"{dev.deploy_dir}/filler"
    try:
        dev.install(encoder)
        before = dev.installed("encoder")
        free_kb = int(dev.must(["df", "-Pk", dev.deploy_dir], "df").splitlines()[-1].split()[3])
        dev.must(["fallocate", "-l", f"{max(free_kb - 300, 1)}k", filler], "filling the disk")
        with pytest.raises(DeviceError, match=r"not enough space on .* KB free in .*free space on the board and flash again"):
            dev.install(new)
        assert dev.sh(["test", "-e", f"{dev.deploy_dir}/mlp48"])[0] != 0  # nothing created
        assert dev.installed("encoder") == before
        # the disk fills up during the upload (the check before it passed): the write fails on the board
        dev._check_space = lambda root, need: None
        with pytest.raises(DeviceError, match=r"not enough space on .* KB free in .*free space on the board and flash again"):
            dev.install(new)
        assert dev.must(["find", f"{dev.deploy_dir}/mlp48", "-type", "f"], "find") == ""  # partial upload removed
        assert dev.installed("encoder") == before
        dev.must(["rm", "-f", filler], "removing the filler")
        x = random_inputs(encoder.manifest, {"seq": 3})
        assert max_rel_error(np.load(dev.run(encoder, x, tmp_path / "o")[0]), _onnxruntime(encoder_model(), x)[0]) < TOL
    finally:
        dev.sh(["rm", "-f", filler])
        dev.close()


def test_killed_bench(hil, mlp_versions):
    v1, _ = mlp_versions
    dev, killer = hil.device(), hil.device()
    release = dev._ensure(v1)
    errors: list[Exception] = []

    def long_bench():
        try:
            dev.bench(v1, {"batch": 64}, BenchSettings(warmup=0, repeat=100000, min_time_ms=600000))
        except Exception as e:  # noqa: BLE001 (checked below)
            errors.append(e)

    t = threading.Thread(target=long_bench)
    t.start()
    try:
        pids = ""
        for _ in range(100):  # until the bench process is there
            pids = killer.sh(["pgrep", "-f", "--", f"{release}/ep bench "])[1].split()
            if pids:
                break
            time.sleep(0.1)
        assert pids, "the bench program did not start"
        killer.must(["kill", "-KILL", *pids], "killing the bench")
        t.join(60)
    finally:
        killer.close()
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RunError)
    assert "the bench program was killed" in str(errors[0]) and "run the bench again" in str(errors[0])
    dev.bench(v1, {"batch": 2}, BenchSettings(warmup=0, repeat=2))  # the device is usable afterwards
    dev.close()


@pytest.fixture
def tracker(hil):
    """A TVM RPC tracker (the tuning host's side; on loopback for the stand-in), stopped by process group."""
    import signal

    from edgepack.net import free_port

    port = free_port()
    bind = "127.0.0.1" if hil.standin else "0.0.0.0"  # a real board connects to it from the network
    p = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", bind, "--port", str(port),
                          "--port-end", str(port + 1)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    yield port
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def test_rpc_path_measured_on_board(hil, tracker, tmp_path):
    """`edgepack rpc-server start --tracker` on the board, then the tuner's Measurer times a kernel built for
    the board through the tracker (on the stand-in: the aarch64 TVM wheel under emulation; a kernel linked
    with aarch64-linux-gnu-gcc loads there, so the server really is aarch64); a server that is gone gives
    a one-line error."""
    if hil.rpc_skip:
        pytest.skip(hil.rpc_skip)
    from tvm import te

    from edgepack.net import free_port
    from edgepack.errors import RPCUnavailableError
    from edgepack.tune.measure import MeasureInput
    from edgepack.tune.rpc_measurer import RPCMeasurer

    port = free_port() if hil.standin else int(hil.board.section("rpc").get("port", 9090))
    dev = hil.device()
    me = dev.client.get_transport().sock.getsockname()[0]  # this machine's address as the board sees it
    dev.close()
    t0 = time.perf_counter()
    r = hil.edgepack("rpc-server", "start", *hil.cli, "--rpc-port", str(port), "--tracker", f"{me}:{tracker}",
                     timeout=240)
    LOG["rpc-server start (s)"] = round(time.perf_counter() - t0, 1)
    assert r.returncode == 0, r.stderr
    n = 64
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mm = MeasureInput(te.create_prim_func([a, b, c]), "mm", [((n, n), "float32")] * 3)
    try:
        assert f"bind to 127.0.0.1:{port}" in r.stdout or not hil.standin
        with RPCMeasurer(hil.board, tracker=("127.0.0.1", tracker), wait_s=60) as m:
            t0 = time.perf_counter()
            res = m.measure(mm)
            LOG["rpc measure 64^3 matmul (s)"] = round(time.perf_counter() - t0, 2)
        assert res.ok, res.error
        LOG["rpc 64^3 matmul median (us, emulated aarch64)"] = round(res.median_s * 1e6, 1)
        assert res.median_s > 0 and len(res.samples_s) == hil.board.timing.repeat
        # `edgepack tune` through the board's server: every trial measured on the (emulated) board
        mlp, db = EXAMPLES["mlp"], tmp_path / "tuning.db"
        t0 = time.perf_counter()
        r = hil.edgepack("tune", str(mlp.path), "--board", hil.board.name, "--dim", "batch=1:64", "--trials", "4",
                         "--samples", "2", "--max-kernels", "1", "--batch", "4", "--tracker", f"127.0.0.1:{tracker}",
                         "--db", str(db), "--no-progress", timeout=900)
        LOG["rpc tune mlp, 4 trials (s)"] = round(time.perf_counter() - t0, 1)
        assert r.returncode == 0 and "(0 failed)" in r.stdout, r.stderr
        built = hil.edgepack("build", str(mlp.path), "--board", hil.board.name, "--dim", "batch=1:64", "--db", str(db),
                             "-o", str(tmp_path / "tuned"), timeout=300)
        assert built.returncode == 0 and "tuned kernels: fused" in built.stdout, built.stderr
    finally:
        r = hil.edgepack("rpc-server", "stop", *hil.cli)
    assert r.returncode == 0 and "stopped" in r.stdout, r.stderr
    assert "not running" in hil.edgepack("rpc-server", "status", *hil.cli).stdout
    with RPCMeasurer(hil.board, tracker=("127.0.0.1", tracker), wait_s=2) as m:  # the board's server is gone
        with pytest.raises(RPCUnavailableError) as e:
            m.measure(mm)
    assert len(str(e.value).splitlines()) == 1


def test_standin_cli_leaves_nothing_behind(hil, tmp_path):
    """`edgepack standin up|status|down`: up prints the connection, down stops every process of it; the
    namespace's mounts and binfmt registration were never visible outside."""
    if not hil.standin:
        pytest.skip("about the stand-in itself")
    env = dict(hil.env, EDGEPACK_STATE_DIR=str(tmp_path))
    cli = lambda *a: subprocess.run([sys.executable, "-m", "edgepack.cli", "standin", *a, "qemu-aarch64"],  # noqa: E731
                                    capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    r = cli("up")
    assert r.returncode == 0 and "host=127.0.0.1, port=" in r.stdout and "key=" in r.stdout, r.stderr
    pid = int((tmp_path / "qemu-aarch64" / "standin.pid").read_text())
    assert "up, host=127.0.0.1" in cli("status").stdout
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()  # the device's tmpfs is private
    assert cli("down").returncode == 0 and "down" in cli("status").stdout
    assert not Path(f"/proc/{pid}").exists()
