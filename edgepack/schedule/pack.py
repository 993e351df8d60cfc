"""Weight packing for dense micro-kernels: W[K, N] -> Wp[N / panel, K, panel] (and pointwise convolutions').

A dense micro-kernel reads a column tile of W for every k. In W's own layout those reads are `panel` floats
every N floats apart, so each row tile streams W from memory with little reuse of cache lines; in panels,
one tile's reads are contiguous (measured on the host, 768x768 at M = 256: 46 -> 94 GFLOP/s). Weights
are constants, so the permutation is done once, at build time, on the weight data (pipeline.py) and in the
kernel's TIR (`pack_func`), and the tuner measures the packed kernels it will ship.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, tirx

from ..model.tir import region_tensor


def panel_for(n: int, lanes: int) -> int | None:
    """Panel width for N columns: two vectors, else one; None when N has neither as a divisor."""
    return next((p for p in (2 * lanes, lanes) if p >= 1 and n % p == 0), None)


def weight_read(func: tirx.PrimFunc, block: str) -> tuple[int, int] | None:
    """(read index in the matmul block, parameter index) of W: a static rank-2 parameter read as W[k, j]."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    blk = sch.get(sch.get_sblock(block))
    k = str(blk.iter_vars[-1].var)
    by_name = {p.name: i for i, p in enumerate(func.params) if getattr(p, "shape", None) is not None}
    for ri, region in enumerate(blk.reads):
        pi = by_name.get(region_tensor(region))
        if pi is None:
            continue
        shape = func.params[pi].shape
        if len(shape) == 2 and all(isinstance(s, tirx.IntImm) for s in shape) and str(region.region[0].min) == k:
            return ri, pi
    return None


def packing(func: tirx.PrimFunc, block: str, lanes: int) -> tuple[int, int, int] | None:
    """(read index, parameter index, panel) when the kernel's weight can be packed, else None."""
    wr = weight_read(func, block)
    panel = panel_for(int(func.params[wr[1]].shape[1]), lanes) if wr else None
    return (*wr, panel) if panel else None


def pack_func(func: tirx.PrimFunc, block: str, read_index: int, panel: int) -> tirx.PrimFunc:
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    sch.transform_layout(sch.get_sblock(block), ("read", read_index), lambda k, j: (j // panel, k, j % panel))
    return sch.mod["main"]


def pack_array(w: np.ndarray, panel: int, pair: int = 1) -> np.ndarray:
    """Dense W[K, N] -> [N / panel, K, panel]; a pointwise conv's W[F, C, 1, 1] -> [F / panel, C, 1, 1, panel],
    or with `pair` 2 or 4 [F / panel, C / pair, 1, 1, panel, pair] (schedule/conv.py, channel-vector form: the
    int8 dot's groups of input channels): all panels of output channels, reduction-major inside."""
    if w.ndim == 4:
        f, c, kh, kw = w.shape
        if pair == 1:
            return np.ascontiguousarray(w.reshape(f // panel, panel, c, kh, kw).transpose(0, 2, 3, 4, 1))
        return np.ascontiguousarray(w.reshape(f // panel, panel, c // pair, pair, kh, kw).transpose(0, 2, 4, 5, 1, 3))
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k, n // panel, panel).transpose(1, 0, 2))
