"""Argument types shared by the commands: a bad value is refused by argparse, as one line (cli.Parser)."""

from __future__ import annotations

import argparse

MAX_THREADS = 1024  # more worker threads than any board has cores is a typo


def int_range(lo: int, hi: int | None = None):
    """An argparse `type`: a whole number in lo..hi (hi None: no upper bound)."""
    span = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"'{s}' is not a whole number {span}")
        return v

    parse.__name__ = "int"  # argparse names the type in some messages
    return parse


threads = int_range(1, MAX_THREADS)
count = int_range(1)  # repeats, trials, rounds: zero would measure nothing
non_negative = int_range(0)
port = int_range(1, 65535)
