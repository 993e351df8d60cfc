"""Board files: loaded from boards/*.toml, malformed ones reported with the file, key and expectation."""

from __future__ import annotations

import pytest

from edgepack.board import board_files, load_board, load_board_file
from edgepack.errors import BoardError

pytestmark = pytest.mark.unit

GOOD = """
name = "x"
[target]
kind = "llvm"
triple = "aarch64-linux-gnu"
cpu = "cortex-a72"
cores = 4
vector_bits = 128
[toolchain]
cc = "aarch64-linux-gnu-gcc"
"""


def test_every_board_file_loads():
    files = board_files()
    assert files, "no boards"
    for f in files:
        b = load_board_file(f)
        assert b.name == f.stem and b.target.cores >= 1 and b.vector_lanes_f32 >= 1


def test_host_board():
    b = load_board("host")
    assert b.target.kind == "llvm" and b.tvm_target().kind.name == "llvm"


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.replace('cores = 4', 'cores = "four"'), "'target.cores' must be int"),
    (lambda s: s.replace('cc = "aarch64-linux-gnu-gcc"', ''), "missing key 'toolchain.cc'"),
    (lambda s: s.replace('kind = "llvm"', 'kind = "cuda"'), "'target.kind'"),
    (lambda s: s + "\n[[[", "not valid TOML"),
])
def test_malformed_board_file(tmp_path, edit, needle):
    p = tmp_path / "x.toml"
    p.write_text(edit(GOOD))
    with pytest.raises(BoardError) as e:
        load_board_file(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_unknown_board_names_known_ones():
    with pytest.raises(BoardError, match="known: .*host"):
        load_board("no-such-board")
