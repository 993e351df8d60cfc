"""Host side of the edgepack serial protocol (device side: templates/firmware/ep_fw_main.c).

Frame, both ways: 0xEB, cmd, status, len (u16 LE), payload, crc32 (u32 LE, zlib.crc32 of cmd..payload).
Every request gets one reply carrying the request's cmd; a nonzero status carries a one-line message.
"""

from __future__ import annotations

import struct
import time
import zlib
from dataclasses import dataclass, field

from ..errors import DeviceReplyError, DimError, RunError

SYNC = 0xEB
INFO, SET_INPUT, RUN, GET_OUTPUT, BENCH = 1, 2, 3, 4, 5
STATUS = {0: "ok", 1: "bad CRC", 2: "truncated frame", 3: "unknown command", 4: "bad argument", 5: "oversize input",
          6: "dims out of range", 7: "run failed", 8: "no output yet", 9: "frame too long"}
ST_SHAPE = 6


def frame(cmd: int, payload: bytes = b"", status: int = 0) -> bytes:
    body = struct.pack("<BBH", cmd, status, len(payload)) + payload
    return bytes([SYNC]) + body + struct.pack("<I", zlib.crc32(body))


@dataclass
class Reply:
    cmd: int
    status: int
    payload: bytes

    @property
    def message(self) -> str:
        return self.payload.decode("utf-8", "replace")


@dataclass
class Info:
    """The firmware's `info` reply."""

    fields: dict[str, str] = field(default_factory=dict)
    dims: list[tuple[str, int, int]] = field(default_factory=list)
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)

    @staticmethod
    def parse(text: str) -> Info:
        info = Info()
        for line in text.splitlines():
            key, _, rest = line.partition(" ")
            if key == "dim":
                n, lo, hi = rest.rsplit(" ", 2)
                info.dims.append((n, int(lo), int(hi)))
            elif key in ("input", "output"):
                n, dt = rest.rsplit(" ", 1)
                (info.inputs if key == "input" else info.outputs).append((n, dt))
            elif key:
                info.fields[key] = rest
        return info

    def mismatches(self, manifest: dict) -> list[str]:
        """How this firmware differs from the package in `manifest` (empty: it is that package)."""
        want = {"board": manifest["board"]["name"], "package": manifest["model"]["name"],
                "id": manifest["firmware"]["id"], "arena": str(manifest["memory"]["arena_bytes"])}
        bad = [f"{k} {self.fields.get(k)!r} (package: {v!r})" for k, v in want.items() if self.fields.get(k) != v]
        if self.dims != [(d["name"], d["min"], d["max"]) for d in manifest["dims"]]:
            bad.append(f"dims {self.dims}")
        if self.inputs != [(i["name"], i["dtype"]) for i in manifest["inputs"]] or \
                self.outputs != [(o["name"], o["dtype"]) for o in manifest["outputs"]]:
            bad.append("inputs/outputs")
        return bad


class Link:
    """Requests and replies over a pyserial port (or anything with read/write/timeout)."""

    def __init__(self, port, timeout: float = 10.0):
        self.port = port
        self.timeout = timeout

    def write_raw(self, data: bytes) -> None:
        self.port.write(data)
        self.port.flush()

    def request(self, cmd: int, payload: bytes = b"", timeout: float | None = None) -> Reply:
        """Send one frame and return its reply; an error status raises DeviceReplyError (DimError for dims)."""
        self.write_raw(frame(cmd, payload))
        r = self.read_reply(timeout)
        if r.cmd != cmd:
            raise RunError(f"the device answered command {r.cmd} to command {cmd}: {r.message}; restart it")
        if r.status:
            err = DeviceReplyError(r, STATUS.get(r.status, str(r.status)))
            if r.status == ST_SHAPE:
                raise DimError(str(err))
            raise err
        return r

    def read_reply(self, timeout: float | None = None) -> Reply:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            b = self._read(1, deadline)
            if b[0] != SYNC:
                continue
            head = self._read(4, deadline)
            cmd, status, n = struct.unpack("<BBH", head)
            rest = self._read(n + 4, deadline)
            payload, crc = rest[:n], struct.unpack("<I", rest[n:])[0]
            if zlib.crc32(head + payload) != crc:
                raise RunError("a reply from the device failed its CRC check; check the serial line and baud rate")
            return Reply(cmd, status, payload)

    def _read(self, n: int, deadline: float) -> bytes:
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunError("the device did not answer in time; check it is flashed with this package "
                               "and the serial port is right")
            self.port.timeout = min(left, 0.5)
            buf += self.port.read(n - len(buf))
        return buf
