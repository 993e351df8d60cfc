"""Hardware-in-the-loop on microcontrollers: flash a package's firmware, run it at several dynamic sizes
against onnxruntime, bench it, and check every protocol error is answered with the device still usable.

Default: the mps2-an386 stand-in (QEMU, Cortex-M4F), plus one model on mps2-an385 (Cortex-M3). A real board:
`pytest -m hil --board nucleo-f746zg --board-serial /dev/ttyACM0` (its flasher must be installed)."""

from __future__ import annotations

import json
import os
import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import EXPORT_DIMS, EXPORTS, have, run_cli, sizes_for
from test_examples_e2e import _token_inputs
from test_pool_kernels import _pool_net
from test_quant_import import kws_lsb_error, kws_pointwise_kernel, quantize_kws

from edgepack import standin
from edgepack.board import Connection, load_board
from edgepack.check import max_rel_error, random_inputs
from edgepack.deploy.device import BenchSettings, open_device
from edgepack.errors import DimError, RunError
from edgepack.examples import EXAMPLES
from edgepack.mcu import protocol as P

pytestmark = [pytest.mark.hil, pytest.mark.skipif(not (have("arm-none-eabi-gcc") and have("qemu-system-arm")),
                                                  reason="needs gcc-arm-none-eabi and qemu-system-arm")]
TOL = 1e-4


def _mcu_board_name(config) -> str | None:
    named = config.getoption("--board")
    mcus = [b for b in named if load_board(b).transport_kind == "serial"]
    return mcus[0] if mcus else (None if named else "mps2-an386")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """Stand-ins of this module live in a private state directory (never the user's running ones)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEPACK_STATE_DIR", str(tmp_path_factory.mktemp("standins")))
        yield


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    from edgepack.pipeline import build_package

    root, cache = tmp_path_factory.mktemp("mcu_bundles"), {}

    def get(model: str, board: str, dims: dict | None = None):
        if (model, board) not in cache:
            path, ranges = (EXAMPLES[model].path, dict(EXAMPLES[model].dims)) if model in EXAMPLES else \
                (EXPORTS / f"{model}.onnx", EXPORT_DIMS[model])
            cache[model, board] = build_package(path, board, dims or ranges, root / f"{model}_{board}",
                                                name=model).bundle
        return cache[model, board]

    return get


@pytest.fixture(scope="module")
def board(request):
    name = _mcu_board_name(request.config)
    if name is None:
        pytest.skip("no microcontroller board among --board")
    return load_board(name)


@pytest.fixture(scope="module")
def device(board, state_dir, request):
    serial = request.config.getoption("--board-serial")
    dev = open_device(board, Connection(serial=serial) if serial and not board.section("standin") else Connection())
    yield dev
    dev.close()
    if board.section("standin"):
        standin.down(board)


def _disassembly(elf: Path, board) -> str:
    import subprocess

    objdump = board.toolchain.cc.removesuffix("gcc") + "objdump"
    return subprocess.run([objdump, "-d", str(elf)], capture_output=True, text=True, check=True).stdout


def _flashed(dev, bundle):
    if dev.info is None or dev.info.fields.get("id") != bundle.manifest["firmware"]["id"]:
        dev.install(bundle)
    return dev


def _check(dev, bundle, model: str | Path, sizes: list[dict], tmp_path, inputs_fn=random_inputs) -> float:
    """Outputs of `model` (an example's or export's name, or a path) on the device against onnxruntime."""
    import onnxruntime as ort

    path = model if isinstance(model, Path) else EXAMPLES[model].path if model in EXAMPLES else EXPORTS / f"{model}.onnx"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as edgepack.check does
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    worst = 0.0
    for k, dims in enumerate(sizes):
        arrays = inputs_fn(bundle.manifest, dims, seed=k)
        refs = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], arrays)))
        outs = [np.load(o) for o in dev.run(bundle, arrays, tmp_path / f"out{k}")]
        assert [o.shape for o in outs] == [r.shape for r in refs], (model, dims)
        err = max(max_rel_error(o, r) for o, r in zip(outs, refs))
        assert err < TOL, f"{model} on {dev.board.name} at {dims}: max relative error {err:.2e}"
        worst = max(worst, err)
    return worst


def test_flash_checks_the_firmware_is_the_package(device, build, board):
    bundle = build("mlp", board.name)
    where = device.install(bundle)
    assert board.name in where and device.info.fields["package"] == "mlp"
    assert device.info.fields["id"] == bundle.manifest["firmware"]["id"]
    assert device.info.dims == [("batch", 1, 64)]
    if board.section("standin"):  # the stand-in stays up as the board, reachable without an address
        assert standin.saved_connection(board).serial == device.conn.serial


def test_run_matches_onnxruntime_at_several_sizes(device, build, board, tmp_path):
    bundle = build("mlp", board.name)
    _check(_flashed(device, bundle), bundle, "mlp", [{"batch": n} for n in sizes_for(1, 64)], tmp_path)


def test_bench_counts_device_ticks(device, build, board):
    bundle = build("mlp", board.name)
    _flashed(device, bundle)
    med = {}
    for n in (1, 8, 64):
        r = device.bench(bundle, {"batch": n}, BenchSettings(warmup=1, repeat=5))
        assert r.unit == "ticks" and len(r.samples_ns) == 5 and min(r.samples_ns) > 0
        assert max(r.samples_ns) <= 1.01 * min(r.samples_ns), r.samples_ns  # -icount: repeatable
        med[n] = sorted(r.samples_ns)[2]
    assert med[1] < med[8] < med[64], med
    many = device.bench(bundle, {"batch": 2}, BenchSettings(warmup=0, repeat=200))  # more than one frame holds
    assert len(many.samples_ns) == 200
    with pytest.raises(RunError, match="--profile is not available on board .* run the bench without --profile"):
        device.bench(bundle, {"batch": 2}, BenchSettings(profile=True))  # refused, not silently ignored


def _raw(dev, data: bytes, quiet_s: float = 0.0) -> P.Reply:
    dev.link.write_raw(data)
    if quiet_s:
        time.sleep(quiet_s)
    return dev.link.read_reply(timeout=30)


def test_protocol_errors_are_answered_and_the_device_keeps_working(device, build, board, tmp_path):
    bundle = build("mlp", board.name)
    _flashed(device, bundle)
    good_run = P.frame(P.RUN, struct.pack("<q", 4))
    bad_crc = bytearray(good_run)
    bad_crc[-1] ^= 0xFF
    cases = {
        "bad CRC": (bytes(bad_crc), 1),
        "unknown command": (P.frame(0x77), 3),
        "dims out of range": (P.frame(P.RUN, struct.pack("<q", 65)), 6),
        "output before a good run": (P.frame(P.GET_OUTPUT, struct.pack("<B3xII", 0, 0, 40)), 8),
        "oversize input": (P.frame(P.SET_INPUT, struct.pack("<B3xI", 0, 64 * 32 * 4 - 8) + bytes(16)), 5),
        "bad input index": (P.frame(P.SET_INPUT, struct.pack("<B3xI", 9, 0) + bytes(4)), 4),
        "run with a missing dim": (P.frame(P.RUN, b""), 4),
        "frame longer than max_payload": (P.frame(P.SET_INPUT, bytes(2000)), 9),
    }
    for what, (data, status) in cases.items():
        r = _raw(device, data)
        assert r.status == status, f"{what}: answered {P.STATUS.get(r.status)} ({r.message})"
        assert r.message, what
    # a frame that stops half-way is answered once the line stays quiet
    r = _raw(device, P.frame(P.SET_INPUT, bytes(100))[:40], quiet_s=0.2)
    assert r.status == 2, r.message
    with pytest.raises(DimError, match="batch = 65 is outside"):
        device.link.request(P.RUN, struct.pack("<q", 65))
    with pytest.raises(DimError, match="batch = 0 is outside"):
        device.bench(bundle, {"batch": 0}, BenchSettings())
    _check(device, bundle, "mlp", [{"batch": 3}, {"batch": 64}], tmp_path)  # still works, same answers


def test_encoder_on_the_stand_in(device, build, board, tmp_path):
    if not board.section("standin"):
        pytest.skip("the encoder's 2.2 MB arena is for the 4 MB MPS2 stand-in")
    bundle = build("encoder", board.name, {"seq": (1, 64)})
    _flashed(device, build("mlp", board.name))
    with pytest.raises(RunError, match="is not package .* flash it"):  # the device runs another package
        device.run(bundle, random_inputs(bundle.manifest, {"seq": 2}), tmp_path / "never")
    _check(_flashed(device, bundle), bundle, "encoder", [{"seq": n} for n in (1, 8, 33)], tmp_path)


def _flat_model(path: Path) -> Path:
    """x[batch, seq, 8] -> MatMul, Relu -> Reshape to [batch*seq, 8]: an output extent that is an expression."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    flat = numpy_helper.from_array(np.array([-1, 8], np.int64), "flat")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Reshape", ["r", "flat"], ["y"])]
    graph = helper.make_graph(nodes, "flat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 8])], [w, flat])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), path)
    return path


def test_output_extent_that_is_an_expression(device, board, tmp_path):
    """The firmware sizes an output of shape [batch*seq, 8] with the package's output_shape() (its I/O
    descriptor holds no number for batch*seq)."""
    from edgepack.pipeline import build_package

    model = _flat_model(tmp_path / "flat.onnx")
    bundle = build_package(model, board.name, {"batch": (1, 4), "seq": (1, 8)}, tmp_path / "flat", name="flat").bundle
    assert bundle.manifest["outputs"][0]["shape"] == [["*", "ep_d0", "ep_d1"], 8]  # batch * seq, 8
    sizes = [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 5}, {"batch": 4, "seq": 8}]
    _check(_flashed(device, bundle), bundle, model, sizes, tmp_path)


def test_pytorch_export_with_int8_weights(device, build, board, tmp_path):
    """A TorchScript BERT export (token ids, mask, int8 weights) at its smallest and largest sizes: the upper
    bounds are where a short workspace bound shows."""
    if not board.section("standin"):
        pytest.skip("sized for the 4 MB MPS2 stand-in")
    bundle = build("bert_int8", board.name)
    _check(_flashed(device, bundle), bundle, "bert_int8", [{"batch": 1, "seq": 1}, {"batch": 4, "seq": 64}],
           tmp_path, inputs_fn=_token_inputs)


def test_quantised_cnn_on_the_stand_in(device, board, tmp_path):
    """onnxruntime's quantize_static output (QDQ, per-channel int8) as integer C kernels on the device: with
    the board's default tiles, and, where the core has the DSP extension, with the pointwise layer on
    8-channel SMLAD calls (the default takes 4 channels x 2 pixels there)."""
    from dataclasses import replace

    from edgepack.pipeline import build_package
    from edgepack.schedule.conv import ConvTiles
    from edgepack.schedule.defaults import schedules_for

    path = quantize_kws(tmp_path)
    variants = {"default": None}
    if board.int8_dot == "dsp":
        pw, _ = kws_pointwise_kernel(path, 3)
        variants["dsp8"] = replace(schedules_for(board), conv={pw: ConvTiles(8, 1, 1, dot="dsp")})
    for label, schedules in variants.items():
        bundle = build_package(path, board.name, {"batch": (1, 3)}, tmp_path / label, name="kws",
                               schedules=schedules).bundle
        if board.int8_dot == "dsp":  # the pointwise layer runs on SMLAD (schedule/int8_dot.py)
            kernels_c = (bundle.path / "kernels" / "kernels.c").read_text()
            assert ("ep_dsp_dot_8(" if label == "dsp8" else "ep_dsp_dot_4(") in kernels_c
            assert "\tsmlad\t" in _disassembly(bundle.path / "firmware.elf", board)
        _flashed(device, bundle)
        run = lambda b, x: np.load(device.run(bundle, [x], tmp_path / f"out_{label}{b}")[0])  # noqa: E731
        err = kws_lsb_error(path, run, [1, 2, 3])
        assert err <= 1.0, f"{err:.3g} LSB off onnxruntime on {board.name} ({label})"


def test_pooling_windows_on_the_device(device, board, tmp_path):
    """Max and average pools with padding (schedule/pool.py) as C kernels on the device: one padded plane of
    workspace, not the whole padded tensor (the arena is smaller than that copy alone), windows that C's
    codegen gets right (docs/tvm-facts.md#c-min-max)."""
    from edgepack.pipeline import build_package

    path = tmp_path / "pools.onnx"
    _pool_net(path, [49, 40])
    bundle = build_package(path, board.name, {"batch": (1, 3)}, tmp_path / "pools", name="pools").bundle
    padded_copy = 3 * 8 * 51 * 42 * 4  # ResNet-style 3x3/2 max pool, pad 1, at batch 3
    assert bundle.manifest["memory"]["arena_bytes"] < padded_copy
    _check(_flashed(device, bundle), bundle, path, [{"batch": b} for b in (1, 2, 3)], tmp_path)


def test_cortex_m3_stand_in(build, state_dir, tmp_path, request):
    if _mcu_board_name(request.config) != "mps2-an386":
        pytest.skip("runs with the default stand-ins")
    m3 = load_board("mps2-an385")
    bundle = build("mlp", m3.name)
    dev = open_device(m3)
    try:
        dev.install(bundle)
        _check(dev, bundle, "mlp", [{"batch": n} for n in (1, 7, 64)], tmp_path)
        r = dev.bench(bundle, {"batch": 8}, BenchSettings(warmup=1, repeat=3))
        assert r.unit == "ticks" and min(r.samples_ns) > 0
    finally:
        dev.close()
        standin.down(m3)
    assert not standin.state_dir(m3).joinpath("qemu.pid").exists()


def test_stand_in_keeps_its_flash_across_down_and_up(device, build, board, tmp_path):
    if not board.section("standin"):
        pytest.skip("stand-in only")
    bundle = build("mlp", board.name)
    _flashed(device, bundle)
    device.close()
    standin.down(board)
    assert standin.saved_connection(board) is None
    st = run_cli("standin", "status", board.name)
    assert st.returncode == 0 and "down" in st.stdout
    conn = standin.up(board)  # the last flashed firmware boots again
    assert "up" in run_cli("standin", "status", board.name).stdout
    dev = open_device(board, conn)
    try:
        _check(dev, bundle, "mlp", [{"batch": 5}], tmp_path)
    finally:
        dev.close()
    assert os.path.exists(standin.state_dir(board) / "firmware.elf")


# -- the command line on a microcontroller ------------------------------------------------------------------
@pytest.fixture
def cli_standin(board, tmp_path, monkeypatch):
    """A stand-in of its own for CLI tests (the module's `device` keeps its own), always stopped after."""
    if not board.section("standin"):
        pytest.skip("the CLI tests drive the stand-in")
    monkeypatch.setenv("EDGEPACK_STATE_DIR", str(tmp_path / "standins"))  # read by the CLI subprocesses too
    yield board
    standin.down(board)
    assert standin.saved_connection(board) is None


def _cli(*args: str) -> str:
    r = run_cli(*args)
    assert r.returncode == 0, f"edgepack {' '.join(args)}: {r.stderr.strip()}"
    return r.stdout


def _cli_check(bundle, model: str, sizes: list[int], tmp_path) -> float:
    """`edgepack run` (no address: the running stand-in) against onnxruntime at each batch size."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(EXAMPLES[model].path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for n in sizes:
        x = random_inputs(bundle.manifest, {"batch": n}, seed=n)[0]
        np.save(tmp_path / f"x{n}.npy", x)
        out = _cli("run", str(bundle.path), "--input", str(tmp_path / f"x{n}.npy"), "-o", str(tmp_path / f"o{n}"))
        err = max_rel_error(np.load(out.split()[0]), sess.run(None, {sess.get_inputs()[0].name: x})[0])
        assert err < TOL, f"{model} at batch={n}: max relative error {err:.2e}"
        worst = max(worst, err)
    return worst


def test_cli_flash_run_bench_on_the_stand_in(cli_standin, build, tmp_path):
    board, bundle = cli_standin, build("mlp", cli_standin.name)
    out = _cli("flash", str(bundle.path), "--board", board.name)
    conn = standin.saved_connection(board)
    assert conn is not None and conn.serial in out and f"standin down {board.name}" in out  # it stays up
    _cli_check(bundle, "mlp", [1, 7, 64], tmp_path)
    out = _cli("bench", str(bundle.path), "--sizes", "batch=1,8", "--repeat", "3", "-o", str(tmp_path / "run.json"))
    assert " ticks" in out and "instruction count" in out and " us " not in out
    doc = json.loads((tmp_path / "run.json").read_text())
    assert {s["unit"] for s in doc["sizes"]} == {"ticks"} and "-icount" in doc["machine"]["timer"]
    md = _cli("report", str(tmp_path / "run.json"), "-o", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"))
    assert "ticks" in (tmp_path / "r.md").read_text() and md


def test_cli_errors_on_a_microcontroller(cli_standin, build, tmp_path):
    board, bundle = cli_standin, build("mlp", cli_standin.name)
    np.save(tmp_path / "x.npy", np.zeros((2, 32), np.float32))
    cases = [(("run", str(bundle.path), "--input", str(tmp_path / "x.npy")), "flash it first"),  # nothing up
             (("run", str(bundle.path), "--input", str(tmp_path / "x.npy"), "--serial", "socket://127.0.0.1:1"),
              "give its port with --serial"),
             (("flash", str(bundle.path), "--rollback"), "--rollback is for Linux boards"),
             (("flash", str(bundle.path), "--board", "qemu-aarch64"), "was built for board"),
             (("tune", str(EXAMPLES["mlp"].path), "--board", "nucleo-f746zg", "--dim", "batch=1:8",
               "--db", str(tmp_path / "x.db")), "--serial PORT"),  # a real MCU needs its port
             (("tune", str(EXAMPLES["mlp"].path), "--board", board.name, "--server", "127.0.0.1:1", "--dim",
               "batch=1:8", "--db", str(tmp_path / "x.db")), "not RPC")]
    for args, want in cases:
        r = run_cli(*args)
        assert r.returncode == 2 and want in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_build_prints_the_memory_report(board, tmp_path):
    out = _cli("build", str(EXAMPLES["mlp"].path), "--board", board.name, "--dim", "batch=1:16",
               "-o", str(tmp_path / "mlp"))
    mem = json.loads((tmp_path / "mlp" / "memory.json").read_text())
    for line in (f"flash: {mem['flash_used']:,} of", f"RAM: {mem['ram_used']:,} of", "runtime core .text"):
        assert line in out, out
    assert all(k in out for k in ("kernels", "weights", "arena", "firmware", "runtime"))
    assert f"edgepack flash {tmp_path / 'mlp'} --board {board.name}" in out


def test_tune_on_the_stand_in_then_build_with_the_database(cli_standin, tmp_path):
    """`edgepack tune` measures candidates on the stand-in (one firmware image per batch), `build --db` uses
    them, and the tuned package's outputs still match onnxruntime."""
    board, db = cli_standin, tmp_path / "mcu.db"
    mlp = str(EXAMPLES["mlp"].path)
    out = _cli("tune", mlp, "--board", board.name, "--dim", "batch=1:64", "--trials", "4", "--samples", "2",
               "--max-kernels", "1", "--batch", "4", "--db", str(db), "--no-progress")
    assert "firmware image(s) flashed" in out and "(0 failed)" in out, out
    assert standin.saved_connection(board) is None  # the stand-in tune started is stopped again
    out = _cli("build", mlp, "--board", board.name, "--dim", "batch=1:64", "--db", str(db), "-o", str(tmp_path / "t"))
    assert "tuned kernels: " in out and "untuned:" not in out, out
    from edgepack.codegen.bundle import Bundle

    bundle = Bundle.open(tmp_path / "t")
    assert bundle.manifest["tuned"]
    src = (bundle.path / "kernels" / "kernels.c").read_text()
    assert not re.search(r"float[0-9]+\b|TVMBackendParallelLaunch", src)  # tuned kernels are plain C too
    _cli("flash", str(bundle.path), "--board", board.name)
    _cli_check(bundle, "mlp", [1, 13, 64], tmp_path)
