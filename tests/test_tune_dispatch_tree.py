"""The tuned dispatcher: exact table + depth-capped tree, Python `choose` against the emitted C compiled with gcc."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
from pathlib import Path

import pytest

from conftest import have
from edgepack.errors import DimError, EdgepackError
from edgepack.model.plan import DimRange
from edgepack.tune.dispatch_tree import Node, TreeDispatcher

pytestmark = pytest.mark.unit

# the model's dims, in the order the package's `dims` array holds them
BATCH = DimRange("batch", "batch", 1, 4)
SEQ = DimRange("seq", "seq", 1, 256)
FEAT = DimRange("feat-dim", "feat_dim", 16, 1024)
MODEL_DIMS = [BATCH, SEQ, FEAT]
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)

HARNESS = """
#include <stdint.h>
#include <stdio.h>
int ep_m_dispatch_k(const int64_t* dims);
%s
int main(void) {
  int64_t d[%d];
  for (;;) {
    for (int i = 0; i < %d; i++) {
      long long v;
      if (scanf("%%lld", &v) != 1) return 0;
      d[i] = (int64_t)v;
    }
    printf("%%d\\n", ep_m_dispatch_k(d));
  }
}
"""


def compile_dispatcher(td: TreeDispatcher, tmp: Path, model_dims=MODEL_DIMS) -> Path:
    src = tmp / "dispatch_test.c"
    src.write_text(HARNESS % (td.emit_c("ep_m_dispatch_k", model_dims), len(model_dims), len(model_dims)))
    exe = tmp / "dispatch_test"
    r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + src.read_text()
    return exe


def run_c(exe: Path, rows: list[list[int]]) -> list[int]:
    out = subprocess.run([str(exe)], input="".join(" ".join(map(str, r)) + "\n" for r in rows),
                         capture_output=True, text=True, check=True).stdout
    return [int(v) for v in out.split()]


def model_row(d: dict) -> list[int]:
    """A full dims vector for the harness: dims the dispatcher does not use get an arbitrary in-range value."""
    return [d.get(m.name, m.lo) for m in MODEL_DIMS]


def check_against_c(td: TreeDispatcher, tmp: Path, samples: list[dict], rng: random.Random, n_random: int = 1000):
    exe = compile_dispatcher(td, tmp)
    randoms = [{d.name: rng.randint(d.lo, d.hi) for d in td.dims} for _ in range(n_random)]
    edges = [{d.name: v for d, v in zip(td.dims, vs)}
             for vs in itertools.product(*[(d.lo, d.hi) for d in td.dims])]
    shapes = samples + randoms + edges
    want = [td.choose(s) for s in shapes]
    assert run_c(exe, [model_row(s) for s in shapes]) == want
    # out of range: one dim past either end (or far beyond), the others in range
    bad = []
    for d in td.dims:
        for v in (d.lo - 1, d.hi + 1, 0, -1, I64_MAX, I64_MIN, 10**12):
            if not d.lo <= v <= d.hi:
                s = {**randoms[0], d.name: v}
                bad.append(s)
                with pytest.raises(DimError):
                    td.choose(s)
    assert run_c(exe, [model_row(s) for s in bad]) == [-1] * len(bad)
    return want


needs_gcc = pytest.mark.skipif(not have("gcc"), reason="gcc not installed")


def rule_1d(seq: int) -> int:
    """A made-up 'measured winner' per length: GEMV-like kernel for tiny M, tile 8 and tile 32 regimes, plus a
    divisibility quirk, so the tree has something to learn and cannot be perfect at depth 6."""
    if seq <= 2:
        return 0
    if seq % 32 == 0:
        return 3
    return 1 if seq < 48 else 2


@needs_gcc
def test_one_dynamic_dim_c_matches_python(tmp_path):
    rng = random.Random(0)
    samples = [{"seq": s} for s in sorted({1, 2, 3, 5, 8, 13, 16, 24, 32, 40, 48, 64, 100, 128, 160, 200, 256}
                                          | {rng.randint(1, 256) for _ in range(20)})]
    td = TreeDispatcher.fit([SEQ], samples, [rule_1d(s["seq"]) for s in samples])
    assert td.tree.depth() <= 6
    assert all(td.choose(s) == rule_1d(s["seq"]) for s in samples)  # exact on samples (the table)
    want = check_against_c(td, tmp_path, samples, rng)
    assert set(want) <= {0, 1, 2, 3}


@needs_gcc
def test_two_dynamic_dims_c_matches_python(tmp_path):
    rng = random.Random(1)
    # dispatcher dims in another order than the model's: the C must read dims[1] for seq and dims[0] for batch
    samples = [{"batch": b, "seq": s} for b in (1, 2, 4) for s in (1, 4, 16, 33, 64, 100, 128, 200, 256)]
    choices = [(0 if s["seq"] * s["batch"] < 32 else 1 + (s["seq"] % 32 == 0) + 2 * (s["batch"] == 4)) for s in samples]
    td = TreeDispatcher.fit([SEQ, BATCH], samples, choices, weights=[rng.uniform(0.1, 3) for _ in samples])
    assert [td.choose(s) for s in samples] == choices
    check_against_c(td, tmp_path, samples, rng)
    assert "dims[1]" in td.emit_c("f", MODEL_DIMS) and "dims[0]" in td.emit_c("f", MODEL_DIMS)


@needs_gcc
def test_three_dims_random_labels_and_wide_kernel_ids(tmp_path):
    """Noise labels force a full depth-6 tree; kernel ids above 255 and 65535 widen the table's element type."""
    rng = random.Random(2)
    samples = []
    while len(samples) < 300:
        s = {"batch": rng.randint(1, 4), "seq": rng.randint(1, 256), "feat-dim": rng.randint(16, 1024)}
        if s not in samples:
            samples.append(s)
    for ids in ([0, 1, 2, 3, 4], [0, 7, 300], [5, 70000]):
        td = TreeDispatcher.fit([BATCH, SEQ, FEAT], samples, [rng.choice(ids) for _ in samples])
        assert td.tree.depth() == 6
        check_against_c(td, tmp_path, samples, rng)
    assert "uint32_t" not in td.emit_c("f", MODEL_DIMS) and "int32_t kernels" in td.emit_c("f", MODEL_DIMS)
    # the C name of a dim (feat_dim) works as a key in Python as well
    assert td.choose({"batch": 1, "seq": 1, "feat_dim": 16}) == td.choose({"batch": 1, "seq": 1, "feat-dim": 16})


@needs_gcc
def test_constant_dispatcher_and_narrower_package_range(tmp_path):
    td = TreeDispatcher.fit([SEQ], [{"seq": 10}, {"seq": 20}], [2, 2])
    assert td.tree == Node(kernel=2) and td.kernels == [2]
    exe = compile_dispatcher(td, tmp_path)
    assert run_c(exe, [[1, s, 16] for s in (1, 10, 15, 256, 0, 257)]) == [2, 2, 2, 2, -1, -1]
    # a package may declare a sub-range of the tuned one (the dispatcher still checks its own range)
    compile_dispatcher(td, tmp_path, [BATCH, DimRange("seq", "seq", 8, 64)])
    # no dims at all: one instance, one kernel
    td0 = TreeDispatcher.fit([], [{}], [1])
    exe = compile_dispatcher(td0, tmp_path)
    assert td0.choose({}) == 1 and run_c(exe, [[1, 1, 16]]) == [1]


def test_between_samples_goes_to_the_nearer_sample():
    td = TreeDispatcher.fit([SEQ], [{"seq": 8}, {"seq": 64}], [0, 1])
    assert td.tree == Node(dim=0, threshold=36, left=Node(kernel=0), right=Node(kernel=1))
    assert [td.choose({"seq": s}) for s in (1, 36, 37, 256)] == [0, 0, 1, 1]


def test_weights_pick_the_leaf_and_the_split():
    samples = [{"seq": s} for s in (10, 20, 30, 40)]
    # depth 0: one leaf, the weighted majority (3 samples of kernel 0 lose to 1 heavy sample of kernel 1)
    assert TreeDispatcher.fit([SEQ], samples, [0, 0, 0, 1], max_depth=0).choose({"seq": 25}) == 0
    assert TreeDispatcher.fit([SEQ], samples, [0, 0, 0, 1], [1, 1, 1, 10], max_depth=0).choose({"seq": 25}) == 1
    # depth 1, labels 0 1 0 1: the split isolates the heavier sample's side
    light = TreeDispatcher.fit([SEQ], samples, [0, 1, 0, 1], [1, 1, 1, 1], max_depth=1)
    heavy = TreeDispatcher.fit([SEQ], samples, [0, 1, 0, 1], [1, 1, 1, 50], max_depth=1)
    assert light.tree.threshold == 15 and heavy.tree.threshold == 35
    assert heavy.choose({"seq": 36}) == 1 and heavy.choose({"seq": 34}) == 0
    # the table still answers every sample exactly, whatever the tree says
    assert [heavy.choose(s) for s in samples] == [0, 1, 0, 1]


def test_json_round_trip():
    rng = random.Random(3)
    samples = [{"batch": rng.randint(1, 4), "seq": rng.randint(1, 256)} for _ in range(60)]
    samples = list({json.dumps(s, sort_keys=True): s for s in samples}.values())
    td = TreeDispatcher.fit([SEQ, BATCH], samples, [rng.randint(0, 3) for _ in samples])
    again = TreeDispatcher.from_json(json.loads(json.dumps(td.to_json())))
    assert again == td and again.emit_c("f", MODEL_DIMS) == td.emit_c("f", MODEL_DIMS)
    probe = [{"batch": rng.randint(1, 4), "seq": rng.randint(1, 256)} for _ in range(200)]
    assert [again.choose(s) for s in probe] == [td.choose(s) for s in probe]
    with pytest.raises(EdgepackError, match="format"):
        TreeDispatcher.from_json({"format": "x"})
    with pytest.raises(EdgepackError, match="version"):
        TreeDispatcher.from_json({**td.to_json(), "version": 99})
    with pytest.raises(EdgepackError, match="malformed"):
        TreeDispatcher.from_json({**td.to_json(), "tree": {"dim": 5, "le": 1, "left": {"kernel": 0},
                                                           "right": {"kernel": 1}}})
    with pytest.raises(EdgepackError, match="malformed"):
        TreeDispatcher.from_json({**td.to_json(), "table": [[999, 1, 0]]})  # seq out of range


def test_errors():
    with pytest.raises(ValueError, match="twice"):
        TreeDispatcher.fit([SEQ], [{"seq": 3}, {"seq": 3}], [0, 1])
    with pytest.raises(ValueError, match="outside"):
        TreeDispatcher.fit([SEQ], [{"seq": 300}], [0])
    with pytest.raises(DimError, match="no value"):
        TreeDispatcher.fit([SEQ], [{"batch": 3}], [0])
    td = TreeDispatcher.fit([SEQ], [{"seq": 3}, {"seq": 3}], [1, 1])  # a repeated sample, same kernel: fine
    with pytest.raises(DimError, match="outside its declared range"):
        td.choose({"seq": 0})
    with pytest.raises(EdgepackError, match="retune over the new range"):
        td.emit_c("f", [DimRange("seq", "seq", 1, 512)])
    with pytest.raises(EdgepackError, match="does not have"):
        td.emit_c("f", [BATCH])
    with pytest.raises(EdgepackError, match="int64 key"):
        TreeDispatcher([DimRange(f"d{i}", f"d{i}", 0, 2**20) for i in range(4)], {}, Node(kernel=0))
