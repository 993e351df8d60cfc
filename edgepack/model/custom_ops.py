"""edgepack's own ONNX converters (model/converters.py, model/recurrent.py, model/quant.py), added to TVM's Relax ONNX
frontend while a model is imported. TVM's files stay as they are: the frontend looks its converter map up
through the module function `_get_convert_map` on every use, which `registered()` wraps."""

from __future__ import annotations

import contextlib

from tvm.relax.frontend.onnx import onnx_frontend as frontend

from . import quant
from .converters import CumSum, TopK
from .recurrent import GRU, LSTM


@contextlib.contextmanager
def registered():
    """The frontend's converter map with edgepack's converters, for the duration of an import."""
    base = frontend._get_convert_map
    frontend._get_convert_map = lambda: {**base(), **_converters()}
    try:
        yield
    finally:
        frontend._get_convert_map = base


def _converters() -> dict:
    return {"CumSum": CumSum, "TopK": TopK, "LSTM": LSTM, "GRU": GRU, **quant.converters()}
