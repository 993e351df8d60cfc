"""Both measurers, the RPC one and the microcontroller one, are `Measurer`s: the tuner takes either."""

from __future__ import annotations

import inspect

import pytest

from edgepack.tune.mcu_trials import McuMeasurer
from edgepack.tune.measure import Measurer
from edgepack.tune.rpc_measurer import RPCMeasurer

pytestmark = pytest.mark.unit


def test_both_measurers_implement_the_protocol():
    for cls in (RPCMeasurer, McuMeasurer):
        assert issubclass(cls, Measurer), cls
        params = list(inspect.signature(cls.measure_batch).parameters)
        assert params[:3] == ["self", "inputs", "on_result"], (cls, params)
        assert hasattr(cls, "__enter__") and hasattr(cls, "__exit__")
