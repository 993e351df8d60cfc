"""Flatten the rows of a dense/matmul kernel: its leading axes (up to the last dynamic one) become one row axis.

Real exports put dense layers on x[batch, seq, K]: several leading dims, dynamic dims mixed with a static batch
and unit axes. The micro-kernels tile one row axis, so this rewrite gives them one: every buffer that holds
rows, [d0, .., dp-1, tail..] -> [rows, tail..] with rows = d0 * .. * dp-1 (row-major: the same bytes), and every
block's leading iterators and loops -> one. Then whole row tiles run over batch x seq rows and the remainder
goes to the edge kernel. The C call passes views of the plan's tensors flattened the same way
(`ep_rows_view`).

The rewrite accepts only what Relax legalization produces for a fused matmul and its elementwise epilogue: a
root block holding a sequence of perfect loop nests, one block each, that index every row buffer with their own
leading iterators in order. Anything else returns None (the kernel keeps its generic schedule).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import tvm_ffi
from tvm import ir, s_tir, tirx

from ..model.plan import DimRange, SymExpr

ROWS = "rows"  # the row-count var of a flattened kernel, and the dispatcher's dim for its kernels


@dataclass(frozen=True)
class FlatRows:
    func: tirx.PrimFunc  # the kernel over [rows, tail..] buffers
    lead: int  # leading axes of the original row buffers folded into the row axis


class _NotFlat(Exception):
    """The kernel has a shape this rewrite does not handle."""


def flatten_rows(func: tirx.PrimFunc) -> FlatRows | None:
    prefix = _row_prefix(func)
    if prefix is None or not isinstance(func.body, s_tir.SBlockRealize):
        return None
    rows = tirx.Var(ROWS, "int64")
    root = func.body.block
    olds = [b for b in [*func.params, *root.alloc_buffers] if _dynamic(b)]
    news = [tirx.decl_buffer([rows, *b.shape[len(prefix):]], b.dtype, name=b.name) for b in olds]
    rw = _Rewriter(prefix, rows, list(zip(olds, news)))
    try:
        body = rw.root(func.body)
    except _NotFlat:
        return None
    out = tirx.PrimFunc([rw.mapped(p) for p in func.params], body, ret_type=func.ret_type, attrs=func.attrs)
    if _mentions(out, [v for e in prefix for v in _vars(e)]):  # an old row dim survived somewhere
        return None
    return FlatRows(out, len(prefix))


def _vars(node) -> list:
    found = []
    tvm_ffi.structural_map(node, [(tirx.Var, lambda v: found.append(v) or v)], order="post")
    return found


def _mentions(node, names: list) -> bool:
    return any(v.same_as(n) for v in _vars(node) for n in names)


def row_count(shape: list[SymExpr], lead: int) -> SymExpr:
    """The rows of a plan tensor whose first `lead` axes are flattened: the product of those dims."""
    factors = [s for s in shape[:lead] if not (s.is_const and s.value == 1)]
    return functools.reduce(lambda a, b: SymExpr.apply("*", a, b), factors) if factors else SymExpr.const(1)


def row_range(rows: SymExpr, dims: list[DimRange]) -> DimRange:
    """The range of a row count over the dims' ranges (a product of dims grows with each of them)."""
    lo, hi = ({d.c_name: getattr(d, end) for d in dims} for end in ("lo", "hi"))
    return DimRange(ROWS, ROWS, rows.eval(lo), rows.eval(hi))


def _dynamic(buf) -> bool:
    return not all(isinstance(s, tirx.IntImm) for s in buf.shape)


def _row_prefix(func: tirx.PrimFunc) -> list | None:
    """The output's leading dims up to its last dynamic one, when every buffer with a dynamic dim starts with
    exactly those dims and has only static dims after them; else None."""
    bufs = [p for p in func.params if getattr(p, "shape", None) is not None]
    if len(bufs) != len(func.params) or not bufs:
        return None  # scalar parameters: leave such kernels alone
    out = list(bufs[-1].shape)
    dyn = [i for i, s in enumerate(out) if not isinstance(s, tirx.IntImm)]
    if not dyn:
        return None
    prefix = out[:dyn[-1] + 1]
    allocs = list(func.body.block.alloc_buffers) if isinstance(func.body, s_tir.SBlockRealize) else []
    for b in bufs + allocs:
        if _dynamic(b) and not (len(b.shape) >= len(prefix) and _same(b.shape[:len(prefix)], prefix)
                                and not _dynamic_tail(b, len(prefix))):
            return None
    return prefix


def _dynamic_tail(buf, p: int) -> bool:
    return not all(isinstance(s, tirx.IntImm) for s in buf.shape[p:])


def _same(a, b) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


class _Rewriter:
    def __init__(self, prefix: list, rows: tirx.Var, buffers: list):
        self.prefix, self.p, self.rows, self.buffers = prefix, len(prefix), rows, buffers

    def buffer(self, b):
        """The flattened buffer of `b`, or None when `b` holds no rows."""
        return next((new for old, new in self.buffers if old.same_as(b)), None)

    def mapped(self, b):
        """`b` flattened, or `b` itself (buffers are Vars: no `or` on them)."""
        new = self.buffer(b)
        return b if new is None else new

    def root(self, realize):
        blk = realize.block
        body = self.stmt(blk.body)
        allocs = [self.mapped(b) for b in blk.alloc_buffers]
        new = s_tir.SBlock([], [], [], blk.name_hint, body, None, allocs, list(blk.match_buffers), blk.annotations)
        return s_tir.SBlockRealize([], True, new)

    def stmt(self, s):
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([self.stmt(x) for x in s.seq])
        if isinstance(s, tirx.For):
            return self.nest(s)
        raise _NotFlat

    def nest(self, top: tirx.For):
        """A perfect loop nest around one block: its leading p loops -> one loop over rows."""
        loops, s = [], top
        while isinstance(s, tirx.For):
            loops.append(s)
            s = s.body
        if not isinstance(s, s_tir.SBlockRealize) or len(loops) < self.p:
            raise _NotFlat
        lead = loops[:self.p]
        if not all(isinstance(v, tirx.Var) and v.same_as(lp.loop_var) for v, lp in zip(s.iter_values, lead)) or \
                not _same([lp.extent for lp in lead], self.prefix) or \
                not all(isinstance(lp.min, tirx.IntImm) and int(lp.min) == 0 for lp in lead):
            raise _NotFlat
        if not (isinstance(s.predicate, tirx.IntImm) and int(s.predicate) == 1):
            raise _NotFlat
        r = tirx.Var("r", "int64")
        body = s_tir.SBlockRealize([r, *list(s.iter_values)[self.p:]], True, self.block(s.block))
        for lp in reversed(loops[self.p:]):
            body = tirx.For(lp.loop_var, lp.min, lp.extent, lp.kind, body, None, lp.annotations)
        return tirx.For(r, tirx.IntImm("int64", 0), self.rows, lead[0].kind, body)

    def block(self, blk):
        ivs = list(blk.iter_vars)
        if len(ivs) < self.p or any(iv.iter_type != 0 for iv in ivs[:self.p]) or blk.alloc_buffers or \
                blk.match_buffers or not _same([iv.dom.extent for iv in ivs[:self.p]], self.prefix):
            raise _NotFlat
        old = [iv.var for iv in ivs[:self.p]]
        vr = tirx.Var("v_r", "int64")
        iv_r = tirx.IterVar(ir.Range(tirx.IntImm("int64", 0), self.rows), vr, 0)

        def lead(indices):  # the leading indices of a row buffer must be this block's own leading iterators
            if len(indices) < self.p or not all(isinstance(i, tirx.Var) and i.same_as(v)
                                                for i, v in zip(indices, old)):
                raise _NotFlat
            return [vr, *list(indices)[self.p:]]

        def region(r):
            new = self.buffer(r.source)
            if new is None:
                return r
            mins = lead([rg.min for rg in r.region])
            if not all(isinstance(rg.extent, tirx.IntImm) and int(rg.extent) == 1 for rg in r.region[:self.p]):
                raise _NotFlat
            return tirx.BufferRegion(new, [ir.Range.from_min_extent(mins[0], 1), *list(r.region)[self.p:]])

        def load(e):
            new = self.buffer(e.source)
            return e if new is None else tirx.BufferLoad(new, lead(e.indices))

        def expr(e):
            return tvm_ffi.structural_map(e, [(ir.TensorLoad, load)], order="post")

        def store(st):
            if not isinstance(st, tirx.BufferStore):
                raise _NotFlat
            new = self.buffer(st.buffer)
            if new is None:
                return tirx.BufferStore(st.buffer, expr(st.value), st.indices)
            return tirx.BufferStore(new, expr(st.value), lead(st.indices))

        init = store(blk.init) if blk.init is not None else None
        return s_tir.SBlock([iv_r, *ivs[self.p:]], [region(r) for r in blk.reads], [region(r) for r in blk.writes],
                            blk.name_hint, store(blk.body), init, [], [], blk.annotations)
