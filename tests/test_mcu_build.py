"""Microcontroller packages: C-source kernels without vector or parallel code, the memory report checked
against the linked image, refusal of a package that does not fit, firmware for Cortex-M3, -M4F, -M7."""

from __future__ import annotations

import json
import re
import struct
import subprocess

import pytest
from conftest import have

from edgepack.board import load_board, load_board_file
from edgepack.errors import BoardError, BuildError
from edgepack.examples import EXAMPLES
from edgepack.mcu.config import mcu_config
from edgepack.pipeline import build_package, schedules_for

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have("arm-none-eabi-gcc"), reason="needs gcc-arm-none-eabi")]
MLP = EXAMPLES["mlp"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("mcu_build"), {}

    def get(board: str):
        if board not in cache:
            cache[board] = build_package(MLP.path, board, dict(MLP.dims), root / board, name="mlp").bundle
        return cache[board]

    return get


def _size(elf) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}


def _attributes(elf) -> str:
    return subprocess.run(["arm-none-eabi-readelf", "-A", str(elf)], capture_output=True, text=True, check=True).stdout


def _vectors(bundle) -> tuple[int, int]:
    """Initial stack pointer and reset handler: the first two words of the image at the flash origin."""
    return struct.unpack("<II", (bundle.path / "firmware.bin").read_bytes()[:8])


def test_kernels_are_c_source_without_vector_or_parallel_code(built):
    board = load_board("mps2-an386")
    s = schedules_for(board)
    assert not s.vectorize and not s.parallel and s.cores == 1
    assert schedules_for(load_board("host")).vectorize  # the host keeps its vectorized LLVM kernels
    b = built("mps2-an386")
    src = (b.path / "kernels" / "kernels.c").read_text()
    assert "__tvm_ffi_" in src
    assert not re.search(r"float[0-9]+\b|TVMBackendParallelLaunch", src)  # target "c" cannot vectorize
    assert "malloc" not in src


def test_memory_report_matches_the_linked_image(built):
    b = built("mps2-an386")
    mem = json.loads((b.path / "memory.json").read_text())
    size = _size(b.path / "firmware.elf")
    assert mem["flash_used"] == size["text"] + size["data"] == sum(mem["flash"].values())
    assert mem["ram_used"] == size["data"] + size["bss"] == sum(mem["ram"].values())
    assert mem["ram"]["arena"] == b.manifest["memory"]["arena_bytes"]
    assert mem["flash"]["weights"] >= b.manifest["memory"]["weights_bytes"]
    assert mem["ram"]["stack"] == mcu_config(load_board("mps2-an386")).stack_bytes
    assert 0 < mem["runtime_text"] < 8192 and mem["flash"]["kernels"] > 0
    assert b.manifest["memory"]["mcu"] == mem
    assert "runtime core .text" in (b.path / "memory.txt").read_text()


@pytest.mark.parametrize("board, arch, fpu", [("mps2-an385", "7-M", None), ("mps2-an386", "7E-M", "VFPv4-D16"),
                                              ("nucleo-f746zg", "7E-M", "FPv5/FP-D16"),
                                              ("stm32f4-discovery", "7E-M", "VFPv4-D16"),
                                              ("nrf52840-dk", "7E-M", "VFPv4-D16")])
def test_firmware_for_each_cortex_m(built, board, arch, fpu):
    """Cortex-M3 (ARMv7-M, soft float), M4F and M7F (ARMv7E-M, hard float in FPU registers)."""
    b = built(board)
    cfg = mcu_config(load_board(board))
    assert f'Tag_CPU_name: "{arch}"' in _attributes(b.path / "kernels" / "kernels.o")
    attrs = _attributes(b.path / "firmware.elf")
    if fpu:
        assert fpu in attrs and "VFP registers" in attrs
    else:
        assert "Tag_FP_arch" not in attrs
    sp, reset = _vectors(b)
    assert sp == cfg.ram_origin + json.loads((b.path / "memory.json").read_text())["ram_used"]
    assert reset & 1 and cfg.flash_origin < reset < cfg.flash_origin + cfg.flash_bytes  # Thumb, in flash
    assert b.manifest["firmware"]["id"] in (b.path / "firmware" / "ep_fw_config.h").read_text()
    assert f"EP_FW_UART_{cfg.uart['kind'].upper()} 1" in (b.path / "firmware" / "ep_fw_config.h").read_text()


def test_package_that_does_not_fit_is_refused_with_the_numbers(built, tmp_path):
    mem = built("mps2-an386").manifest["memory"]["mcu"]  # the same package where it fits
    text = load_board("mps2-an386").path.read_text().replace("ram_bytes = 0x400000", "ram_bytes = 0xC000")
    (tmp_path / "mps2-an386.toml").write_text(text)
    small = load_board_file(tmp_path / "mps2-an386.toml")
    out = tmp_path / "pkg"
    with pytest.raises(BuildError) as e:
        build_package(MLP.path, small, dict(MLP.dims), out, name="mlp")
    msg = str(e.value)
    assert "does not fit" in msg and f"RAM {mem['ram_used']:,} of 49,152 B" in msg
    assert f"arena {mem['ram']['arena']:,}" in msg and f"flash {mem['flash_used']:,} of" in msg
    assert "--dim" in msg and not out.exists() and not list(tmp_path.glob(".pkg*"))


def test_bad_mcu_board_file_names_the_key(tmp_path):
    text = load_board("mps2-an386").path.read_text().replace('kind = "cmsdk"', 'kind = "usb"')
    (tmp_path / "x.toml").write_text(text.replace('name = "mps2-an386"', 'name = "x"'))
    with pytest.raises(BoardError, match="uart.kind"):
        mcu_config(load_board_file(tmp_path / "x.toml"))


def test_c_boards_have_a_c_target():
    t = load_board("mps2-an386").tvm_target()
    assert t.kind.name == "c"
    host = load_board("host").tvm_target()
    assert host.kind.name == "llvm" and host.attrs["num-cores"] >= 1


def test_tuner_hands_mcu_measurers_plain_c_candidates(tmp_path):
    """On a board without a POSIX loader the tuner passes PrimFuncs (the measurer builds a firmware image per
    batch), scheduled as the package compiles them: no vectorized or parallel loops."""
    import tvm

    from edgepack.tune.measure import MeasureResult
    from edgepack.tune.tuner import TuneOptions, tune_model

    seen = []

    class Recorder:  # stands in for McuMeasurer: records what it is given, times by the work done
        def measure_batch(self, inputs):
            seen.extend(inputs)
            return [MeasureResult(1e-6 * (1 + k), [1e-6 * (1 + k)]) for k in range(len(inputs))]

    opts = TuneOptions(trials=4, samples="2", max_kernels=1, batch=4, progress=False)
    rep = tune_model(MLP.path, load_board("mps2-an386"), dict(MLP.dims), tmp_path / "t.db", Recorder(), opts)
    assert rep.measured == len(seen) > 0 and rep.failed == 0
    for inp in seen:
        assert isinstance(inp.kernel, tvm.tirx.PrimFunc), type(inp.kernel)
        assert inp.kernel.attrs["global_symbol"] == inp.func_name
        script = inp.kernel.script()
        assert "T.vectorized" not in script and "T.parallel" not in script, inp.func_name
