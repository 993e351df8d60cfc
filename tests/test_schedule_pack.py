"""Weight packing (schedule/pack.py): W[K, N] -> Wp[N / panel, K, panel], element by element."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
from edgepack.schedule.pack import pack_array, panel_for  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("k, n, panel", [(1, 8, 8), (3, 16, 8), (5, 32, 16), (7, 48, 16)])
def test_pack_array_places_every_element(k, n, panel):
    w = np.arange(k * n, dtype=np.float32).reshape(k, n)
    wp = pack_array(w, panel)
    assert wp.shape == (n // panel, k, panel) and wp.dtype == w.dtype and wp.flags["C_CONTIGUOUS"]
    for kk in range(k):
        for j in range(n):
            assert wp[j // panel, kk, j % panel] == w[kk, j]
    # one panel's rows are contiguous: panel p holds columns p*panel .. (p+1)*panel - 1 of every k
    assert np.array_equal(wp.reshape(-1)[:k * panel], w[:, :panel].reshape(-1))


def test_panel_for():
    assert panel_for(64, 8) == 16  # two vectors
    assert panel_for(24, 8) == 8  # one vector when two do not divide N
    assert panel_for(10, 8) is None


@pytest.mark.parametrize("f, c, panel, pair", [(8, 3, 8, 1), (32, 4, 16, 1), (16, 6, 8, 2), (32, 64, 16, 2)])
def test_pointwise_conv_weights_pack_in_channel_panels(f, c, panel, pair):
    """A channel-vector pointwise kernel reads W[F, C, 1, 1] as [F / panel, C, 1, 1, panel], or with the int8
    dot's pairs as [F / panel, C / 2, 1, 1, panel, 2]: one panel's 16 int8 weights of a pair are one load."""
    w = np.arange(f * c, dtype=np.float32).reshape(f, c, 1, 1)
    wp = pack_array(w, panel, pair)
    assert wp.flags["C_CONTIGUOUS"] and wp.size == w.size
    for ff in range(f):
        for cc in range(c):
            at = (ff // panel, cc, 0, 0, ff % panel) if pair == 1 else (ff // panel, cc // 2, 0, 0, ff % panel, cc % 2)
            assert wp[at] == w[ff, cc, 0, 0]
