"""Attention's kernels (schedule/attention.py, schedule/softmax.py): Q.K^T with its scale and mask epilogue,
A.V and softmax, whose rows and columns are both `seq`. Every such kernel of real exports takes the padded
tile form and the vectorized softmax; each form matches the legalized kernel at seq min, max, odd, prime and
sizes around the tiles, for several tiles; the bundled encoder matches onnxruntime on qemu-aarch64 (NEON)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tvm
from conftest import EXAMPLES, have, sizes_for

from edgepack.board import load_board
from edgepack.model.frontend import lower_model, prepare
from edgepack.schedule.attention import AttentionTiles, attention_form, schedule_attention
from edgepack.schedule.softmax import softmax_kernel
from edgepack.schedule.variants import dense_rows, matmul_block

pytestmark = pytest.mark.e2e

HF = Path(__file__).parent / "data" / "exports" / "hf"
SEQ = (1, 40)
TILES = [AttentionTiles(4, 16), AttentionTiles(1, 8), AttentionTiles(6, 8), AttentionTiles(8, 8, serial=True)]


def _lowered(path: Path, dims: dict):
    model, ranges = prepare(path, dims)
    return lower_model("m", model, ranges).kernels


@pytest.fixture(scope="module")
def bert_kernels():
    return _lowered(HF / "bert_torchscript.onnx", {"batch": (1, 4), "seq": SEQ})


def _attention(kernels: dict) -> dict:
    return {k: f for k, f in kernels.items()
            if (b := matmul_block(f)) is not None and dense_rows(f) is None and attention_form(f, b) != -1}


def _softmaxes(kernels: dict) -> dict:
    return {k: f for k, f in kernels.items() if "softmax" in k}


@pytest.mark.parametrize("name", ["bert_torchscript", "bert_dynamo", "distilbert_dynamo", "sentence_torchscript"])
def test_every_attention_kernel_of_an_export_takes_the_tiled_forms(name):
    kernels = _lowered(HF / f"{name}.onnx", {"batch": (1, 4), "seq": SEQ})
    att, soft = _attention(kernels), _softmaxes(kernels)
    assert len(att) >= 2 and soft, f"{name}: Q.K^T, A.V and softmax expected, got {sorted(kernels)}"
    for k, f in att.items():
        tiled = schedule_attention(f, matmul_block(f), AttentionTiles(4, 16), parallel=True)
        assert tiled is not None, f"{name}: {k} kept the row-wise schedule"
        text = tiled.script()
        assert "T.vectorized" in text and "T.parallel" in text
        assert text.count("T.where") <= 1, f"{k}: a predicate besides the epilogue's row test"
    for k, f in soft.items():
        assert softmax_kernel(f, 8, parallel=True) is not None, f"{name}: {k} kept the scalar reductions"


def _run(func, args: list[np.ndarray]) -> np.ndarray:
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                         target=load_board("host").tvm_target())
    arrays = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*arrays)
    return arrays[-1].numpy()


def _args(func, batch: int, seq: int, rng) -> list[np.ndarray]:
    """Random arguments at these dims; int64 inputs are the 0/1 attention mask, the tail of row 1 masked."""
    dims = {"ep_d0": batch, "ep_d1": seq} if any("ep_d1" in str(p.shape) for p in func.params) else {"ep_d0": seq}
    out = []
    for p in func.params:
        shape = [int(s) if isinstance(s, tvm.tirx.IntImm) else dims[str(s)] for s in p.shape]
        if "int" in str(p.dtype):
            mask = np.ones(shape, p.dtype)
            mask[1::2, max(1, shape[-1] // 2):] = 0
            out.append(mask)
        else:
            out.append((rng.standard_normal(shape) * 4).astype(p.dtype))
    return out


def _seqs() -> list[int]:
    return sorted(set(sizes_for(*SEQ)) | {8, 9, 16, 17})  # around the column and row tiles


def test_quantised_dense_layers_keep_the_rowwise_schedule():
    """A QDQ block's dense layers (2-D weights, dozens of requantize blocks fused after the matmul) are not
    attention: taking them for it inlined the requantize chains into one expression that filled 24 GB."""
    quant = HF.parent / "quant"
    dims = {d: tuple(r) for d, r in json.loads((quant / "dims.json").read_text())["block"].items()}
    kernels = _lowered(quant / "block_qdq_pc_s8.onnx", dims)
    matmuls = {k: f for k, f in kernels.items() if matmul_block(f) is not None and dense_rows(f) is None}
    assert any("requantize" in k for k in matmuls), sorted(kernels)
    assert not _attention(kernels), sorted(_attention(kernels))


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: f"r{t.rows}c{t.cols}" + ("s" if t.serial else ""))
def test_tiled_attention_matches_the_legalized_kernel(bert_kernels, tiles):
    rng = np.random.default_rng(0)
    for k, f in _attention(bert_kernels).items():
        tiled = schedule_attention(f, matmul_block(f), tiles, parallel=True)
        if tiled is None:  # a static column count the tile does not divide
            assert attention_form(f, matmul_block(f)) % tiles.cols
            continue
        for seq in _seqs():
            args = _args(f, 2, seq, rng)
            want, got = _run(f, [a.copy() for a in args]), _run(tiled, args)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=f"{k} at seq {seq}")


def test_vectorized_softmax_matches_numpy():
    kernels = _lowered(EXAMPLES["encoder"].path, {"seq": (1, 256)})
    (f,) = _softmaxes(kernels).values()
    kernel = softmax_kernel(f, 8, parallel=True)
    rng = np.random.default_rng(1)
    for seq in sorted(set(sizes_for(1, 256)) | {15, 16, 17, 32, 33}):
        x = (rng.standard_normal((1, 4, seq, seq)) * 30).astype(np.float32)  # wide: the max must be subtracted
        want = np.exp(x - x.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        got = _run(kernel, [x, np.zeros_like(x)])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7, err_msg=f"seq {seq}")


@pytest.mark.e2e
@pytest.mark.skipif(not have("qemu-aarch64"), reason="needs qemu-user (apt-get install qemu-user)")
def test_encoder_attention_matches_onnxruntime_on_aarch64(tmp_path):
    """NEON's 4-lane tiles (8 rows x 8 columns in its 32 registers), cross-compiled for the Cortex-A72 stand-in."""
    from edgepack.check import check_against_onnxruntime
    from edgepack.pipeline import build_package

    ex = EXAMPLES["encoder"]
    bundle = build_package(ex.path, "qemu-aarch64", dict(ex.dims), tmp_path / "encoder").bundle
    (dim,) = dict(ex.dims)
    for dims, err in check_against_onnxruntime(bundle, ex.path, [{dim: s} for s in (1, 9, 31, 256)],
                                               launcher=["qemu-aarch64"]):
        assert err < 1e-4, f"{dims}: max relative error {err:.2e} on qemu-aarch64"


def test_tuner_finds_attention_tasks_and_every_candidate_schedules(bert_kernels):
    from edgepack.tune.search import config, tiles_of
    from edgepack.tune.space import AttentionTask, Hardware, candidates
    from edgepack.tune.tasks import extract_tasks

    model, ranges = prepare(HF / "bert_torchscript.onnx", {"batch": (1, 4), "seq": SEQ})
    lowered = lower_model("m", model, ranges)
    tasks = [t for t in extract_tasks(lowered, ranges) if t.kind == "attention"]
    ops = sorted((t.op.n, t.op.k) for t in tasks)
    assert ops and ops[0][0] == 0 and ops[-1][1] == 0, ops  # Q.K^T: seq columns; A.V: a seq reduction
    assert all(t.dim.name == "seq" and isinstance(t.op, AttentionTask) for t in tasks)
    assert not [t for t in extract_tasks(lowered, ranges, attention=False) if t.kind == "attention"]
    hw = Hardware(lanes=8, registers=16, cores=2)
    for t in tasks:
        space = candidates(t.op, hw)
        assert AttentionTiles.default(t.op.n or None, 8, 16) in space and any(c.serial for c in space)
        for tiles in space:
            assert tiles_of(config(tiles)) == tiles
            assert schedule_attention(t.func, t.block, tiles, parallel=True) is not None, (t.kernel, tiles)
