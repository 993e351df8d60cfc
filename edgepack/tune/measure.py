"""What the shape-generic tuner asks of on-device measurement (docs/tuning.md#measurers: "Measure on the
board, repeated timed runs, median"), whatever the transport:

- `Measurer`: the protocol. Two implement it, side by side: `tune.rpc_measurer.RPCMeasurer` (Linux boards and
  this machine, through TVM RPC) and `tune.mcu_trials.McuMeasurer` (microcontrollers, a firmware image per
  batch, timed through the serial protocol).
- `MeasureInput` / `MeasureResult`: one kernel run and its outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ArgSpec = tuple[Sequence[int], str] | int


@dataclass(frozen=True)
class MeasureInput:
    """One kernel run: `kernel` is a shared object (path) built by `tune.export.export_kernel`, a built runtime
    Module, or a PrimFunc / IRModule that the measurer builds. `args_spec` has one entry per parameter:
    (shape, dtype) for a buffer (a random tensor made on the device) or an int for an int64 scalar."""

    kernel: Any
    func_name: str
    args_spec: Sequence[ArgSpec]


@dataclass(frozen=True)
class MeasureResult:
    """`median_s` is None exactly when `error` is set (as in tune/db.py). `samples_s` has one mean per
    repeat. `server` is "host:port" of the server that ran it, `attempts` the sessions it took (> 1 when a
    server disappeared mid-run)."""

    median_s: float | None
    samples_s: list[float] = field(default_factory=list)
    error: str | None = None
    server: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class Measurer(Protocol):
    """What the tuner asks of a measurer: every input measured, results in input order, a failed candidate
    as a result with `error` set (never an exception). `on_result(index, result)` as each result lands.
    Measurers are context managers; `close()` removes what they built."""

    def measure_batch(self, inputs: Sequence[MeasureInput],
                      on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]: ...

    def close(self) -> None: ...

