"""The tuned shape dispatcher (docs/tuning.md#dispatcher): an exact table for the sampled instances plus a depth-capped
decision tree for the instances between them, in Python (`choose`) and as C (`emit_c`).

- Table: each sampled instance packs into one int64 key, its dims combined lexicographically,
  key = (...((d0 - lo0) * span1 + (d1 - lo1)) * span2 + ...), span = hi - lo + 1; the C holds the sorted keys
  and their kernel ids as const arrays and binary-searches them.
- Tree: a small CART classifier from dims to kernel id, written here (no scikit-learn: the same database must
  give the same C on every machine). Weighted Gini impurity, integer thresholds at the floor of the midpoint
  between two neighbouring sampled values (an instance between samples goes to the side of the nearer one),
  depth cap (6 by default), sibling leaves with the same kernel merged. Emitted as nested
  `if (dims[i] <= threshold)`.
- Outside the declared ranges `choose` raises `DimError` and the C returns -1; the package's run function
  has already checked the ranges (EP_ERR_SHAPE), and a caller that gets -1 must turn it into EP_ERR_SHAPE too.

Dims are the dispatcher's own `DimRange`s (possibly a subset of the model's dims, in any order): `emit_c`
finds each in the model's dims list by name, so the C reads `dims[<model index>]`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import DimError, EdgepackError
from ..model.names import c_comment
from ..model.plan import DimRange

JSON_FORMAT = "edgepack.tree_dispatcher"
JSON_VERSION = 1
DEFAULT_MAX_DEPTH = 6
_KEY_LIMIT = 1 << 62  # packed keys stay well inside int64


@dataclass(frozen=True)
class Node:
    """A leaf (`kernel` set) or a split: `dim` indexes the dispatcher's dims; `dims[dim] <= threshold` -> left."""

    kernel: int | None = None
    dim: int = -1
    threshold: int = 0
    left: Node | None = None
    right: Node | None = None

    @property
    def is_leaf(self) -> bool:
        return self.kernel is not None

    def depth(self) -> int:
        return 0 if self.is_leaf else 1 + max(self.left.depth(), self.right.depth())

    def predict(self, x: Sequence[int]) -> int:
        n = self
        while not n.is_leaf:
            n = n.left if x[n.dim] <= n.threshold else n.right
        return n.kernel

    def to_json(self) -> dict:
        if self.is_leaf:
            return {"kernel": self.kernel}
        return {"dim": self.dim, "le": self.threshold, "left": self.left.to_json(), "right": self.right.to_json()}

    @staticmethod
    def from_json(d: Mapping) -> Node:
        if "kernel" in d:
            return Node(kernel=int(d["kernel"]))
        return Node(dim=int(d["dim"]), threshold=int(d["le"]), left=Node.from_json(d["left"]),
                    right=Node.from_json(d["right"]))


class TreeDispatcher:
    """Implements `edgepack.codegen.dispatch.Dispatcher`. Build it with `fit`, or `from_json` from the database."""

    def __init__(self, dims: Sequence[DimRange], table: Mapping[tuple[int, ...], int], tree: Node):
        self.dims = list(dims)
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"dispatcher dims repeat a name: {names}")
        for d in self.dims:
            if d.lo > d.hi:
                raise ValueError(f"dim {d.name}: empty range {d.lo}..{d.hi}")
        spans = [d.hi - d.lo + 1 for d in self.dims]
        if math.prod(spans) > _KEY_LIMIT:
            raise EdgepackError(f"dispatcher dims {names}: the product of the ranges' sizes ({math.prod(spans)}) "
                                "is too large to pack a shape into an int64 key; declare narrower ranges")
        self._spans = spans
        self.table: dict[tuple[int, ...], int] = {}
        for x, k in table.items():
            x = tuple(int(v) for v in x)
            self._check_in_range(x, "table entry")
            if int(k) < 0:
                raise ValueError(f"table entry {x}: kernel {k} < 0")
            self.table[x] = int(k)
        _check_tree(tree, len(self.dims))
        self.tree = tree

    # -- building --------------------------------------------------------------------------------------
    @classmethod
    def fit(cls, dims: Sequence[DimRange], samples: Sequence[Mapping[str, int]], choices: Sequence[int],
            weights: Sequence[float] | None = None, max_depth: int = DEFAULT_MAX_DEPTH,
            between: Sequence[tuple[Mapping[str, int], int]] = ()) -> TreeDispatcher:
        """Table = the samples with their chosen kernel; tree = weighted CART fitted on them (depth <= max_depth).
        A sample given twice must have the same choice (its weights add up). `between`: (instance, kernel)
        estimates for instances that were not measured; they train the tree (together as much weight as the
        samples) but are not in the exact table."""
        if len(samples) != len(choices):
            raise ValueError(f"{len(samples)} samples but {len(choices)} choices")
        if not samples:
            raise ValueError("a dispatcher needs at least one sample")
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        w = np.ones(len(samples)) if weights is None else np.asarray(weights, dtype=float)
        if w.shape != (len(samples),) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("weights must be one finite value >= 0 per sample")
        probe = cls(dims, {}, Node(kernel=0))
        table: dict[tuple[int, ...], int] = {}
        weight: dict[tuple[int, ...], float] = {}
        for s, k, wi in zip(samples, choices, w):
            x = probe._vector(s)
            probe._check_in_range(x, "sample")
            if int(k) < 0:
                raise ValueError(f"sample {dict(s)}: kernel {k} < 0")
            if x in table and table[x] != int(k):
                raise ValueError(f"sample {dict(s)} is given twice with different kernels ({table[x]}, {k})")
            table[x] = int(k)
            weight[x] = weight.get(x, 0.0) + float(wi)
        extra: dict[tuple[int, ...], int] = {}
        for s, k in between:
            x = probe._vector(s)
            probe._check_in_range(x, "instance")
            if x not in table:
                extra[x] = int(k)
        share = (sum(weight.values()) or 1.0) / max(1, len(extra))
        labels = table | extra
        weight |= {x: share for x in extra}
        xs = list(labels)
        X = np.array(xs, dtype=np.int64).reshape(len(xs), len(probe.dims))
        y = np.array([labels[x] for x in xs], dtype=np.int64)
        wt = np.array([weight[x] for x in xs])
        if wt.sum() <= 0:
            wt = np.ones_like(wt)  # all samples weightless: fit them uniformly
        keep = wt > 0
        tree = _fit(X[keep], y[keep], wt[keep], max_depth)
        return cls(dims, table, tree)

    # -- Python side -----------------------------------------------------------------------------------
    def choose(self, dims: Mapping[str, int]) -> int:
        """The kernel for one instance. `dims` maps dim names (ONNX or C spelling) to values; other keys are
        ignored. Raises DimError when a dim is missing or outside its declared range."""
        x = self._vector(dims)
        for d, v in zip(self.dims, x):
            if not d.lo <= v <= d.hi:
                raise DimError(f"dim {d.name} = {v} is outside its declared range {d.lo}..{d.hi}")
        k = self.table.get(x)
        return k if k is not None else self.tree.predict(x)

    def key(self, x: Sequence[int]) -> int:
        """The packed table key of an in-range instance (dims in the dispatcher's order)."""
        key = 0
        for d, span, v in zip(self.dims, self._spans, x):
            key = key * span + (int(v) - d.lo)
        return key

    @property
    def kernels(self) -> list[int]:
        """Every kernel id the dispatcher can return."""
        out = set(self.table.values())
        stack = [self.tree]
        while stack:
            n = stack.pop()
            if n.is_leaf:
                out.add(n.kernel)
            else:
                stack += [n.left, n.right]
        return sorted(out)

    def _vector(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.dims:
            v = dims.get(d.name, dims.get(d.c_name))
            if v is None:
                raise DimError(f"dim {d.name} has no value (got {sorted(dims)})")
            out.append(int(v))
        return tuple(out)

    def _check_in_range(self, x: tuple[int, ...], what: str) -> None:
        for d, v in zip(self.dims, x, strict=True):
            if not d.lo <= v <= d.hi:
                raise ValueError(f"{what} {dict(zip([e.name for e in self.dims], x))}: dim {d.name} = {v} is "
                                 f"outside {d.lo}..{d.hi}")

    # -- C side ----------------------------------------------------------------------------------------
    def emit_c(self, fn_name: str, dims: list[DimRange]) -> str:
        """`int fn_name(const int64_t* dims)`: needs only <stdint.h>; `dims` is indexed like the model's dims."""
        idx = []
        for d in self.dims:
            j = next((i for i, m in enumerate(dims) if m.name == d.name), None)
            if j is None:
                j = next((i for i, m in enumerate(dims) if m.c_name == d.c_name), None)
            if j is None:
                raise EdgepackError(f"the dispatcher for {fn_name} was tuned over dim {d.name}, which the model "
                                    f"does not have (dims: {[m.name for m in dims]}); retune")
            m = dims[j]
            if m.lo < d.lo or m.hi > d.hi:
                raise EdgepackError(f"the dispatcher for {fn_name} was tuned for {d.name} in {d.lo}..{d.hi}, but "
                                    f"the package declares {m.lo}..{m.hi}; retune over the new range")
            idx.append(j)
        ref = [f"dims[{j}]" for j in idx]
        names = ", ".join(f"{d.name} = dims[{j}]" for d, j in zip(self.dims, idx)) or "none"
        lines = [
            f"/* Tuned dispatcher (edgepack.tune.dispatch_tree): {len(self.table)} sampled instances in an exact "
            f"table, others by a decision tree of depth {self.tree.depth()}. Dims: {c_comment(names)}.",
            " * Returns the kernel index, or -1 when a dim is outside its declared range: the caller turns -1 into",
            " * EP_ERR_SHAPE (the package's run function checks the ranges first). */",
            f"int {fn_name}(const int64_t* dims) {{",
        ]
        if not self.dims:
            lines.append("  (void)dims;")
        for d, r in zip(self.dims, ref):
            lines.append(f"  if ({r} < {d.lo} || {r} > {d.hi}) return -1; /* {c_comment(d.name)} */")
        if self.table:
            items = sorted((self.key(x), k) for x, k in self.table.items())
            n = len(items)
            kmax = max(k for _, k in items)
            ktype = "uint8_t" if kmax < 256 else "uint16_t" if kmax < 65536 else "int32_t"
            key_expr = "0"
            for i, (d, r) in enumerate(zip(self.dims, ref)):
                term = f"({r} - {d.lo})" if d.lo else r
                key_expr = term if i == 0 else f"({key_expr}) * {self._spans[i]} + {term}"
            lines += [
                f"  static const int64_t keys[{n}] = {{",
                *_wrap([str(k) for k, _ in items]),
                "  };",
                f"  static const {ktype} kernels[{n}] = {{",
                *_wrap([str(k) for _, k in items]),
                "  };",
                "  {",
                f"    const int64_t key = {key_expr};",
                f"    int lo = 0, hi = {n};",
                "    while (lo < hi) {",
                "      const int mid = lo + (hi - lo) / 2;",
                "      if (keys[mid] < key) lo = mid + 1; else hi = mid;",
                "    }",
                f"    if (lo < {n} && keys[lo] == key) return (int)kernels[lo];",
                "  }",
            ]
        lines += _emit_node(self.tree, ref, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    # -- serialisation ---------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "dims": [asdict(d) for d in self.dims],
            "table": [[*x, k] for x, k in sorted(self.table.items())],
            "tree": self.tree.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping) -> TreeDispatcher:
        if not isinstance(data, Mapping) or data.get("format") != JSON_FORMAT:
            raise EdgepackError("not a tree dispatcher record (format != edgepack.tree_dispatcher); retune")
        if data.get("version") != JSON_VERSION:
            raise EdgepackError(f"tree dispatcher record version {data.get('version')} is not {JSON_VERSION}, "
                                "the one this edgepack reads; retune or use a matching edgepack")
        try:
            dims = [DimRange(str(d["name"]), str(d["c_name"]), int(d["lo"]), int(d["hi"])) for d in data["dims"]]
            table = {}
            for row in data["table"]:
                if len(row) != len(dims) + 1:
                    raise ValueError(f"table row {row} does not have {len(dims)} dims + a kernel")
                table[tuple(int(v) for v in row[:-1])] = int(row[-1])
            return cls(dims, table, Node.from_json(data["tree"]))
        except (KeyError, TypeError, ValueError) as e:
            raise EdgepackError(f"tree dispatcher record is malformed ({e}); retune") from None

    def __eq__(self, other) -> bool:
        return isinstance(other, TreeDispatcher) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return (f"TreeDispatcher(dims={[d.name for d in self.dims]}, table={len(self.table)} entries, "
                f"depth={self.tree.depth()}, kernels={self.kernels})")


# -- CART ------------------------------------------------------------------------------------------------
def _fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, max_depth: int) -> Node:
    classes = np.unique(y)
    Y = (y[:, None] == classes[None, :]).astype(float) * w[:, None]  # [n x C] weighted one-hot
    return _prune(_grow(X, Y, classes, max_depth))


def _grow(X: np.ndarray, Y: np.ndarray, classes: np.ndarray, depth_left: int) -> Node:
    tot = Y.sum(axis=0)
    label = int(classes[int(np.argmax(tot))])  # weighted majority; ties: the lowest kernel id
    if depth_left == 0 or np.count_nonzero(tot) <= 1:
        return Node(kernel=label)
    split = _best_split(X, Y)
    if split is None:
        return Node(kernel=label)
    f, t = split
    le = X[:, f] <= t
    return Node(dim=f, threshold=t, left=_grow(X[le], Y[le], classes, depth_left - 1),
                right=_grow(X[~le], Y[~le], classes, depth_left - 1))


def _best_split(X: np.ndarray, Y: np.ndarray) -> tuple[int, int] | None:
    """The (dim, threshold) of least weighted Gini impurity over all boundaries between distinct sampled values
    (ties: the lower dim, then the lower threshold); None when every dim is constant in the node."""
    best, best_cost = None, math.inf
    total = Y.sum(axis=0)
    W = total.sum()
    for f in range(X.shape[1]):
        order = np.argsort(X[:, f], kind="stable")
        v = X[order, f]
        cum = np.cumsum(Y[order], axis=0)
        ends = np.flatnonzero(v[1:] != v[:-1])  # last row of each run of equal values, except the final run
        if ends.size == 0:
            continue
        left = cum[ends]
        right = total[None, :] - left
        wl, wr = left.sum(axis=1), right.sum(axis=1)
        # weighted Gini: W_L (1 - sum p_L^2) + W_R (1 - sum p_R^2) = W - sum L^2 / W_L - sum R^2 / W_R
        with np.errstate(divide="ignore", invalid="ignore"):
            gl = np.where(wl > 0, (left ** 2).sum(axis=1) / wl, 0.0)
            gr = np.where(wr > 0, (right ** 2).sum(axis=1) / wr, 0.0)
        cost = W - gl - gr
        tol = 1e-9 * max(W, 1e-300)  # float noise must not break ties between equally good splits
        i = int(np.flatnonzero(cost <= cost.min() + tol)[0])
        if cost[i] < best_cost - tol:
            best_cost = float(cost[i])
            best = (f, int((int(v[ends[i]]) + int(v[ends[i] + 1])) // 2))  # floor of the midpoint
    return best


def _prune(n: Node) -> Node:
    """Merge splits whose two sides return the same kernel."""
    if n.is_leaf:
        return n
    left, right = _prune(n.left), _prune(n.right)
    if left.is_leaf and right.is_leaf and left.kernel == right.kernel:
        return left
    return Node(dim=n.dim, threshold=n.threshold, left=left, right=right)


def _check_tree(n: Node, ndims: int) -> None:
    if n.is_leaf:
        if n.kernel < 0:
            raise ValueError(f"tree leaf kernel {n.kernel} < 0")
        return
    if not 0 <= n.dim < ndims or n.left is None or n.right is None:
        raise ValueError(f"tree split on dim {n.dim} of {ndims}, or without two children")
    _check_tree(n.left, ndims)
    _check_tree(n.right, ndims)


# -- C helpers -------------------------------------------------------------------------------------------
def _emit_node(n: Node, ref: list[str], indent: int) -> list[str]:
    pad = "  " * indent
    if n.is_leaf:
        return [f"{pad}return {n.kernel};"]
    return ([f"{pad}if ({ref[n.dim]} <= {n.threshold}) {{"] + _emit_node(n.left, ref, indent + 1)
            + [f"{pad}}} else {{"] + _emit_node(n.right, ref, indent + 1) + [f"{pad}}}"])


def _wrap(values: list[str], per_line: int = 12) -> list[str]:
    return ["    " + ", ".join(values[i:i + per_line]) + "," for i in range(0, len(values), per_line)]
