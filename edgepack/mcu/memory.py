"""The memory report of a firmware image: flash and RAM per component, read from the linker's map file (so
it counts what --gc-sections kept), and the check that the image fits the board."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

FLASH_SECTIONS = (".isr_vector", ".text", ".rodata", ".ARM.exidx")
RAM_SECTIONS = (".bss", ".stack")  # .data counts in both: stored in flash, copied to RAM at reset

_OUT = re.compile(r"^(\.[\w.]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)")
_IN = re.compile(r"^ (\S+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")
_IN_NAME = re.compile(r"^ (\.\S+)$")
_IN_REST = re.compile(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")


@dataclass
class MemoryReport:
    flash: dict[str, int] = field(default_factory=dict)  # component -> bytes
    ram: dict[str, int] = field(default_factory=dict)
    flash_capacity: int = 0
    ram_capacity: int = 0
    runtime_text: int = 0  # .text of the runtime core (ep_runtime.c + platform), without kernels and weights

    @property
    def flash_used(self) -> int:
        return sum(self.flash.values())

    @property
    def ram_used(self) -> int:
        return sum(self.ram.values())

    def fits(self) -> bool:
        return self.flash_used <= self.flash_capacity and self.ram_used <= self.ram_capacity

    def summary(self) -> str:
        """One line per memory, e.g. for an error message."""
        def line(name, used, cap, parts):
            return (f"{name} {used:,} of {cap:,} B (" + ", ".join(f"{k} {v:,}" for k, v in parts.items() if v) + ")")
        return "; ".join([line("flash", self.flash_used, self.flash_capacity, self.flash),
                          line("RAM", self.ram_used, self.ram_capacity, self.ram)])

    def table(self) -> str:
        rows = [f"{'':10} {'bytes':>10}"]
        for title, parts, used, cap in (("flash", self.flash, self.flash_used, self.flash_capacity),
                                        ("RAM", self.ram, self.ram_used, self.ram_capacity)):
            rows.append(f"{title}: {used:,} of {cap:,} B ({100 * used / max(cap, 1):.1f}%)")
            rows += [f"  {k:10} {v:>10,}" for k, v in parts.items()]
        rows.append(f"runtime core .text: {self.runtime_text:,} B (without kernels and weights)")
        return "\n".join(rows) + "\n"

    def to_json(self) -> dict:
        return asdict(self) | {"flash_used": self.flash_used, "ram_used": self.ram_used}

    def write(self, bundle_dir: Path) -> None:
        (bundle_dir / "memory.json").write_text(json.dumps(self.to_json(), indent=1) + "\n")
        (bundle_dir / "memory.txt").write_text(self.table())


def component(obj: str, section: str, model: str) -> str:
    """Which part of the image an input section belongs to."""
    base = obj.rsplit("(", 1)[-1].rstrip(")").rsplit("/", 1)[-1]
    if section in (".bss.arena", ".bss.io"):
        return section[5:]
    if base == "kernels.o":
        return "kernels"
    if base == "weights.o":
        return "weights"
    if base == "ep_runtime.o" or base.startswith("ep_platform_"):
        return "runtime"
    if base in (f"{model}.o", f"{model}_dispatch.o"):
        return "package"  # the generated call sequence and dispatcher
    if base.startswith("ep_fw_"):
        return "firmware"
    return "libc"  # newlib, libm, libgcc


def parse_map(text: str, model: str) -> tuple[dict[str, int], list[tuple[str, str, str, int]]]:
    """(output section -> size, [(output section, input section, component, size)]) from a GNU ld map."""
    body = text.split("Linker script and memory map", 1)[-1]
    outs: dict[str, int] = {}
    ins: list[tuple[str, str, str, int]] = []
    cur, pending = None, None
    for line in body.splitlines():
        m = _OUT.match(line)
        if m:
            cur = m.group(1)
            outs[cur] = int(m.group(3), 16)
            continue
        if re.match(r"^\.\S+$", line):  # long output section name: address and size on the next line
            cur = line.strip()
            pending = ("out", cur)
            continue
        if pending and pending[0] == "out":
            m2 = re.match(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)", line)
            if m2:
                outs[cur] = int(m2.group(2), 16)
            pending = None
            continue
        m = _IN.match(line)
        if m and cur and not line.startswith(" *"):
            ins.append((cur, m.group(1), component(m.group(4), m.group(1), model), int(m.group(3), 16)))
            continue
        m = _IN_NAME.match(line)
        if m:
            pending = ("in", m.group(1))
            continue
        if pending and pending[0] == "in":
            m = _IN_REST.match(line)
            if m and cur:
                ins.append((cur, pending[1], component(m.group(3), pending[1], model), int(m.group(2), 16)))
            pending = None
    return outs, ins


def report_from_map(map_path: Path, model: str, flash_capacity: int, ram_capacity: int) -> MemoryReport:
    outs, ins = parse_map(map_path.read_text(), model)
    r = MemoryReport(flash_capacity=flash_capacity, ram_capacity=ram_capacity)
    order = ("kernels", "weights", "runtime", "package", "firmware", "libc")
    r.flash = {k: 0 for k in order}
    r.ram = {"arena": 0, "io": 0, "stack": outs.get(".stack", 0), "runtime": 0, "package": 0, "firmware": 0, "libc": 0}
    for out, sec, comp, size in ins:
        if out in FLASH_SECTIONS or out == ".data":
            r.flash[comp] = r.flash.get(comp, 0) + size
        if out in (".data", ".bss"):
            r.ram[comp] = r.ram.get(comp, 0) + size
        if out == ".text" and comp == "runtime":
            r.runtime_text += size
    # alignment padding and linker-made pieces: the difference between section and input sizes
    flash_sections = sum(outs.get(s, 0) for s in FLASH_SECTIONS + (".data",))
    ram_sections = sum(outs.get(s, 0) for s in RAM_SECTIONS + (".data",))
    r.flash["padding"] = max(0, flash_sections - sum(r.flash.values()))
    r.ram["padding"] = max(0, ram_sections - sum(r.ram.values()))
    return r
