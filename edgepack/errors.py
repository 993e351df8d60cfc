"""Errors a user can act on. The CLI catches EdgepackError once: one line, exit code 2."""


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
