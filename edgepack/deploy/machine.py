"""Facts about the machine a run was measured on (board, cpu, clock, os).

A Device may offer `facts() -> dict` with the keys of `local_facts`; devices that do not (yet) get the facts
their board file states, with what the board file cannot know left "unknown" / None.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpuinfo(key: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            if k.strip() == key:
                return v.strip()
    except OSError:
        pass
    return None


def _clock_mhz() -> float | None:
    """The current clock: cpufreq where the kernel exposes it, else /proc/cpuinfo (VMs often have only that)."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").read_text()) / 1000
    except (OSError, ValueError):
        mhz = _cpuinfo("cpu MHz")
        return round(float(mhz), 1) if mhz else None


def local_facts(board) -> dict:
    return {"board": board.name, "transport": board.transport_kind,
            "cpu": _cpuinfo("model name") or platform.processor() or board.target.cpu,
            "llvm_cpu": board.target.cpu, "cores": os.cpu_count(), "clock_mhz": _clock_mhz(),
            "os": f"{platform.system()} {platform.release()}", "arch": platform.machine(),
            "hostname": platform.node()}


def board_facts(board) -> dict:
    return {"board": board.name, "transport": board.transport_kind, "cpu": board.target.cpu,
            "llvm_cpu": board.target.cpu, "cores": board.target.cores, "clock_mhz": None, "os": "unknown",
            "arch": board.target.triple.split("-")[0], "hostname": None}


def device_facts(device, board) -> dict:
    facts = getattr(device, "facts", None)
    return board_facts(board) | (facts() if callable(facts) else {})
