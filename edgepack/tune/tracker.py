"""Client of TVM's RPC tracker, speaking its protocol directly: [int32 length][json] messages after a 4-byte
magic handshake (`tvm.rpc.base`'s constants, repeated here so that no `import tvm` is needed: seconds).

Why not `tvm.rpc.connect_tracker`: it retries a refused connection for 60 s in 5 s steps, and the tracker's
REQUEST blocks until a server is free, forever (docs/tvm-facts.md#rpc-traps). The measurer (tune/rpc_measurer.py)
polls and waits on its own terms instead.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

MAGIC = 0x2F271
SUCCESS = 0
REQUEST = 4
SUMMARY = 6


class TrackerConn:
    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock.sendall(struct.pack("<i", MAGIC))
            if struct.unpack("<i", self._recv(4))[0] != MAGIC:
                raise ConnectionError(f"{host}:{port} is not a TVM RPC tracker")
        except BaseException:
            self.sock.close()
            raise

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("RPC tracker closed the connection")
            buf += chunk
        return buf

    def send(self, msg: list) -> None:
        data = json.dumps(msg).encode()
        self.sock.sendall(struct.pack("<i", len(data)) + data)

    def recv(self) -> Any:
        n = struct.unpack("<i", self._recv(4))[0]
        return json.loads(self._recv(n).decode())

    def summary(self) -> dict:
        self.send([SUMMARY])
        code, value = self.recv()
        if code != SUCCESS:
            raise ConnectionError(f"RPC tracker summary failed: {value!r}")
        return value

    def close(self) -> None:
        self.sock.close()

    def request(self, key: str, priority: int) -> None:
        """Ask for a free server under `key`; the reply (`reply()`) comes once one is free."""
        self.send([REQUEST, key, "", priority])

    def reply(self) -> tuple[str, int, str]:
        """The tracker's answer to `request`: the server's (host, port, match key)."""
        code, value = self.recv()
        if code != SUCCESS:
            raise ConnectionError(f"tracker refused the request: {value!r}")
        host, port, matchkey = value
        return str(host), int(port), str(matchkey)


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> dict:
    """The tracker's summary: {"queue_info": {key: {"free", "pending"}}, "server_info": [{"key": "server:K",
    "addr": [host, port]}, ...]}. Raises OSError when the tracker does not answer."""
    conn = TrackerConn(host, port, timeout)
    try:
        return conn.summary()
    finally:
        conn.close()


def registered_servers(summary: dict, key: str) -> list[tuple[str, int]]:
    """Addresses of the servers registered under `key` (busy ones included)."""
    return [(str(s["addr"][0]), int(s["addr"][1])) for s in summary.get("server_info", [])
            if s.get("key") == f"server:{key}"]

