"""Tuning on a microcontroller (the measurer behind `edgepack tune --board mps2-an386`): a batch of candidate
dense kernels goes into one firmware image, flashed once, and each candidate is timed on the mps2-an386
stand-in. The whole command is tested in test_hil_mcu.py."""

from __future__ import annotations

import pytest
from conftest import have

from edgepack import standin
from edgepack.board import load_board
from edgepack.examples import EXAMPLES
from edgepack.schedule.dense import DenseTiles
from edgepack.tune.measure import MeasureInput

pytestmark = [pytest.mark.hil, pytest.mark.skipif(not (have("arm-none-eabi-gcc") and have("qemu-system-arm")),
                                                  reason="needs gcc-arm-none-eabi and qemu-system-arm")]


@pytest.fixture(scope="module")
def dense_task():
    from edgepack.pipeline import lower_model, prepare
    from edgepack.tune.tasks import extract_tasks

    ex = EXAMPLES["mlp"]
    model, dims = prepare(ex.path, dict(ex.dims))
    return extract_tasks(lower_model("mlp", model, dims), dims)[1]  # 64 x 64 dense, rows = batch


@pytest.fixture
def board(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPACK_STATE_DIR", str(tmp_path / "standins"))
    b = load_board("mps2-an386")
    yield b
    standin.down(b)


def test_a_batch_of_candidates_is_one_image_timed_on_the_device(dense_task, board, tmp_path):
    from edgepack.tune.mcu_trials import McuMeasurer
    from edgepack.tune.trial import main_variant_input

    t = dense_task
    tiles = [DenseTiles(1, 4), DenseTiles(4, 4), DenseTiles(8, 8), DenseTiles(4, 16)]
    inputs = [main_variant_input(t.func, t.split, t.block, x, 32, parallel=False) for x in tiles]
    huge = MeasureInput(inputs[0].kernel, "too_big", [([1 << 22], "float32")] + list(inputs[0].args_spec[1:]))
    m = McuMeasurer(board, workdir=tmp_path / "trials")
    results = m.measure_batch(inputs + [huge])
    assert m.images_flashed == 1
    for x, r in zip(tiles, results[:-1]):
        assert r.ok and r.median_s > 0, (x, r.error)
        assert max(r.samples_s) <= 1.01 * min(r.samples_s)  # -icount: repeatable
        assert len(r.samples_s) == board.timing.repeat
    assert not results[-1].ok and "RAM" in results[-1].error
    assert len({round(r.median_s, 9) for r in results[:-1]}) > 1  # the tiles really differ on the device


def test_batches_larger_than_an_image_take_several_flashes(dense_task, board, tmp_path):
    from edgepack.tune.mcu_trials import McuMeasurer
    from edgepack.tune.trial import main_variant_input

    t = dense_task
    inputs = [main_variant_input(t.func, t.split, t.block, DenseTiles(r, 4), 8, parallel=False) for r in (1, 2, 4)]
    m = McuMeasurer(board, workdir=tmp_path / "trials", per_image=2)
    seen = []
    results = m.measure_batch(inputs, on_result=lambda i, r: seen.append(i))
    assert m.images_flashed == 2 and sorted(seen) == [0, 1, 2] and all(r.ok for r in results)
