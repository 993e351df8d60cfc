"""Loopback networking shared by the stand-ins and the RPC farm."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's choice for a bind to port 0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
