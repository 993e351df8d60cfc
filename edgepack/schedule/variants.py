"""Kernel variants: the compiled forms of one TIR kernel that the shape dispatcher chooses between.

A dense/matmul kernel gets its rows flattened into one axis first (schedule/rows.py: `x[batch, seq, K]`,
`x[4, seq, K]`, `x[1, seq, K]` -> `x[rows, K]`, rows = the product of the leading dims), then it is
compiled twice (docs/tuning.md#dynamic-axes-main-and-edge-kernels, "peel the remainder"):
  main: the function specialized to rows = mt * tile (mt a scalar argument), scheduled with whole tiles, so
        no bounds-check predicate sits in its inner loops;
  edge: the symbolic function with a row tile of 1 (also predicate-free), run on the last rows % tile rows.
The C runtime calls main on the first rows - rows % tile rows and edge on the rest, through row views of
the same buffers. Every other kernel has one generic variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import tvm
from tvm import s_tir, tirx

from ..model.plan import DimRange, c_ident
from .attention import AttentionTiles, attention_form, schedule_attention
from .conv import (
    ConvTiles,
    conv_block,
    extents_of,
    kernel_blocks,
    schedule_conv,
    weight_panels,
)
from .dense import DenseTiles, schedule_dense, schedule_matmul_rowwise
from .pack import pack_func, packing
from .pool import pool_kernel
from .rows import flatten_rows, row_count, row_range
from .softmax import softmax_kernel


@dataclass(frozen=True)
class RowSplit:
    """How one kernel's buffers split into rows along a dynamic dim."""

    dim: str  # C name of the dim that counts rows (rows.ROWS for a flattened dense kernel)
    axes: tuple[int | None, ...]  # per tensor argument: the axis holding the dim, None if the arg has no rows
    row_elems: tuple[int, ...]  # per tensor argument: elements in one row (product of the axes after it)
    lead: int = 0  # leading axes of the plan's tensors folded into the kernel's row axis (0: none)


@dataclass
class Variant:
    symbol: str  # function name in the kernel module (C symbol __tvm_ffi_<symbol>)
    tile: int  # rows covered per step; 0 for a generic variant (any shape)
    func: tirx.PrimFunc = field(repr=False)
    extra_scalar: bool = False  # takes mt (number of row tiles) as a trailing int64


@dataclass
class KernelImpl:
    name: str
    split: RowSplit | None
    variants: list[Variant]  # split kernels: main variant(s) first, edge variant last
    packed: dict[int, tuple[int, int]] = field(default_factory=dict)  # parameter -> (panel, pair): pack_array's
    rows: DimRange | None = None  # split kernels: the range of the row count (`bind_row_ranges`)

    @property
    def edge(self) -> Variant:
        return self.variants[-1]


def call_rows(plan, call, split: RowSplit):
    """A split kernel call's row count (SymExpr): the product of the leading dims of its first row tensor."""
    i = next(i for i, ax in enumerate(split.axes) if ax is not None)
    return row_count(plan.tensor(call.args[i]).shape, split.lead)


def bind_row_ranges(plan, impls: dict[str, KernelImpl]) -> None:
    """Give each split kernel the range of its row count over the plan's dims: its dispatcher's one dim,
    and the upper bound its workspace is sized at."""
    for c in plan.calls:
        impl = impls[c.kernel]
        if impl.split is None:
            continue
        r = row_range(call_rows(plan, c, impl.split), plan.dims)  # calls on other dims widen the range
        impl.rows = r if impl.rows is None else replace(r, lo=min(r.lo, impl.rows.lo), hi=max(r.hi, impl.rows.hi))


@dataclass(frozen=True)
class DenseChoice:
    """A tuned dense kernel: the main micro-kernels the dispatcher picks from, and the row-tile-1 edge one."""

    mains: tuple[DenseTiles, ...]
    edge: DenseTiles

    @staticmethod
    def single(tiles: DenseTiles) -> DenseChoice:
        return DenseChoice((tiles,), tiles.with_rows(1))


@dataclass(frozen=True)
class Schedules:
    """The replaceable input of codegen: which tiles each dense kernel uses (the tuner fills this)."""

    dense: dict[str, DenseTiles | DenseChoice] = field(default_factory=dict)  # kernel -> tiles; missing: default
    dispatchers: dict = field(default_factory=dict)  # kernel -> codegen.dispatch.Dispatcher over its mains
    conv: dict[str, ConvTiles] = field(default_factory=dict)  # tuned conv2d kernels (dynamic batch)
    attention: dict[str, AttentionTiles] = field(default_factory=dict)  # tuned batch matmuls, rows and cols dynamic
    vector_lanes: int = 8
    vector_registers: int = 16
    int8_dot: str = ""  # the board's int8 dot-product instruction (schedule/int8_dot.py), "": none
    cores: int = 1
    target: object = None  # tvm Target for the generic rules (DLight); None: leave other kernels unscheduled
    # False for C-source kernels (docs/tvm-facts.md#c-target-cannot-vectorize; gcc vectorizes the plain loops) and
    # single-core boards (no thread pool: parallel loops would only add launch overhead).
    vectorize: bool = True
    parallel: bool = True
    pack: bool = True  # dense weights in column panels (schedule/pack.py); off for C-source boards


def make_variants(name: str, func: tirx.PrimFunc, sched: Schedules) -> KernelImpl:
    if (cb := conv_block(func)) is not None:  # tuned tiles, else the board's defaults
        packs = sched.pack and sched.vectorize  # the channel-vector form needs both
        tiles = sched.conv.get(name)
        if tiles is None or (tiles.cvec and not packs):
            tiles = ConvTiles.default(extents_of(func, cb), sched.vector_lanes, sched.vector_registers, packs,
                                      sched.int8_dot)
        if tiles.cvec and not weight_panels(func, cb, tiles):  # its weight cannot be packed (no constant)
            tiles = ConvTiles.default(extents_of(func, cb), sched.vector_lanes, sched.vector_registers, False,
                                      sched.int8_dot)
        conv = schedule_conv(func, cb, tiles, sched.cores > 1 and sched.parallel, sched.vectorize)
        return KernelImpl(name, None, [Variant(name, 0, conv)], weight_panels(func, cb, tiles))
    block = matmul_block(func)
    flat = dense_rows(func) if block is not None else None
    choice = None
    if flat is not None:
        choice = sched.dense.get(name) or DenseTiles.default(flat[0], block, sched.vector_lanes, sched.vector_registers)
        choice = DenseChoice.single(choice) if isinstance(choice, DenseTiles) else choice
    if choice is None or not all(_aligned(flat[1], flat[0], t.rows) for t in choice.mains):
        # softmax: LLVM targets only (a vectorized row)
        softmax = softmax_kernel(func, sched.vector_lanes, sched.parallel) if sched.vectorize else None
        generic = (_batch_matmul(name, func, block, sched) if block
                   else softmax or pool_kernel(func, sched.cores > 1 and sched.parallel, c_source=not sched.vectorize)
                   or generic_schedule(func, sched.target, sched.vectorize, sched.parallel))
        return KernelImpl(name, None, [Variant(name, 0, generic)])
    func, split = flat
    par, vec = sched.cores > 1 and sched.parallel, sched.vectorize
    packed = {}
    if sched.pack and (pk := packing(func, block, sched.vector_lanes)) is not None:
        func, packed = pack_func(func, block, pk[0], pk[2]), {pk[1]: (pk[2], 1)}
    mains = [Variant(f"{name}_t{t.rows}" if len(choice.mains) == 1 else f"{name}_k{j}_t{t.rows}", t.rows,
                     schedule_dense(specialize_rows(func, split, t.rows), block, t, par, vec), True)
             for j, t in enumerate(choice.mains)]
    edge_f = schedule_dense(func, block, choice.edge.with_rows(1), parallel=par, vectorize=vec)
    return KernelImpl(name, split, mains + [Variant(f"{name}_edge", 0, edge_f)], packed)


def _batch_matmul(name: str, func: tirx.PrimFunc, block: str, sched: Schedules) -> tirx.PrimFunc:
    """A matmul whose rows cannot be split: attention's padded tiles (schedule/attention.py) on vector
    boards, else (C kernels, or a form they do not take) the row-wise schedule."""
    if sched.vectorize and (n := attention_form(func, block)) != -1:
        tiles = sched.attention.get(name) or AttentionTiles.default(n, sched.vector_lanes, sched.vector_registers)
        if (tiled := schedule_attention(func, block, tiles, sched.cores > 1 and sched.parallel)) is not None:
            return tiled
    return schedule_matmul_rowwise(func, block, sched.vectorize, sched.parallel)


def generic_schedule(func: tirx.PrimFunc, target, vectorize: bool = True, parallel: bool = True) -> tirx.PrimFunc:
    """DLight's CPU rules (reductions, GEMV): they move intermediates into the loops that use them, which
    shrinks kernel workspace from whole tensors to rows. A result with a bounds-check predicate on a
    dynamic axis is refused (no guards in inner loops: docs/tvm-facts.md#tail-predicate), keeping the plain loop nest."""
    if target is None:
        return func
    from tvm.s_tir import dlight as dl

    func = inline_elementwise(func)
    try:
        with target:
            out = dl.ApplyDefaultSchedule(dl.cpu.Reduction(), dl.cpu.GEMV())(tvm.IRModule({"main": func}))["main"]
        text = out.script()
        if "T.where" not in text and (vectorize or "T.vectorized" not in text) and \
                (parallel or "T.parallel" not in text):
            return out
    except Exception:  # a rule that does not apply to this kernel's shape of loops
        pass
    return row_fusion(func, parallel)


def inline_elementwise(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A kernel of element-wise blocks only (a QuantizeLinear's rounding: floor, compares, selects) as one
    block: each intermediate would otherwise be a whole tensor of workspace. Inlining copies a block's
    expression at every read, so a chain that reads its values many times is left as it was."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # no root block (already lowered)
        return func
    if len(blocks) < 2 or any(iv.iter_type != 0 for b in blocks for iv in sch.get(b).iter_vars):
        return func
    for b in blocks[:-1]:
        try:
            sch.compute_inline(b)
        except Exception:  # ScheduleError: a block that cannot be inlined stays as it is
            pass
    out = sch.mod["main"]
    return out if len(out.script()) <= 4 * len(func.script()) else func


def row_fusion(func: tirx.PrimFunc, parallel: bool = True) -> tirx.PrimFunc:
    """Compute every block of a multi-block kernel inside the output block's outer loops, as deep as the
    dependences allow (softmax, normalisations: one row at a time), so intermediates shrink to a row."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:
        return func
    if len(blocks) < 2:
        return func
    n_loops = len(sch.get_loops(blocks[-1]))
    for depth in range(n_loops - 1, 0, -1):
        trial = sch.copy()
        try:
            out = trial.get_child_blocks(trial.get_sblock("root"))[-1]
            for b in reversed(trial.get_child_blocks(trial.get_sblock("root"))[:-1]):
                trial.compute_at(b, trial.get_loops(out)[depth - 1], preserve_unit_loops=True)
            rows = trial.get_loops(out)[:depth]
            fused = trial.fuse(*rows) if len(rows) > 1 else rows[0]
            if parallel:
                trial.parallel(fused)  # rows are independent
        except Exception:  # ScheduleError: this depth breaks a dependence; try a shallower one
            continue
        return trial.mod["main"]
    return func


def _aligned(split: RowSplit, func: tirx.PrimFunc, tile: int) -> bool:
    # Row views must keep the 64-byte alignment the kernels assume for their buffers.
    for p, ax, n in zip(func.params, split.axes, split.row_elems):
        if ax is not None and (tile * n * tvm.DataType(p.dtype).bits // 8) % 64:
            return False
    return True


def matmul_block(func: tirx.PrimFunc) -> str | None:
    """Name of the one reduction block shaped like C[.., i, j] += A[.., i, k] * B[.., k, j] (any layout)."""
    found = [b.name_hint for b in kernel_blocks(func) if any(iv.iter_type == 2 for iv in b.iter_vars)]
    if len(found) == 1 and "matmul" in found[0]:
        return found[0]
    return None


def dense_rows(func: tirx.PrimFunc) -> tuple[tirx.PrimFunc, RowSplit] | None:
    """A dense/matmul kernel with its rows flattened into one axis, and the split of that axis; None when
    the rows cannot be flattened (the kernel keeps a generic schedule)."""
    flat = flatten_rows(func)
    split = find_row_split(flat.func) if flat is not None else None
    return (flat.func, replace(split, lead=flat.lead)) if split is not None else None


def find_row_split(func: tirx.PrimFunc) -> RowSplit | None:
    """A RowSplit when every dynamic buffer holds exactly one dim, once, as a plain var after unit axes only,
    and no reduction runs over it: then rows are independent and can be computed in any grouping."""
    dyn_vars: set[str] = set()
    axes: list[int | None] = []
    row_elems: list[int] = []
    for p in func.params:
        shape = list(getattr(p, "shape", None) or [])
        if not shape and not hasattr(p, "shape"):
            return None  # scalar params: leave such kernels alone
        pos = [i for i, s in enumerate(shape) if not isinstance(s, tirx.IntImm)]
        if not pos:
            axes.append(None)
            row_elems.append(0)
            continue
        if len(pos) != 1 or not isinstance(shape[pos[0]], tirx.Var):
            return None
        ax = pos[0]
        if any(int(s) != 1 for s in shape[:ax]):
            return None
        dyn_vars.add(shape[ax].name)
        axes.append(ax)
        n = 1
        for s in shape[ax + 1:]:
            n *= int(s)
        row_elems.append(n)
    if len(dyn_vars) != 1 or not _no_reduction_over_dyn(func):
        return None
    return RowSplit(c_ident(dyn_vars.pop()), tuple(axes), tuple(row_elems))


def _no_reduction_over_dyn(func: tirx.PrimFunc) -> bool:
    return all(isinstance(iv.dom.extent, tirx.IntImm) for b in kernel_blocks(func) for iv in b.iter_vars
               if iv.iter_type == 2)


def root_block(func: tirx.PrimFunc):
    """The root SBlock of a kernel as Relax legalizes it, or None (already lowered)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        return sch.get(sch.get_sblock("root"))
    except Exception:  # ScheduleError: no block named root
        return None


def specialize_rows(func: tirx.PrimFunc, split: RowSplit, tile: int) -> tirx.PrimFunc:
    """rows := mt * tile, with mt a new trailing int64 parameter."""
    mt = tirx.Var("mt", "int64")
    for p, ax in zip(func.params, split.axes):
        if ax is not None:
            shape = list(p.shape)
            shape[ax] = mt * tile
            func = func.specialize({p: tirx.decl_buffer(shape, p.dtype, name=p.name)})
            break  # one buffer binds the var; specialize rewrites every other use
    return tirx.PrimFunc(list(func.params) + [mt], func.body, ret_type=func.ret_type, attrs=func.attrs)
