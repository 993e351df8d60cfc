"""The stand-in Linux board: a real sshd on a free loopback port whose sessions run aarch64 programs.

How it is isolated (nothing global is touched, everything lives in the state directory):
  - sshd runs inside its own user + mount namespace (uids mapped 1:1, so sshd's privilege separation works).
  - Inside it, a *private* binfmt_misc instance (kernel >= 6.7) registers qemu-aarch64 for aarch64 ELF files,
    so `./run` on the "device" executes transparently, exactly as on a Pi: flash, run and bench go through the
    same code paths as for a real board. The machine's global binfmt registrations are untouched.
  - /run is a private tmpfs (sshd needs /run/sshd) and the device's disk is a tmpfs mounted on state/device
    (`[standin] disk_mb`, 1 GB by default: real models fit, and only what is written uses memory), so a full
    disk is easy to make. Both vanish with the namespace.
  - Own host key, client key, authorized_keys and known_hosts in the state directory.
Stopping kills every process in the stand-in's user namespace (sshd and anything its sessions started), by pid.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..board import Board, Connection
from ..errors import BoardError
from ..net import free_port

SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 15

# Runs as the namespace's first process: unshare, wait for the parent to write the uid/gid maps, then set up
# mounts and binfmt and exec sshd. (Python 3.11 has no os.unshare; the maps can only be written from outside.)
_NS_CHILD = r"""
import ctypes, json, os, subprocess, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
    sys.exit("stand-in: unshare failed: " + os.strerror(ctypes.get_errno()))
os.write(1, b"u")
if os.read(0, 1) != b"g":
    sys.exit("stand-in: parent did not map uids")
def sh(*a):
    subprocess.run(a, check=True)
sh("mount", "--make-rprivate", "/")
sh("mount", "-t", "tmpfs", "-o", "mode=755,size=4m", "tmpfs", "/run")
os.mkdir("/run/sshd", 0o755)
sh("mount", "-t", "tmpfs", "-o", "mode=755,size=%dm" % cfg["disk_mb"], "tmpfs", cfg["device"])
sh("mount", "-t", "binfmt_misc", "binfmt_misc", cfg["binfmt"])
with open(os.path.join(cfg["binfmt"], "register"), "wb") as f:
    f.write(bytes.fromhex(cfg["register"]))
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0); os.dup2(devnull, 1)
os.execv(cfg["sshd"], [cfg["sshd"], "-D", "-e", "-f", cfg["config"]])
"""


@dataclass(frozen=True)
class Layout:
    """Files of one stand-in inside its state directory."""

    state: Path

    host_key = property(lambda self: self.state / "ssh_host_ed25519_key")
    client_key = property(lambda self: self.state / "id_ed25519")
    authorized = property(lambda self: self.state / "authorized_keys")
    config = property(lambda self: self.state / "sshd_config")
    known_hosts = property(lambda self: self.state / "known_hosts")
    log = property(lambda self: self.state / "sshd.log")
    pid = property(lambda self: self.state / "standin.pid")
    device = property(lambda self: self.state / "device")  # the device's disk (a tmpfs inside the namespace)
    binfmt = property(lambda self: self.state / "binfmt_misc")


def binfmt_rule(machine: int, interpreter: str) -> bytes:
    """A binfmt_misc registration for 64-bit little-endian ELF executables of `machine` (flag F: the
    interpreter is opened now, so it runs in any mount namespace)."""
    magic = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x02\x00" + machine.to_bytes(2, "little")
    mask = b"\xff" * 7 + b"\x00" + b"\xff" * 8 + b"\xfe\xff\xff\xff"
    esc = lambda b: "".join(f"\\x{c:02x}" for c in b)  # noqa: E731
    return f":edgepack-{machine}:M::{esc(magic)}:{esc(mask)}:{interpreter}:F".encode()


def _check_host(board: Board, qemu: str | None) -> None:
    if os.geteuid() != 0:
        raise BoardError(f"the {board.name} stand-in needs root (sshd privilege separation and a private "
                         "binfmt_misc in a user namespace); run it as root or use a real board with --host")
    for tool, pkg in ((SSHD, "openssh-server"), (qemu, "qemu-user"), ("ssh-keygen", "openssh-client")):
        if not tool or not shutil.which(tool):
            raise BoardError(f"the {board.name} stand-in needs {tool or 'qemu'}; install it: apt-get install {pkg}")
    if tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit()) < (6, 7):
        raise BoardError(f"the {board.name} stand-in needs Linux >= 6.7 (a private binfmt_misc per user namespace); "
                         f"this kernel is {os.uname().release}")


def _keys(lay: Layout) -> None:
    for key in (lay.host_key, lay.client_key):
        key.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgepack-standin", "-f", str(key)],
                       check=True, capture_output=True)
    shutil.copy(f"{lay.client_key}.pub", lay.authorized)


def _sshd_config(lay: Layout, port: int) -> str:
    return "\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {lay.host_key}", f"PidFile {lay.state / 'sshd.pid'}",
        f"AuthorizedKeysFile {lay.authorized}", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
        "PrintMotd no", "Subsystem sftp internal-sftp", "MaxStartups 20", "MaxSessions 20", "",
    ])


def _spawn(board: Board, lay: Layout, qemu: str) -> subprocess.Popen:
    sc = board.section("standin")
    cfg = {"disk_mb": int(sc.get("disk_mb", 1024)), "device": str(lay.device), "binfmt": str(lay.binfmt),
           "register": binfmt_rule(int(sc.get("elf_machine", 183)), qemu).hex(), "sshd": SSHD,
           "config": str(lay.config)}
    log = open(lay.log, "wb")
    p = subprocess.Popen([sys.executable, "-c", _NS_CHILD, json.dumps(cfg)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    log.close()
    if p.stdout.read(1) != b"u":
        p.wait(5)
        raise BoardError(f"the {board.name} stand-in could not create a user namespace: {_log_tail(lay)}")
    for f in ("uid_map", "gid_map"):  # identity map of every id: sshd drops to its 'sshd' user as usual
        Path(f"/proc/{p.pid}/{f}").write_text("0 0 4294967295\n")
    p.stdin.write(b"g")
    p.stdin.close()
    p.stdout.close()
    return p


def _wait_listening(p: subprocess.Popen, port: int, lay: Layout, board: Board) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise BoardError(f"the {board.name} stand-in's sshd exited ({p.returncode}): {_log_tail(lay)}")
        if "Server listening" in lay.log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise BoardError(f"the {board.name} stand-in's sshd did not start within {START_TIMEOUT_S} s: {_log_tail(lay)}")


def _log_tail(lay: Layout) -> str:
    try:
        lines = [ln for ln in lay.log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return (lines[-1] if lines else "no output")[:300]


def _known_hosts_line(lay: Layout, port: int) -> str:
    kind, blob = Path(f"{lay.host_key}.pub").read_text().split()[:2]
    return f"[127.0.0.1]:{port} {kind} {blob}\n"


# --- the arm64 Python + TVM environment for the RPC path ---------------------------------------------------
# Debian's arm64 python3 (debootstrap's first stage downloads it and its dependencies; the packages are
# unpacked on the host, no emulated second stage) plus the aarch64 wheels of apache-tvm and numpy 2
# (docs/tvm-facts.md#aarch64-rpc-server-under-qemu-user) installed on the host with `pip --target --platform`.
# Programs in it run through the stand-in's binfmt with QEMU_LD_PREFIX pointing at it (a chroot would need a
# static qemu). Built once, cached.

TVM_WHEELS = ["apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1", "numpy>=2", "cloudpickle", "psutil",
              "tornado"]
PLATFORMS = ["manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64",
             "linux_aarch64"]


def rootfs_dir() -> Path:
    cache = Path(os.environ.get("EDGEPACK_CACHE_DIR", Path.home() / ".cache" / "edgepack"))
    return cache / "rootfs" / "arm64-py311-tvm-0.27.0.post1"


def _run(cmd: list[str], what: str, **kw) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        last = ([ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()] or ["no output"])[-1][:200]
        raise BoardError(f"building the arm64 TVM environment failed while {what}: {last}")


def build_rootfs(dest: Path | None = None) -> Path:
    """Build the arm64 Python + TVM tree (~1 min, ~600 MB; needs debootstrap and access to Debian's
    packages and PyPI). Idempotent: an existing tree is kept."""
    dest = dest or rootfs_dir()
    if (dest / "usr" / "bin" / "python3").exists():
        return dest
    if not shutil.which("debootstrap"):
        raise BoardError("building the arm64 TVM environment needs debootstrap: apt-get install debootstrap")
    part = dest.with_name(f"{dest.name}.partial-{os.getpid()}")  # concurrent builders do not collide
    shutil.rmtree(part, ignore_errors=True)
    part.parent.mkdir(parents=True, exist_ok=True)
    try:
        _build_rootfs_in(part)
        part.rename(dest)
    except OSError:
        if not (dest / "usr/bin/python3").exists():  # another builder finished first: keep theirs
            raise
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return dest


def _build_rootfs_in(part: Path) -> None:
    _run(["debootstrap", "--foreign", "--variant=minbase", "--arch=arm64", "--include=python3", "bookworm",
          str(part)], "downloading Debian arm64 packages (debootstrap)")
    for deb in sorted((part / "var/cache/apt/archives").glob("*.deb")):  # keep merged-/usr symlinks intact
        _run(["sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"', "-", str(deb),
              str(part)], f"unpacking {deb.name}")
        deb.unlink()
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(part / "opt/tvm-site"), "--only-binary=:all:",
          "--implementation", "cp", "--python-version", "3.11", "--abi", "cp311", *plat, *TVM_WHEELS],
         "installing the aarch64 TVM wheels (pip)")


def _python_wrapper(lay: Layout, rootfs: Path) -> Path:
    """state/python-aarch64: the arm64 Python with TVM, as the board's [rpc] python on the stand-in."""
    w = lay.state / "python-aarch64"
    w.write_text(f"#!/bin/sh\n# aarch64 Python + apache-tvm, emulated (edgepack.standin.qemu_linux.build_rootfs)\n"
                 f"export QEMU_LD_PREFIX={shlex.quote(str(rootfs))} TVM_USE_RUNTIME_LIB=1 "
                 f"PYTHONPATH={shlex.quote(str(rootfs / 'opt/tvm-site'))}\n"
                 f"exec {shlex.quote(str(rootfs / 'usr/bin/python3'))} \"$@\"\n")
    w.chmod(0o755)
    return w


def up(board: Board, state: Path) -> Connection:
    sc = board.section("standin")
    qemu = shutil.which(sc.get("qemu", "qemu-aarch64"))
    _check_host(board, qemu)
    down(board, state)  # a stale one from a crash: stop it first
    lay = Layout(Path(state))
    lay.state.mkdir(parents=True, exist_ok=True)
    lay.device.mkdir(exist_ok=True)
    lay.binfmt.mkdir(exist_ok=True)
    _keys(lay)
    port = free_port()
    lay.config.write_text(_sshd_config(lay, port))
    p = _spawn(board, lay, qemu)
    lay.pid.write_text(str(p.pid))
    try:
        _wait_listening(p, port, lay, board)
    except BaseException:
        down(board, state)
        raise
    lay.known_hosts.write_text(_known_hosts_line(lay, port))
    extra = {"known_hosts": str(lay.known_hosts), "deploy_dir": str(lay.device / "edgepack")}
    if (rootfs_dir() / "usr/bin/python3").exists():  # the RPC path: see build_rootfs
        extra["rpc_python"] = str(_python_wrapper(lay, rootfs_dir()))
    return Connection(host="127.0.0.1", port=port, user=getpass.getuser(), key=str(lay.client_key), extra=extra)


def _pid(lay: Layout) -> int | None:
    try:
        return int(lay.pid.read_text())
    except (OSError, ValueError):
        return None


def _userns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return None


def _is_ours(pid: int, lay: Layout) -> bool:
    """The saved pid is still our sshd (not a recycled pid) and lives in its own user namespace."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()  # sshd rewrites it as one string: match a substring
    except OSError:
        return False
    return str(lay.config).encode() in cmd and _userns(pid) != _userns(os.getpid())


def _namespace_pids(ns: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and _userns(int(d.name)) == ns:
            pids.append(int(d.name))
    return pids


def alive(board: Board, state: Path) -> bool:
    lay = Layout(Path(state))
    pid = _pid(lay)
    return pid is not None and _is_ours(pid, lay)


def down(board: Board, state: Path) -> None:
    lay = Layout(Path(state))
    pid = _pid(lay)
    if pid is not None and _is_ours(pid, lay):
        ns = _userns(pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for q in _namespace_pids(ns):  # sshd and everything its sessions started (bench, rpc server, ...)
                try:
                    os.kill(q, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 3
            while _namespace_pids(ns) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _namespace_pids(ns):
                break
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it when we started it in this process
        except ChildProcessError:
            pass
    (lay.state / "python-aarch64").unlink(missing_ok=True)
    for f in ("host_key", "client_key", "authorized", "config", "known_hosts", "pid"):
        p = getattr(lay, f)
        p.unlink(missing_ok=True)
        Path(f"{p}.pub").unlink(missing_ok=True)
    (lay.state / "sshd.pid").unlink(missing_ok=True)
    for d in (lay.device, lay.binfmt):
        shutil.rmtree(d, ignore_errors=True)  # empty mount points once the namespace is gone


if __name__ == "__main__":  # python -m edgepack.standin.qemu_linux build-rootfs
    if sys.argv[1:] != ["build-rootfs"]:
        sys.exit("usage: python -m edgepack.standin.qemu_linux build-rootfs")
    print(f"arm64 Python + TVM environment: {build_rootfs()}")
