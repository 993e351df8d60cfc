"""The dense micro-kernel space: built from hardware limits, every configuration schedules without a
bounds-check predicate on a real kernel, and the analytic adaptation behaves as docs/tuning.md#cost-model defines it."""

from __future__ import annotations

import pytest

from edgepack.examples import EXAMPLES
from edgepack.pipeline import lower_model, prepare
from edgepack.schedule.dense import DenseTiles, schedule_dense
from edgepack.schedule.variants import find_row_split, matmul_block, specialize_rows
from edgepack.tune.space import DenseTask, Hardware, adaptation, best_fit_rows, candidates, features

pytestmark = pytest.mark.unit

AVX2 = Hardware(lanes=8, registers=16, cores=2)


def test_space_respects_hardware_limits():
    task = DenseTask("qkv", n=64, k=64, lo=1, hi=256)
    space = candidates(task, AVX2)
    default = DenseTiles.for_width(task.n, AVX2.lanes, AVX2.registers)
    assert len(space) >= 20
    for t in space:
        assert task.n % t.cols == 0 and t.cols % AVX2.lanes == 0
        assert t.rows * (t.cols // AVX2.lanes) <= AVX2.registers - 2
        assert task.k % t.unroll_k == 0
    assert len(set(space)) == len(space)
    small = [t for t in space if t.par_cols]
    assert small and all(t.rows <= 4 for t in small if t != default)  # the GEMV-like family: small M only
    serial = [t for t in space if t.serial]  # one thread (the thread count per shape): small M only too
    assert serial and all(t.rows <= 4 for t in serial) and {t.par_cols for t in serial} == {False, True}
    assert not any(t.serial for t in candidates(task, Hardware(lanes=8, registers=16, cores=1)))
    assert default in space and default.rows == 4  # the untuned default is a candidate: tuning cannot lose to it


def test_small_range_caps_row_tiles():
    space = candidates(DenseTask("gemv", n=64, k=64, lo=1, hi=3), AVX2)
    assert {t.rows for t in space} == {1, 2}  # 4 > 1.1 * 3


def test_adaptation():
    task = DenseTask("d", n=64, k=64, lo=1, hi=256)
    t8 = DenseTiles(rows=8, cols=16)
    assert adaptation(task, t8, 64, cores=2) == 1.0
    assert adaptation(task, t8, 60, cores=2) == pytest.approx(60 / 64)
    assert adaptation(task, t8, 24, cores=2) == pytest.approx(3 / 4)  # 3 row tiles on 2 cores
    assert adaptation(task, t8, 24, cores=1) == 1.0
    assert best_fit_rows(task, t8, cores=2) == 256
    assert features(task, t8, AVX2).shape == (12,)
    # small-M family: at M = 1 row tiles alone leave a core idle; row x column tiles fill both
    t1, t1c = DenseTiles(rows=1, cols=16), DenseTiles(rows=1, cols=16, par_cols=True)
    assert adaptation(task, t1, 1, cores=2) == pytest.approx(0.5)
    assert adaptation(task, t1c, 1, cores=2) == 1.0
    assert adaptation(task, DenseTiles(rows=1, cols=16, serial=True), 1, cores=2) == 1.0  # one core, fully used


@pytest.fixture(scope="module")
def dense_kernel():
    ex = EXAMPLES["encoder"]
    model, dims = prepare(ex.path, dict(ex.dims))
    lowered = lower_model("encoder", model, dims)
    name, func = next((k, f) for k, f in lowered.kernels.items() if find_row_split(f) and matmul_block(f))
    return func, find_row_split(func), matmul_block(func)


def test_every_candidate_schedules_predicate_free(dense_kernel):
    func, split, block = dense_kernel
    task = DenseTask("d", n=64, k=64, lo=1, hi=256)
    for tiles in candidates(task, AVX2):
        main = schedule_dense(specialize_rows(func, split, tiles.rows), block, tiles, parallel=True)
        text = main.script()
        assert "T.where" not in text and "T.vectorized" in text, tiles


def test_conv_space_and_adaptation():
    from edgepack.schedule.conv import ConvTiles
    from edgepack.tune.space import ConvTask

    task = ConvTask("c", f=8, h=16, w=16, c=3, kh=3, kw=3, lo=1, hi=16)
    space = candidates(task, AVX2)
    assert space and len(set(space)) == len(space)
    for t in space:
        assert task.f % t.oc == 0 and task.h % t.oh == 0 and task.w % t.ow == 0
        assert t.oc * t.oh * -(-t.ow // AVX2.lanes) <= AVX2.registers - 2
    t = ConvTiles(oc=8, oh=16, ow=16)  # one tile per image: at batch 1 a core would idle
    assert adaptation(task, t, 1, cores=2) == pytest.approx(0.5)
    assert adaptation(task, t, 2, cores=2) == 1.0  # whole images: no padding, ever
    assert features(task, ConvTiles(2, 4, 8), AVX2).shape == (12,)


def test_pointwise_space_has_channel_vectors_and_the_int8_dot():
    """Pointwise kernels also get the channel-vector form (packed weights), int8 ones the dot instruction where
    the board has one; the board's default is in the space."""
    from dataclasses import replace

    from edgepack.schedule.conv import ConvTiles
    from edgepack.tune.space import ConvTask

    task = ConvTask("pw", f=64, h=25, w=5, c=64, kh=1, kw=1, lo=1, hi=8, flat=True, integer=True)
    hw = replace(AVX2, packed=True, int8_dot="avx2")
    space = candidates(task, hw)
    cvec = [t for t in space if t.cvec]
    assert cvec and all(t.oc % hw.lanes == 0 and 125 % t.ow == 0 and t.ow * t.oc // hw.lanes <= 14 for t in cvec)
    assert {t.dot for t in cvec} == {"", "avx2"}
    assert ConvTiles.default(task.extents, hw.lanes, hw.registers, True, "avx2") in space
    assert not any(t.dot for t in candidates(replace(task, integer=False), hw))  # float: no int8 dot
    assert not any(t.cvec for t in candidates(task, AVX2))  # weights not packed (C boards): no channel vectors
    neon = Hardware(lanes=4, registers=32, cores=4, packed=True, int8_dot="sdot")  # a Cortex-A76
    assert {t.dot for t in candidates(task, neon) if t.cvec and t.oc % 8 == 0} == {"", "sdot"}
    a72 = replace(neon, int8_dot="smull")  # the Pi 4: SMULL + SADALP
    assert {t.dot for t in candidates(task, a72) if t.cvec and t.oc % 8 == 0} == {"", "smull"}
    assert adaptation(task, ConvTiles(16, 1, 5, cvec=True), 1, cores=2) == 1.0  # 25 x 4 work items


def test_int8_pointwise_space_on_512_bit_vectors_takes_the_256_bit_dot_where_16_channels_do_not_divide():
    """AVX-512 with VNNI: 64 channels on vpdpwssd's 512-bit form (16 channels an instruction), the kws net's 24
    on its 256-bit form, as 8-channel vectors; the default follows."""
    from edgepack.schedule.conv import ConvTiles
    from edgepack.tune.space import ConvTask

    hw = Hardware(lanes=16, registers=32, cores=2, packed=True, int8_dot="avx512vnni")
    wide = ConvTask("pw", f=64, h=25, w=5, c=64, kh=1, kw=1, lo=1, hi=8, flat=True, integer=True)
    assert {t.dot for t in candidates(wide, hw) if t.cvec and t.oc % 16 == 0} == {"", "avx512vnni"}
    narrow = ConvTask("pw", f=24, h=6, w=5, c=16, kh=1, kw=1, lo=1, hi=8, flat=True, integer=True)
    dots = {(t.oc, t.dot) for t in candidates(narrow, hw) if t.cvec}
    assert dots == {(8, ""), (8, "vnni")}
    default = ConvTiles.default(narrow.extents, hw.lanes, hw.registers, True, hw.int8_dot)
    assert default.cvec and (default.oc, default.dot) == (8, "vnni")
    assert ConvTiles.default(wide.extents, hw.lanes, hw.registers, True, hw.int8_dot).dot == "avx512vnni"


def test_scalar_pointwise_space_has_the_dsp_dot():
    """On a Cortex-M with the DSP extension (C kernels, one lane), int8 pointwise tiles of whole 4-channel
    calls come in both forms, SMLAD's and the multiply-add's; float kernels and other convs never get it."""
    from dataclasses import replace

    from edgepack.schedule.conv import ConvTiles
    from edgepack.tune.space import ConvTask

    m4 = Hardware(lanes=1, registers=16, cores=1, int8_dot="dsp")
    task = ConvTask("pw", f=64, h=25, w=5, c=64, kh=1, kw=1, lo=1, hi=2, flat=True, integer=True)
    space = candidates(task, m4)
    dsp = [t for t in space if t.dot == "dsp"]
    assert dsp and all(t.oc % 4 == 0 and not t.cvec for t in dsp)
    assert {replace(t, dot="") for t in dsp} == {t for t in space if not t.dot and t.oc % 4 == 0}
    assert ConvTiles.default(task.extents, 1, 16, False, "dsp").dot == "dsp"
    assert not any(t.dot for t in candidates(replace(task, integer=False), m4))
    assert not any(t.dot for t in candidates(replace(task, c=18), m4))  # no whole words of weights
    depthwise = ConvTask("dw", f=64, h=25, w=5, c=1, kh=3, kw=3, lo=1, hi=2, own=True, integer=True)
    assert not any(t.dot for t in candidates(depthwise, m4))


def test_conv_micro_kernels_schedule_predicate_free():
    from edgepack.schedule.conv import conv_block, schedule_conv
    from edgepack.tune.space import ConvTask

    ex = EXAMPLES["cnn"]
    model, dims = prepare(ex.path, dict(ex.dims))
    lowered = lower_model("cnn", model, dims)
    func = next(f for f in lowered.kernels.values() if conv_block(f))
    task = ConvTask("c", f=8, h=16, w=16, c=3, kh=3, kw=3, lo=1, hi=16)
    for tiles in candidates(task, AVX2):
        text = schedule_conv(func, conv_block(func), tiles, parallel=True).script()
        assert "T.where" not in text and "T.vectorized" in text and "T.parallel" in text, tiles
