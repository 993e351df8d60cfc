"""Arm Linux boards without a board: board files, cross-compiled packages (`file` says the board's
architecture; a 32-bit armhf package also runs under qemu-arm), and errors reported before any connection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import have, run_cli

from edgepack.board import Connection, load_board, load_board_file
from edgepack.deploy.device import open_device
from edgepack.errors import BoardError
from edgepack.examples import EXAMPLES

pytestmark = pytest.mark.e2e

LINUX_BOARDS = ["rpi4", "rpi5", "rpi3-armv7", "generic-aarch64", "qemu-aarch64"]


@pytest.mark.parametrize("name", LINUX_BOARDS)
def test_linux_board_files(name):
    b = load_board(name)
    assert b.transport["kind"] == "ssh" and b.section("deploy")["dir"] and b.rpc_key == name
    t = b.tvm_target()
    assert t.kind.name == "llvm" and str(t.attrs["mtriple"]) == b.target.triple and "+neon" in list(t.attrs["mattr"])
    assert b.toolchain.cc.startswith(("aarch64-linux-gnu", "arm-linux-gnueabihf")) and "-static" in b.toolchain.ldflags


def _file(path: Path) -> str:
    return subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def mlp_aarch64(tmp_path_factory):
    from edgepack.pipeline import build_package

    ex = EXAMPLES["mlp"]
    return build_package(ex.path, "qemu-aarch64", dict(ex.dims), tmp_path_factory.mktemp("x") / "mlp").bundle


def test_cross_build_is_aarch64(mlp_aarch64):
    prog = mlp_aarch64.path / "ep"
    assert "ARM aarch64" in _file(prog) and "statically linked" in _file(prog)
    assert "ARM aarch64" in _file(mlp_aarch64.path / "kernels" / "kernels.o")
    m = mlp_aarch64.manifest
    assert m["board"] == {"name": "qemu-aarch64", "triple": "aarch64-linux-gnu", "cpu": "cortex-a72", "cores": 2}
    # the kernels use NEON: vector fused multiply-adds on 4 floats
    dis = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(mlp_aarch64.path / "kernels" / "kernels.o")],
                         capture_output=True, text=True).stdout
    assert "fmla\tv" in dis


def test_build_cli_for_remote_board(tmp_path):
    """`edgepack build --board qemu-aarch64` (the bundled encoder) builds, and says it is checked on the board."""
    r = run_cli("build", "--board", "qemu-aarch64", "-o", str(tmp_path / "enc"))
    assert r.returncode == 0, r.stderr
    assert "not checked here (board qemu-aarch64 is remote)" in r.stdout
    assert "ARM aarch64" in _file(tmp_path / "enc" / "ep")


@pytest.mark.skipif(not have("qemu-arm") or not Path("/usr/arm-linux-gnueabihf/include/stdio.h").exists(),
                    reason="needs qemu-user and the armhf C library headers (apt-get install libc6-dev-armhf-cross)")
def test_cross_build_armv7_runs_under_qemu_arm(tmp_path):
    import onnxruntime as ort

    from edgepack.check import max_rel_error
    from edgepack.pipeline import build_package

    ex = EXAMPLES["mlp"]
    bundle = build_package(ex.path, "rpi3-armv7", {"batch": (1, 16)}, tmp_path / "mlp").bundle
    assert "ARM, EABI5" in _file(bundle.path / "ep")
    x = np.random.default_rng(1).standard_normal((5, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "o").mkdir()
    subprocess.run(["qemu-arm", str(bundle.path / "ep"), "run", str(tmp_path / "o"), str(tmp_path / "x.npy")], check=True)
    ref = ort.InferenceSession(str(ex.path)).run(None, {"x": x})[0]
    assert max_rel_error(np.load(tmp_path / "o" / "0_logits.npy"), ref) < 1e-4


def test_malformed_ssh_board_sections(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('deploy = "~/x"\n' + load_board("rpi4").path.read_text().replace("[deploy]", "[old_deploy]"))
    with pytest.raises(BoardError, match=f"board file {p}: 'deploy' must be a table"):
        open_device(load_board_file(p), Connection(host="127.0.0.1"))
    p.write_text(load_board("rpi4").path.read_text().replace('kind = "ssh"', 'kind = "carrier-pigeon"'))
    with pytest.raises(BoardError, match="kind 'carrier-pigeon' is not one of local, ssh, serial; fix the board file"):
        open_device(load_board_file(p), Connection(host="127.0.0.1"))


def test_ssh_board_without_address():
    from edgepack.errors import DeviceError

    with pytest.raises(DeviceError, match="pass --host .*standin up qemu-aarch64"):
        open_device(load_board("qemu-aarch64"), Connection())  # no stand-in given, no host
    with pytest.raises(DeviceError, match="SSH key file '/no/such/key' does not exist; pass --key"):
        open_device(load_board("rpi4"), Connection(host="127.0.0.1", key="/no/such/key"))


def test_flash_refuses_package_for_another_board(build_cache, tmp_path):
    """Refused before connecting: the address below is never contacted."""
    ex = EXAMPLES["mlp"]
    bundle = build_cache(ex.path, dict(ex.dims), "mlp")
    r = run_cli("flash", str(bundle.path), "--board", "rpi4", "--host", "192.0.2.1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "was built for board 'host', not 'rpi4'; rebuild it with `edgepack build ... --board rpi4`" in r.stderr
