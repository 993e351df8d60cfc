"""Rewrite ONNX exports into a form TVM 0.27's Relax frontend imports AND lowers to a static call sequence.

Real exporters (torch.onnx TorchScript and dynamo, onnxscript, ORT's quantizer) write graphs that
``tvm.relax.frontend.onnx.from_onnx`` either rejects or imports into data-dependent Relax code
(``R.tensor_to_shape`` + ``match_cast`` on a fresh variable, i.e. a ``vm.builtin`` shape op at run
time). ``canonicalize`` rewrites such graphs, keeping their inputs, outputs and numerics:

* **Constant forms**: ``Constant`` nodes written with ``value_int(s)`` / ``value_float(s)`` (the dynamo
  exporter does) become ``value`` tensors (TVM: "ValueError: no value in Constant").
* **Small initializers -> Constant nodes**: integer/bool initializers of <= 64 elements and float
  scalars (shape vectors, axes, fill values the dynamo exporter stores as initializers). With
  ``keep_params_in_input=True`` TVM would otherwise turn each into a run-time function input.
* **Identity / Dropout removal** (inference: Dropout is the identity).
* **Constant folding**: every node whose inputs are all constants is evaluated with
  ``onnx.reference.ReferenceEvaluator`` (e.g. ``Transpose`` of a weight). Small results become
  ``Constant`` nodes, large ones initializers (function inputs, like the other weights).
* **Symbolic shape folding**: the values of shape tensors (``Shape -> Gather -> Unsqueeze -> Concat``,
  ``Cast``, ``Add``/``Mul``/``Div``, ``Equal``/``Where`` ...) are evaluated as polynomials in the graph's
  dim_params, on top of ONNX shape inference (``data_prop=True``). Then
    - a tensor whose value is fully known becomes a ``Constant`` (e.g. ``Shape(x)[2]``);
    - ``Reshape`` gets a constant target, using 0 (copy the input's dim) and at most one -1;
    - ``Range(start, limit, delta)`` with constant start >= 0, delta > 0 and a symbolic limit becomes
      ``Slice(arange(0, UB), start, limit, step=delta)`` where UB is the upper bound of ``limit`` from
      ``dim_ranges``; ``limit`` is read straight off a graph input with ``Shape(start, end)``. TVM imports
      ``Range`` with a symbolic limit as ``tensor_to_shape`` + a fresh shape variable (data dependent),
      the ``Slice`` form as ``strided_slice`` with the symbolic extent;
    - the remaining symbolic shape operands of ``Reshape``/``Expand``/``ConstantOfShape``/``Slice``/
      ``Tile`` are rebuilt as ``Concat`` of constants and ``Shape(graph_input, start=k, end=k+1)``
      slices (the form TVM turns into a symbolic ``R.shape``); ``Expand`` targets first get 1 wherever
      the input already has that dim.
* **DequantizeLinear** on int8/uint8 initializers is kept in the graph by default (TVM imports it as
  ``R.dequantize`` and lowers it to a kernel, so the package keeps int8 weights). With
  ``fold_dequantize=True`` it is folded into float32 weights instead.
* **Gemm transB on a weight**: the weight is stored transposed and ``transB`` cleared (TVM would
  otherwise transpose it at every call, since weights stay function inputs).
* Dead nodes, initializers and stale ``value_info`` entries are removed.

Graph inputs (names, types, dim_params) and outputs are never changed. A model that needs none of
this comes back equal up to node order (no-op safe).

Passes, in order: cleanup.py (functions, constants, initializers, identities), folder.py (folding and
symbolic shapes, with per-op handlers in symbolic.py and per-op rewrites in rewrites.py, repeated until
nothing changes), gemm.py (transposed Gemm weights), then dead code and stale value_info (cleanup.py).
Shared limits, the report and graph helpers: graph.py; the symbolic integers: poly.py.
"""

from __future__ import annotations

import logging

import onnx

from edgepack.errors import DimError, ModelError

from .cleanup import (dce, inline_functions, normalize_constants, prune_value_info, remove_identity_like,
                      small_initializers_to_constants)
from .folder import Folder
from .gemm import pretranspose_gemm_weights
from .graph import CanonicalizeReport, Names

log = logging.getLogger(__name__)

__all__ = ["canonicalize", "canonicalize_with_report", "CanonicalizeReport"]


def _check_ranges(dim_ranges: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    out = {}
    for k, v in (dim_ranges or {}).items():
        try:
            lo, hi = (int(x) for x in v)
        except (TypeError, ValueError):
            raise DimError(f"dim range for {k!r} must be a (min, max) pair of ints, got {v!r}") from None
        if lo < 0 or hi < lo:
            raise DimError(f"dim range for {k!r} must satisfy 0 <= min <= max, got ({lo}, {hi})")
        out[k] = (lo, hi)
    return out


def _input_signature(model: onnx.ModelProto) -> list:
    return [vi.SerializeToString() for vi in model.graph.input]


def canonicalize_with_report(model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]], *,
                             fold_dequantize: bool = False,
                             pretranspose_gemm: bool = True) -> tuple[onnx.ModelProto, CanonicalizeReport]:
    """``canonicalize`` that also returns what it did (see the module docstring)."""
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(f"canonicalize expects an onnx.ModelProto, got {type(model).__name__}")
    ranges = _check_ranges(dim_ranges)
    rep = CanonicalizeReport()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    signature = _input_signature(m)

    m = inline_functions(m, rep)
    normalize_constants(m, rep)
    small_initializers_to_constants(m, rep)
    remove_identity_like(m, rep)
    for _ in range(8):
        changed = Folder(m, ranges, rep, fold_dequantize).run()
        dce(m, rep)
        if not changed:
            break
    if pretranspose_gemm:
        pretranspose_gemm_weights(m, rep, Names(m))
        dce(m, rep)
    prune_value_info(m)

    if _input_signature(m) != signature:  # pragma: no cover - guarded by construction
        raise ModelError("internal error: canonicalize changed the graph inputs")
    try:
        onnx.checker.check_model(m)
    except onnx.checker.ValidationError as e:
        raise ModelError(f"canonicalize produced an invalid model: {e}") from e
    for k, v in sorted(rep.counts.items()):
        log.debug("canonicalize: %s x%d", k, v)
    for note in rep.notes:
        log.info("canonicalize: %s", note)
    return m, rep


def canonicalize(model: onnx.ModelProto, dim_ranges: dict[str, tuple[int, int]]) -> onnx.ModelProto:
    """Return a copy of ``model`` that TVM 0.27's ``from_onnx(model, keep_params_in_input=True)``
    imports without data-dependent shape code (see the module docstring for each rewrite).

    ``dim_ranges`` maps dim_param names (e.g. ``{"batch": (1, 4), "seq": (1, 64)}``) to inclusive
    ranges; upper bounds size the constants that replace ``Range`` over a symbolic length.
    int8 weights behind ``DequantizeLinear`` stay int8 (TVM lowers the dequantisation to a kernel).
    """
    return canonicalize_with_report(model, dim_ranges)[0]
