"""Read an ONNX model, find its dynamic dims, check its operators, and import it into Relax."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import helper

from ..errors import DimError, ModelError, UnsupportedOpsError
from .ops import ONNX_DOMAINS, is_supported, op_label
from .names import dim_c_name
from .plan import DimRange


@dataclass(frozen=True)
class IOInfo:
    """A graph input or output: dims are ints (static) or dim_param names (dynamic)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file '{p}' does not exist; pass the path of an .onnx file")
    if p.is_dir():
        raise ModelError(f"'{p}' is a directory; pass the path of an .onnx file")
    try:
        model = onnx.load(str(p), load_external_data=False)  # loaded below, where a missing file can be named
    except Exception as e:  # protobuf raises DecodeError, RuntimeError or ValueError depending on damage
        raise ModelError(f"'{p}' is not a readable ONNX file ({type(e).__name__}); re-export the model") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"'{p}' holds no ONNX graph (truncated or not an ONNX file); re-export the model")
    if not model.graph.node:
        raise ModelError(f"the graph in '{p}' has no nodes, so there is nothing to compute; export the model again "
                         "with its operators")
    _check_opset(model, p)
    _load_external_data(model, p)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"'{p}' is not a valid ONNX model: {first}") from None
    _drop_initializer_inputs(model)
    return model


def _check_opset(model: onnx.ModelProto, p: Path) -> None:
    newest = onnx.defs.onnx_opset_version()
    v = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if v > newest:
        raise ModelError(f"'{p}' uses ONNX opset {v}, newer than the installed onnx {onnx.__version__} knows "
                         f"(up to {newest}); export the model with opset {newest} or lower")


def _load_external_data(model: onnx.ModelProto, p: Path) -> None:
    """Weights stored beside the model (torch.onnx.export of large models): every file they name must be there."""
    from onnx import external_data_helper as ext

    tensors = [t for t in ext._get_all_tensors(model) if ext.uses_external_data(t)]
    files = dict.fromkeys(ext.ExternalDataInfo(t).location for t in tensors)
    missing = [f for f in files if not (p.parent / f).is_file()]
    if missing:
        raise ModelError(f"'{p}' keeps its weights in '{missing[0]}', which is not in {p.parent.resolve()}; "
                         "put that file beside the model")
    try:
        ext.load_external_data_for_model(model, str(p.parent))
    except Exception as e:
        raise ModelError(f"the external data of '{p}' cannot be read ({type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); re-export the model") from None


def _drop_initializer_inputs(model: onnx.ModelProto) -> None:
    """Initializers also listed as graph inputs (torch's keep_initializers_as_inputs) are weights, not inputs:
    the user never passes them, and TVM's importer refuses a name that is both."""
    inits = {i.name for i in model.graph.initializer}
    user = [v for v in model.graph.input if v.name not in inits]
    if len(user) != len(model.graph.input):
        del model.graph.input[:]
        model.graph.input.extend(user)


def _io(v: onnx.ValueInfoProto) -> IOInfo:
    t = v.type.tensor_type
    dims: list[int | str] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or f"{v.name}_dim{len(dims)}")
    dtype = helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "float32"
    return IOInfo(v.name, dtype, tuple(dims))


def graph_inputs(model: onnx.ModelProto) -> list[IOInfo]:
    inits = {i.name for i in model.graph.initializer}
    return [_io(v) for v in model.graph.input if v.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[IOInfo]:
    return [_io(v) for v in model.graph.output]


def dynamic_dim_names(model: onnx.ModelProto) -> list[str]:
    """Dynamic dims in order of first appearance in the inputs."""
    names: list[str] = []
    for io in graph_inputs(model):
        for d in io.shape:
            if isinstance(d, str) and d not in names:
                names.append(d)
    return names


_DIM_ARG = re.compile(r"^([^=]+)=(-?\d+):(-?\d+)$")


def parse_dim_args(args: list[str] | None) -> dict[str, tuple[int, int]]:
    """`--dim seq=1:256` (repeatable) -> {"seq": (1, 256)}."""
    out: dict[str, tuple[int, int]] = {}
    for a in args or []:
        m = _DIM_ARG.match(a.strip())
        if not m:
            raise DimError(f"--dim '{a}' is not NAME=MIN:MAX; write it like --dim seq=1:256")
        name, lo, hi = m.group(1).strip(), int(m.group(2)), int(m.group(3))
        if name in out:
            raise DimError(f"--dim {name} is given twice; give each dim's range once")
        if lo < 1:
            raise DimError(f"--dim {name}: MIN must be at least 1, got {lo}")
        if lo > hi:
            raise DimError(f"--dim {name}: MIN {lo} is greater than MAX {hi}; write --dim {name}={hi}:{lo}")
        out[name] = (lo, hi)
    return out


def resolve_dims(model: onnx.ModelProto, ranges: dict[str, tuple[int, int]]) -> list[DimRange]:
    for io in graph_inputs(model):
        if 0 in io.shape:
            raise DimError(f"input '{io.name}' has a zero-size axis (shape {list(io.shape)}); "
                           "edgepack compiles tensors with at least one element per axis")
    names = dynamic_dim_names(model)
    missing = [n for n in names if n not in ranges]
    if missing:
        flags = " ".join(f"--dim {n}=MIN:MAX" for n in missing)
        raise DimError(f"dynamic dim(s) {', '.join(missing)} have no range; pass {flags}")
    unknown = [n for n in ranges if n not in names]
    if unknown:
        known = ", ".join(names) or "none"
        raise DimError(f"--dim {unknown[0]} is not a dynamic dim of this model (its dynamic dims: {known})")
    return [DimRange(n, dim_c_name(i), *ranges[n]) for i, n in enumerate(names)]


# Ops whose extra outputs TVM's importer does not compute (it returns placeholders): a model may use
# only the first output.
FIRST_OUTPUT_ONLY = {"LayerNormalization", "MaxPool", "BatchNormalization", "Dropout"}


# Ops whose output shape depends on input values: a static memory plan cannot hold their outputs.
DATA_DEPENDENT_OPS = {"NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit"}


def unsupported_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(op_type, node name) of every node edgepack cannot compile, in graph order."""
    bad = []
    for i, node in enumerate(model.graph.node):
        name = node.name or f"#{i}"
        if node.domain in ONNX_DOMAINS and node.op_type in DATA_DEPENDENT_OPS:
            bad.append((f"{node.op_type} with a data-dependent output shape", name))
        elif not is_supported(node.domain, node.op_type):
            bad.append((op_label(node.domain, node.op_type), name))
        elif node.op_type in FIRST_OUTPUT_ONLY and any(node.output[1:]):
            bad.append((f"{node.op_type} with more than one output", name))
    return bad


def check_ops(model: onnx.ModelProto) -> None:
    bad = unsupported_ops(model)
    if bad:
        by_op: dict[str, list[str]] = {}
        for op, name in bad:
            by_op.setdefault(op, []).append(name)
        listing = "; ".join(f"{op} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})" for op, names in by_op.items())
        raise UnsupportedOpsError(
            f"{len(bad)} node(s) use operators edgepack does not support: {listing}; "
            "see `edgepack inspect` for the supported list, or rewrite those nodes"
        )
