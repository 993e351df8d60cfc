"""Boards: one TOML file per board in boards/. Adding a board is adding a file."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BoardError
from .resources import BOARDS_DIR



@dataclass(frozen=True)
class Target:
    kind: str  # "llvm" (object files) or "c" (C source kernels)
    triple: str
    cpu: str
    features: tuple[str, ...]
    cores: int
    vector_bits: int


@dataclass(frozen=True)
class Toolchain:
    cc: str
    ar: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    platform: str  # "posix" or "single"


@dataclass(frozen=True)
class Timing:
    warmup: int = 3
    number: int = 1
    repeat: int = 20
    min_repeat_ms: int = 50
    cooldown_ms: int = 0
    flush_cache: bool = False  # flush the CPU cache before each timed repeat (measures cold-cache kernels)


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    path: Path
    target: Target
    toolchain: Toolchain
    transport: dict = field(default_factory=dict)
    rpc_key: str = ""
    timing: Timing = Timing()
    sections: dict = field(default_factory=dict, repr=False)  # the whole file, for transport-specific sections

    def section(self, name: str) -> dict:
        """A board-specific section ([ssh], [deploy], [memory], [uart], [flasher], [standin], ...), {} if absent."""
        v = self.sections.get(name, {})
        if not isinstance(v, dict):
            raise BoardError(f"board file {self.path}: '{name}' must be a table ([{name}]), got {type(v).__name__}")
        return v

    @property
    def vector_lanes_f32(self) -> int:
        return max(1, self.target.vector_bits // 32)

    @property
    def transport_kind(self) -> str:
        """How packages reach the board: "local" (this machine), "ssh" or "serial"."""
        return self.transport.get("kind", "local")

    @property
    def word_bits(self) -> int:
        """Width of the integer registers: 32 on Arm's 32-bit cores (armv7, Cortex-M), else 64."""
        return 32 if self.target.triple.startswith(("arm", "thumb")) else 64

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 and on aarch64 (NEON), else 16 (AVX2, SSE, armv7)."""
        t = self.target
        return 32 if t.vector_bits >= 512 or t.triple.startswith("aarch64") else 16

    @property
    def int8_dot(self) -> str:
        """The int8 dot-product instruction integer kernels can use (schedule/int8_dot.py). On x86_64 with
        256-bit vectors or more, a form of vpmaddwd by what LLVM knows of the board's cpu and features:
        "avx512vnni" / "avx512" with 512-bit vectors, with and without VNNI's vpdpwssd, else "vnni" (AVX-VNNI)
        or "avx2". "sdot" on aarch64 whose board file lists "+dotprod", else "smull" (SMULL + SADALP, the Pi 4's
        A72), "dsp" for C kernels on a core whose
        board file lists "+dsp" (Armv7E-M's SMLAD), else "" (the compiler's multiply-add)."""
        t = self.target
        if t.kind == "c":
            return "dsp" if "+dsp" in t.features else ""
        if t.triple.startswith("aarch64"):
            return "sdot" if "+dotprod" in t.features else "smull"
        if not (t.kind == "llvm" and t.triple.startswith("x86_64") and t.vector_bits >= 256):
            return ""
        has = self._cpu_has
        if t.vector_bits >= 512 and has("avx512bw"):
            return "avx512vnni" if has("avx512vnni") else "avx512"
        return "vnni" if has("avxvnni") or (has("avx512vnni") and has("avx512vl")) else "avx2"

    def _cpu_has(self, feature: str) -> bool:
        """Whether LLVM's model of the board's cpu, with its board file's features, has `feature`."""
        from tvm.target import codegen

        return bool(codegen.target_has_features(feature, self.tvm_target()))

    def tvm_target(self):
        """The TVM target dict (strings are rejected: docs/tvm-facts.md#target-dicts)."""
        import tvm

        if self.target.kind == "c":  # C source: the kind takes no triple or core count; gcc gets the cpu flags
            return tvm.target.Target({"kind": "c"})
        cfg = {"kind": self.target.kind, "mtriple": self.target.triple, "num-cores": self.target.cores}
        cfg["mcpu"] = self.target.cpu
        mattr = list(self.target.features)
        if self.target.triple.startswith("x86_64") and self.target.vector_bits >= 512:
            # LLVM's loop vectorizer miscompiles the gathers it makes with AVX-512 (docs/tvm-facts.md#avx-512-gathers)
            mattr += ["+prefer-no-gather", "+prefer-no-scatter"]
        if mattr:
            cfg["mattr"] = mattr
        if self.sections.get("target", {}).get("float_abi"):  # 32-bit Arm: "hard" to match gnueabihf gcc
            cfg["mfloat-abi"] = self.sections["target"]["float_abi"]
        return tvm.target.Target(cfg)


def _need(d: dict, key: str, kind: type, path: Path, section: str):
    where = f"{section}.{key}" if section else key
    if key not in d:
        raise BoardError(f"board file {path}: missing key '{where}' ({kind.__name__} expected)")
    v = d[key]
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise BoardError(f"board file {path}: key '{where}' must be {kind.__name__}, got {type(v).__name__} {v!r}")
    return v


def _host_cpu() -> str:
    import tvm

    return str(tvm.target.codegen.llvm_get_system_cpu())


def _host_vector_bits() -> int:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 128
    return 512 if "avx512f" in flags else 256 if "avx2" in flags else 128


def _auto_int(d: dict, key: str, path: Path, section: str, auto) -> int:
    v = d.get(key, "auto")
    if v == "auto":
        return int(auto())
    return _need(d, key, int, path, section)


def load_board_file(path: Path) -> Board:
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"board file {path}: not valid TOML ({e})") from None
    t = _need(raw, "target", dict, path, "")
    tc = _need(raw, "toolchain", dict, path, "")
    cpu = _need(t, "cpu", str, path, "target")
    target = Target(
        kind=_need(t, "kind", str, path, "target"),
        triple=_need(t, "triple", str, path, "target"),
        cpu=_host_cpu() if cpu == "native" else cpu,
        features=tuple(t.get("features", [])),
        cores=_auto_int(t, "cores", path, "target", os.cpu_count),
        vector_bits=_auto_int(t, "vector_bits", path, "target", _host_vector_bits),
    )
    if target.kind not in ("llvm", "c"):
        raise BoardError(f"board file {path}: key 'target.kind' must be \"llvm\" or \"c\", got {target.kind!r}")
    toolchain = Toolchain(
        cc=_need(tc, "cc", str, path, "toolchain"),
        ar=tc.get("ar", "ar"),
        cflags=tuple(tc.get("cflags", [])),
        ldflags=tuple(tc.get("ldflags", [])),
        platform=tc.get("platform", "posix"),
    )
    timing_raw = raw.get("timing", {})
    timing = Timing(**{k: _need(timing_raw, k, bool if k == "flush_cache" else int, path, "timing")
                       for k in Timing.__dataclass_fields__ if k in timing_raw})
    return Board(
        name=_need(raw, "name", str, path, ""),
        description=raw.get("description", ""),
        path=path,
        target=target,
        toolchain=toolchain,
        transport=raw.get("transport", {"kind": "local"}),
        rpc_key=raw.get("rpc", {}).get("key", raw["name"]),
        timing=timing,
        sections=raw,
    )


def board_files(boards_dir: Path = BOARDS_DIR) -> list[Path]:
    return sorted(boards_dir.glob("*.toml"))


def load_board(name: str, boards_dir: Path = BOARDS_DIR) -> Board:
    path = boards_dir / f"{name}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in board_files(boards_dir)) or "none"
        raise BoardError(f"unknown board '{name}' (known: {known}); add boards/{name}.toml to define it")
    board = load_board_file(path)
    if board.name != name:
        raise BoardError(f"board file {path}: key 'name' is {board.name!r}, expected {name!r} (the file name)")
    return board


@dataclass(frozen=True)
class Connection:
    """How to reach a board, from the CLI flags (or a stand-in's saved settings). Unused fields stay None."""

    host: str | None = None
    port: int | None = None
    user: str | None = None
    key: str | None = None
    serial: str | None = None  # pyserial URL or device path
    accept_new_host_key: bool = False
    extra: dict = field(default_factory=dict)
