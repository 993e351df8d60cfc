"""Small TIR helpers for what TVM 0.27's Python API does not expose."""

from __future__ import annotations


def region_tensor(region) -> str:
    """The name of the buffer a block's read or write region is on (0.27's TensorRegion has no `.buffer`)."""
    return region.script().split("[")[0]
