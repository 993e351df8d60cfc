"""Arm Linux boards over SSH (paramiko): flash a package, run it on inputs, time it.

On the board a package lives in <deploy dir>/<package>/:
    releases/<version>/   complete, verified versions (version = first 16 hex of manifest.json's sha256)
    staging/<version>/    an upload in progress; a dropped connection leaves it for the next flash to resume
    current, previous     symlinks to releases/...; switched by rename, so a reader sees the old or the new one
    tmp/                  per-run input/output folders, removed after each run
Every remote command is built from shlex-quoted words.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shlex
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paramiko

from ..board import Board, Connection
from ..codegen.bundle import Bundle, verify
from ..errors import DeviceError, DimError, RunError, last_line
from .device import BenchResult, BenchSettings, check_board
from .io import dims_of, output_file
from .local import bench_args, calls_of

CONNECT_TIMEOUT_S = 10
SPACE_MARGIN = 64 * 1024  # bytes kept free beyond the upload itself (symlinks, run outputs, logs)


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to log in, from the CLI flags over the board file's [ssh] and [deploy] defaults."""

    host: str
    port: int
    user: str | None
    key: str | None
    known_hosts: str | None  # None: ~/.ssh/known_hosts
    accept_new_host_key: bool
    deploy_dir: str

    @property
    def where(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


@dataclass
class FlashReport:
    path: str  # <deploy>/<package>/current on the board
    version: str
    uploaded: int  # files sent this time
    reused: int  # files already staged by an interrupted flash (or the whole release already there)
    bytes_sent: int
    seconds: float


def ssh_target(board: Board, conn: Connection) -> SSHTarget:
    ssh, deploy = board.section("ssh"), board.section("deploy")
    if not conn.host:
        hint = f" or start its stand-in: `edgepack standin up {board.name}`" if board.section("standin") else ""
        raise DeviceError(f"board '{board.name}' is reached over SSH: pass --host (and --user/--key){hint}")
    key = conn.key or ssh.get("key")
    if key and not Path(key).expanduser().is_file():
        raise DeviceError(f"SSH key file '{key}' does not exist; pass --key with your private key file")
    return SSHTarget(host=conn.host, port=int(conn.port or ssh.get("port", 22)), user=conn.user or ssh.get("user"),
                     key=str(Path(key).expanduser()) if key else None,
                     known_hosts=conn.extra.get("known_hosts"), accept_new_host_key=conn.accept_new_host_key,
                     deploy_dir=conn.extra.get("deploy_dir") or deploy.get("dir", "~/edgepack"))


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host keys are refused unless the user said to trust new ones; then they are saved."""

    def __init__(self, t: SSHTarget, known_hosts: Path):
        self.t, self.file = t, known_hosts

    def missing_host_key(self, client, hostname, key):
        fp = "SHA256:" + _b64(hashlib.sha256(key.asbytes()).digest())
        if not self.t.accept_new_host_key:
            raise DeviceError(f"host key of {hostname} ({key.get_name()} {fp}) is not in {self.file}; "
                              "check it is your board and pass --accept-new-host-key to trust it")
        self.file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.file, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode().rstrip("=")


def connect(t: SSHTarget) -> paramiko.SSHClient:
    known = Path(t.known_hosts or Path.home() / ".ssh" / "known_hosts").expanduser()
    client = paramiko.SSHClient()
    if known.exists():
        client.load_host_keys(str(known))
    client.set_missing_host_key_policy(_HostKeyPolicy(t, known))
    kw = dict(key_filename=[t.key], look_for_keys=False, allow_agent=False) if t.key else {}
    try:
        client.connect(t.host, port=t.port, username=t.user, timeout=CONNECT_TIMEOUT_S,
                       banner_timeout=CONNECT_TIMEOUT_S, auth_timeout=CONNECT_TIMEOUT_S, **kw)
    except DeviceError:
        client.close()
        raise
    except paramiko.BadHostKeyException:
        client.close()
        raise DeviceError(f"host key of {t.host}:{t.port} does not match {known}; if the board was reinstalled, "
                          f"remove the old key with `ssh-keygen -f {known} -R '[{t.host}]:{t.port}'`") from None
    except paramiko.AuthenticationException:
        client.close()
        raise DeviceError(f"{t.where} refused the key {t.key or '(agent/default keys)'}; pass --key with a key in "
                          "the board's ~/.ssh/authorized_keys (ssh-copy-id) and the right --user") from None
    except (OSError, paramiko.SSHException, EOFError) as e:
        client.close()
        why = "timed out" if isinstance(e, (TimeoutError, socket.timeout)) else (str(e).split("]")[-1].strip() or type(e).__name__)
        raise DeviceError(f"cannot reach {t.where} ({why[:120]}); check the board is on the network and "
                          "--host/--port") from None
    return client


class SSHDevice:
    """A board reached over SSH. `progress(rel_path, done, total)` is called after each uploaded file."""

    def __init__(self, board: Board, target: SSHTarget, progress=None):
        self.board, self.t, self.progress = board, target, progress
        self.client = connect(target)
        try:
            self.sftp = self._guard(self.client.open_sftp, "opening SFTP")
            self.deploy_dir = self._resolve(target.deploy_dir)
        except BaseException:
            self.client.close()
            raise
        self.last_flash: FlashReport | None = None

    # --- plumbing -------------------------------------------------------------------------------------------
    def _guard(self, fn, doing: str, *a, **kw):
        try:
            return fn(*a, **kw)
        except (paramiko.SSHException, EOFError, socket.timeout, ConnectionError) as e:
            raise DeviceError(f"connection to {self.t.where} lost while {doing} ({type(e).__name__}); "
                              "check the board and retry") from None

    def _resolve(self, d: str) -> str:
        home = self._guard(self.sftp.normalize, "reading the home directory", ".")
        return home + d[1:] if d.startswith("~/") or d == "~" else d if d.startswith("/") else f"{home}/{d}"

    def sh(self, words: list[str] | str, stdin: bytes = b"", timeout: float = 600) -> tuple[int, str, str]:
        """Run a command on the board: a list of words (each quoted) or an already-quoted string."""
        cmd = words if isinstance(words, str) else shlex.join(words)
        return self._guard(self._exec, f"running {cmd[:60]!r}", cmd, stdin, timeout)

    def _exec(self, cmd: str, stdin: bytes, timeout: float) -> tuple[int, str, str]:
        tr = self.client.get_transport()
        if tr is None or not tr.is_active():
            raise EOFError("the SSH connection is closed")
        chan = tr.open_session(timeout=CONNECT_TIMEOUT_S)
        chan.settimeout(timeout)
        chan.exec_command(cmd)
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        out, err = chan.makefile("rb").read(), chan.makefile_stderr("rb").read()
        rc = chan.recv_exit_status()  # -1 when the program was killed by a signal (exit-signal)
        chan.close()
        return rc, out.decode(errors="replace"), err.decode(errors="replace")

    def must(self, words: list[str] | str, what: str, stdin: bytes = b"") -> str:
        rc, out, err = self.sh(words, stdin)
        if rc != 0:
            raise DeviceError(f"{what} failed on {self.t.where}: {_failure(err, rc)}")
        return out

    def close(self) -> None:
        self.client.close()

    # --- install --------------------------------------------------------------------------------------------
    def root(self, bundle: Bundle) -> str:
        return f"{self.deploy_dir}/{bundle.name}"

    def install(self, bundle: Bundle) -> str:
        check_board(bundle, self.board)
        bad = verify(bundle)
        if bad:
            raise RunError(f"package '{bundle.path}' changed since it was built ({', '.join(bad[:3])}); "
                           "rebuild it with `edgepack build`")
        t0 = time.perf_counter()
        root, files, version = self.root(bundle), _package_files(bundle), _version(bundle)
        release = f"{root}/releases/{version}"
        sent = reused = nbytes = 0
        if self._verified(release, files):
            reused = len(files)
        else:
            sent, reused, nbytes = self._upload(bundle, root, version, files)
        self._switch(root, version)
        self.last_flash = FlashReport(f"{root}/current", version, sent, reused, nbytes, time.perf_counter() - t0)
        return self.last_flash.path

    def _verified(self, d: str, files: dict[str, str]) -> bool:
        rc, _, _ = self.sh(f"cd {shlex.quote(d)} 2>/dev/null && sha256sum --quiet -c -", stdin=_sumfile(files))
        return rc == 0

    def _staged(self, stage: str, files: dict[str, str]) -> set[str]:
        """Files an interrupted flash already left in the staging folder, intact."""
        _, out, _ = self.sh(f"cd {shlex.quote(stage)} 2>/dev/null && sha256sum -- {shlex.join(sorted(files))} 2>/dev/null")
        have = {}
        for line in out.splitlines():
            digest, _, rel = line.partition("  ")
            have[rel] = digest
        return {rel for rel, d in files.items() if have.get(rel) == d}

    def _upload(self, bundle: Bundle, root: str, version: str, files: dict[str, str]) -> tuple[int, int, int]:
        stage, release = f"{root}/staging/{version}", f"{root}/releases/{version}"
        done = self._staged(stage, files)
        todo = [rel for rel in sorted(files) if rel not in done]
        need = sum((bundle.path / rel).stat().st_size for rel in todo)
        self._check_space(root, need)  # before anything is created on the board
        dirs = sorted({str(Path(stage, rel).parent) for rel in files} | {f"{root}/releases", f"{root}/tmp"})
        self.must(["mkdir", "-p", *dirs], "creating the staging folder")
        for i, rel in enumerate(todo):
            self._put(bundle.path / rel, f"{stage}/{rel}", stage, need)
            if self.progress:
                self.progress(rel, i + 1, len(todo))
        rc, out, err = self.sh(f"cd {shlex.quote(stage)} && sha256sum --quiet -c -", stdin=_sumfile(files))
        if rc != 0:
            bad = [ln.split(":")[0] for ln in (out + err).splitlines() if "FAILED" in ln][:3]
            self.sh(["rm", "-rf", stage])
            raise DeviceError(f"sha256 of {', '.join(bad) or 'the upload'} differs on {self.t.where} after upload; "
                              "flash again (the installed version is unchanged)")
        progs = [rel for rel in files if (bundle.path / rel).stat().st_mode & 0o111]  # SFTP does not keep modes
        self.must(["sh", "-c", 'cd "$1" && shift 2 && chmod 755 -- "$@"', "-", stage, "--", *progs], "making programs executable")
        self.must(["sh", "-c", 'rm -rf "$2" && mv -T "$1" "$2"', "-", stage, release], "moving the upload in place")
        return len(todo), len(done), need

    def _free_bytes(self, path: str) -> int:
        nearest = 'd=$1; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; df -Pk "$d"'  # path may not exist yet
        out = self.must(["sh", "-c", nearest, "-", path], "checking free space")
        return int(out.splitlines()[-1].split()[3]) * 1024

    def _no_space(self, root: str, free: int, need: int) -> DeviceError:
        return DeviceError(f"not enough space on {self.t.where}: {free // 1024} KB free in {root}, the package "
                           f"needs {(need + SPACE_MARGIN) // 1024} KB; free space on the board and flash again "
                           "(the installed version is unchanged)")

    def _check_space(self, root: str, need: int) -> None:
        free = self._free_bytes(root)
        if free < need + SPACE_MARGIN:
            raise self._no_space(root, free, need)

    def _put(self, local: Path, remote: str, stage: str, need: int) -> None:
        try:
            self.sftp.put(str(local), remote)
        except (paramiko.SSHException, EOFError, socket.timeout, ConnectionError) as e:
            raise DeviceError(f"connection to {self.t.where} dropped during upload ({type(e).__name__}); the "
                              "installed version is unchanged; flash again to resume") from None
        except OSError as e:
            tr = self.client.get_transport()
            if tr is None or not tr.is_active():
                raise DeviceError(f"connection to {self.t.where} dropped during upload; the installed version "
                                  "is unchanged; flash again to resume") from None
            self.sh(["rm", "-rf", stage])  # nothing half-installed: free what the partial upload took
            free = self._free_bytes(stage)
            if free < local.stat().st_size + SPACE_MARGIN:  # the disk filled up while we uploaded
                raise self._no_space(stage.rsplit("/staging/", 1)[0], free, need) from None
            raise DeviceError(f"writing {remote} on {self.t.where} failed ({e.strerror or e}); check the deploy "
                              "directory's permissions and flash again (the installed version is unchanged)") from None

    def _switch(self, root: str, version: str) -> None:
        """current -> the new release by an atomic rename; the old current becomes previous; others pruned."""
        script = ('cd "$1" && new="releases/$2" && old=$(readlink current || true) && '
                  'if [ -n "$old" ] && [ "$old" != "$new" ]; then ln -sfn "$old" previous.tmp && mv -T previous.tmp previous; fi && '
                  'ln -sfn "$new" current.tmp && mv -T current.tmp current && prev=$(readlink previous || true) && '
                  'for d in releases/*; do [ "$d" = "$new" ] || [ "$d" = "$prev" ] || rm -rf "$d"; done && rm -rf staging')
        self.must(["sh", "-c", script, "-", root, version], "switching to the new version")

    def rollback(self, package: str) -> str:
        """Make `previous` current again (and the current one previous)."""
        root = f"{self.deploy_dir}/{package}"
        script = ('cd "$1" 2>/dev/null || exit 3; cur=$(readlink current) || exit 3; prev=$(readlink previous) || exit 4; '
                  '[ -d "$prev" ] || exit 4; ln -sfn "$prev" current.tmp && mv -T current.tmp current && '
                  'ln -sfn "$cur" previous.tmp && mv -T previous.tmp previous && echo "$prev"')
        rc, out, err = self.sh(["sh", "-c", script, "-", root])
        if rc in (3, 4):
            what = "is not installed" if rc == 3 else "has no previous version"
            raise DeviceError(f"nothing to roll back to: package '{package}' {what} in {self.deploy_dir} on "
                              f"{self.t.where}; flash two versions first")
        if rc != 0:
            raise DeviceError(f"rollback failed on {self.t.where}: {_failure(err, rc)}")
        return f"{root}/current -> {out.strip()}"

    def installed(self, package: str) -> dict[str, str | None]:
        """{"current": "releases/<v>" or None, "previous": ...} on the board."""
        root = shlex.quote(f"{self.deploy_dir}/{package}")
        _, out, _ = self.sh(f"cd {root} 2>/dev/null && echo \"$(readlink current)|$(readlink previous)\"")
        cur, _, prev = out.strip().partition("|")
        return {"current": cur or None, "previous": prev or None}

    def _ensure(self, bundle: Bundle) -> str:
        """The folder of this package version on the board, flashing it first when it is not there."""
        check_board(bundle, self.board)
        release = f"{self.root(bundle)}/releases/{_version(bundle)}"
        rc, _, _ = self.sh(["test", "-f", f"{release}/manifest.json"])
        if rc != 0:
            self.install(bundle)
        return release

    # --- run and bench --------------------------------------------------------------------------------------
    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path,
            threads: int | None = None) -> list[Path]:
        dims_of(bundle.manifest, arrays)  # bad inputs are refused here, before anything is sent
        release = self._ensure(bundle)
        tmp = self.must(["mktemp", "-d", f"{self.root(bundle)}/tmp/run-XXXXXX"], "creating a run folder").strip()
        try:
            ins = [f"{tmp}/in{i}.npy" for i in range(len(arrays))]
            for a, remote in zip(arrays, ins):
                buf = io.BytesIO()
                np.save(buf, np.require(a, requirements="C"))
                buf.seek(0)
                self._guard(self.sftp.putfo, "uploading inputs", buf, remote)
            self.must(["mkdir", f"{tmp}/out"], "creating the output folder")
            cmd = [f"{release}/ep", "run"] + (["--threads", str(threads)] if threads else []) + [f"{tmp}/out", *ins]
            rc, _, err = self.sh(cmd)
            if rc != 0:
                raise (DimError if rc == 3 else RunError)(f"the package failed on {self.t.where}: {_failure(err, rc)}")
            return self._fetch_outputs(bundle, f"{tmp}/out", Path(out_dir))
        finally:
            self.sh(["rm", "-rf", tmp])

    def _fetch_outputs(self, bundle: Bundle, remote: str, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".edgepack-run-", dir=out_dir) as loc:
            names = [output_file(i, o["name"]) for i, o in enumerate(bundle.manifest["outputs"])]
            for n in names:
                self._guard(self.sftp.get, "fetching outputs", f"{remote}/{n}", f"{loc}/{n}")
            for n in names:  # only a complete set of outputs lands in out_dir
                shutil.move(f"{loc}/{n}", out_dir / n)
        return [out_dir / n for n in names]

    def bench(self, bundle: Bundle, dims: dict[str, int], settings: BenchSettings) -> BenchResult:
        release = self._ensure(bundle)
        out = self._bench(release, bundle, dims, settings, profile=False)
        calls = calls_of(self._bench(release, bundle, dims, settings, profile=True)) if settings.profile else []
        return BenchResult(dims=dict(dims), samples_ns=[int(s) for s in out["samples_ns"]], threads=out.get("threads"),
                           calls=calls)

    def _bench(self, release: str, bundle: Bundle, dims: dict[str, int], settings: BenchSettings,
               profile: bool) -> dict:
        rc, out, err = self.sh([f"{release}/ep", *bench_args(bundle, dims, settings, profile)], timeout=3600)
        if rc == -1 or rc > 128:
            sig = f" (signal {rc - 128})" if rc > 128 else ""
            raise RunError(f"the bench program was killed on {self.t.where}{sig} at {dims}; nothing was measured; "
                           "check the board's memory (OOM killer) and run the bench again")
        if rc != 0:
            raise (DimError if rc == 3 else RunError)(f"the bench program failed on {self.t.where}: {_failure(err, rc)}")
        try:
            return json.loads(out)
        except ValueError:
            raise RunError(f"the bench program on {self.t.where} printed no result ({out.strip()[:80]!r}); "
                           "rebuild the package with `edgepack build`") from None


def _package_files(bundle: Bundle) -> dict[str, str]:
    """What the board gets, with sha256: the device program and manifest.json (every file of a package
    built before `device_files` existed). Sources, objects and the library stay here."""
    from ..codegen.bundle import sha256

    files = bundle.manifest["files"]
    wanted = bundle.manifest.get("device_files", files)
    return {**{rel: files[rel] for rel in wanted}, "manifest.json": sha256(bundle.path / "manifest.json")}


def _version(bundle: Bundle) -> str:
    from ..codegen.bundle import sha256

    return sha256(bundle.path / "manifest.json")[:16]


def _sumfile(files: dict[str, str]) -> bytes:
    return "".join(f"{d}  {rel}\n" for rel, d in sorted(files.items())).encode()


def _failure(err: str, rc: int) -> str:
    """What a remote command said last on stderr (the device program's "error: ..." line)."""
    return last_line(err, f"exit code {rc}").removeprefix("error: ")


def open_device(board: Board, conn: Connection, progress=None) -> SSHDevice:
    return SSHDevice(board, ssh_target(board, conn), progress=progress)
