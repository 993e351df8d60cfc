"""A tuning trial end to end: configurations from the space, built as main variants, measured on a real
TVM RPC server on loopback; the cost model learns from the results."""

from __future__ import annotations

import pytest

from edgepack.board import load_board
from edgepack.examples import EXAMPLES
from edgepack.pipeline import lower_model, prepare
from edgepack.schedule.variants import find_row_split, matmul_block
from edgepack.tune.cost_model import CostModel, Observation
from edgepack.tune.farm import LocalRPC
from edgepack.tune.rpc_measurer import RPCMeasurer
from edgepack.tune.space import DenseTask, Hardware, best_fit_rows, candidates
from edgepack.tune.trial import main_variant_input

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def dense():
    ex = EXAMPLES["encoder"]
    model, dims = prepare(ex.path, dict(ex.dims))
    lowered = lower_model("encoder", model, dims)
    return next((f, find_row_split(f), matmul_block(f)) for f in lowered.kernels.values()
                if find_row_split(f) and matmul_block(f))


def test_trials_measured_on_the_board_feed_the_cost_model(dense):
    func, split, block = dense
    board = load_board("host")
    hw = Hardware(lanes=board.vector_lanes_f32, registers=16, cores=board.target.cores)
    task = DenseTask("qkv", n=64, k=64, lo=1, hi=256)
    space = candidates(task, hw)
    picks = [space[0], space[len(space) // 2], space[-1]]
    inputs = [main_variant_input(func, split, block, t, best_fit_rows(task, t, hw.cores)) for t in picks]
    with LocalRPC(key="host", servers=1) as farm, RPCMeasurer.local(board, farm) as m:
        results = m.measure_batch(inputs)
    assert all(r.ok and r.median_s > 0 for r in results), [r.error for r in results]
    model = CostModel(hw, min_observations=1)
    model.observe([Observation(task, t, best_fit_rows(task, t, hw.cores), r.median_s) for t, r in zip(picks, results)])
    model.fit()
    assert model.predict_latency(task, picks, 64).shape == (3,)
