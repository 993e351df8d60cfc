"""Errors a user can act on, and the one-line forms of what failed underneath. The CLI catches EdgepackError
once: one line, exit code 2."""


class EdgepackError(Exception):
    """A problem with the user's input or environment; the message names the fix."""


class ModelError(EdgepackError):
    """The ONNX model cannot be read or imported."""


class DimError(EdgepackError):
    """A dynamic dimension has no range, a bad range, or a value outside its range."""


class UnsupportedOpsError(ModelError):
    """The model uses operators edgepack cannot compile."""


class BoardError(EdgepackError):
    """A board file is missing or malformed."""


class BuildError(EdgepackError):
    """Compiling or linking a package failed."""


class RunError(EdgepackError):
    """Running a built package failed or was given bad inputs."""


class OutputPathError(EdgepackError):
    """An output path edgepack cannot write, or must not overwrite (a file or folder that is the user's)."""


class DeviceError(RunError):
    """The board cannot be reached, refuses us, or failed while we used it."""


class DeviceReplyError(DeviceError):
    """The device answered a request with an error status."""

    def __init__(self, reply, status_name: str):
        self.reply = reply  # the protocol's Reply (edgepack/mcu/protocol.py)
        super().__init__(f"the device answered '{status_name}': {reply.message}")


class RPCUnavailableError(EdgepackError):
    """No RPC server (or tracker) answered within the wait. `results` holds what the batch measured before
    (None for the inputs never measured)."""

    def __init__(self, message: str, results: list | None = None):
        super().__init__(message)
        self.results = results if results is not None else []


class CompareError(EdgepackError):
    """Two runs that cannot be compared."""


class SchemaError(EdgepackError):
    """A bench result file that this edgepack cannot read."""


class BenchError(EdgepackError):
    """The bench command was asked for something it cannot measure."""


def one_line(e: BaseException) -> str:
    """An exception's message on one line: TVM puts its message after a traceback (kept: the last line),
    and remote errors after "Error caught from RPC call:" (kept: the lines after it, joined)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("Traceback"):
        msg = lines[-1]
    elif lines[0].endswith("Error caught from RPC call:") and len(lines) > 1:
        msg = " ".join(lines[1:])
    else:
        msg = lines[0]
    name = type(e).__name__
    if not msg.startswith(name) and ":" not in msg.split(" ", 1)[0]:
        msg = f"{name}: {msg}"
    return msg[:300]


def last_line(output: str, default: str) -> str:
    """The last non-empty line of some output (the device programs and TVM put what failed there)."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else default)[:300]


def error_line(output: str, default: str) -> str:
    """The line of a compiler's or make's output that says what failed: the first that mentions an error, else
    the last."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and "Waiting for unfinished jobs" not in ln]
    return next((ln for ln in lines if "error" in ln.lower() or "***" in ln), lines[-1] if lines else default)[:300]
