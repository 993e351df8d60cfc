"""A microcontroller board's settings, read from its board file's [mcu], [memory], [uart], [timer], [serial]
and [flasher] sections."""

from __future__ import annotations

from dataclasses import dataclass

from ..board import Board
from ..errors import BoardError

UART_KINDS = ("cmsdk", "stm32f4", "stm32f7", "nrf")


@dataclass(frozen=True)
class McuConfig:
    cpu: str
    fpu: str  # "none" or a gcc -mfpu name
    float_abi: str  # "soft", "softfp" or "hard"
    clock_hz: int
    stack_bytes: int
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    uart: dict  # kind, base, baud and driver-specific keys (pins, clock enable bits)
    timer: str  # "systick" or "dwt"
    max_payload: int
    frame_timeout_ms: int
    flasher: str  # command template ({elf}, {bin}, {hex}); "" for stand-ins

    @property
    def arch_flags(self) -> list[str]:
        flags = [f"-mcpu={self.cpu}", "-mthumb", f"-mfloat-abi={self.float_abi}"]
        return flags + ([f"-mfpu={self.fpu}"] if self.fpu != "none" else [])


def is_mcu(board: Board) -> bool:
    return bool(board.section("mcu"))


def mcu_config(board: Board) -> McuConfig:
    def need(section: str, key: str, kind: type, default=None):
        v = board.section(section).get(key, default)
        if v is None or not isinstance(v, kind) or isinstance(v, bool):
            raise BoardError(f"board file {board.path}: key '{section}.{key}' must be {kind.__name__}, got {v!r}")
        return v

    uart = dict(board.section("uart"))
    if uart.get("kind") not in UART_KINDS:
        raise BoardError(f"board file {board.path}: key 'uart.kind' must be one of {', '.join(UART_KINDS)}, "
                         f"got {uart.get('kind')!r}")
    cfg = McuConfig(
        cpu=need("mcu", "cpu", str), fpu=need("mcu", "fpu", str, "none"),
        float_abi=need("mcu", "float_abi", str, "soft"),
        clock_hz=need("mcu", "clock_hz", int), stack_bytes=need("mcu", "stack_bytes", int, 8192),
        flash_origin=need("memory", "flash_origin", int), flash_bytes=need("memory", "flash_bytes", int),
        ram_origin=need("memory", "ram_origin", int), ram_bytes=need("memory", "ram_bytes", int),
        uart={"baud": 115200, **uart}, timer=need("timer", "kind", str, "systick"),
        max_payload=need("serial", "max_payload", int, 1024),
        frame_timeout_ms=need("serial", "frame_timeout_ms", int, 100),
        flasher=board.section("flasher").get("command", ""),
    )
    if cfg.timer not in ("systick", "dwt"):
        raise BoardError(f"board file {board.path}: key 'timer.kind' must be \"systick\" or \"dwt\", got {cfg.timer!r}")
    if not 64 <= cfg.max_payload <= 65535 or cfg.max_payload % 8:
        raise BoardError(f"board file {board.path}: key 'serial.max_payload' must be a multiple of 8 in 64..65535")
    return cfg
