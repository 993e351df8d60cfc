"""How names from a model reach generated code: never as they are.

A model's names (dims, tensors, nodes, the file it came from) are hostile input. They reach code in one of
three forms only:
- an identifier edgepack generates (`ep_d0` for a dim, `t12` for a value): `rename_model` rewrites the
  graph before TVM sees it, so nothing TVM or the C emitter writes carries a model's name;
- an escaped C string literal (`c_string`), for messages and the I/O descriptors;
- a sanitised comment (`c_comment`).
The original names are kept beside the generated ones (DimRange.name, the manifest) for messages.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .plan import DimRange

if TYPE_CHECKING:  # onnx takes seconds to import: package_name is used before anything heavy (bad -o paths)
    import onnx

_COMMENT_MAX = 80


def dim_c_name(index: int) -> str:
    return f"ep_d{index}"


def c_string(s: str) -> str:
    """The body of a C string literal that holds `s` as UTF-8: printable ASCII as it is, every other byte
    as a 3-digit octal escape (hex escapes would swallow following hex digits), and `?` escaped so that no
    trigraph forms (gcc -std=c11 honours them)."""
    out = []
    for b in s.encode("utf-8", "surrogatepass"):
        ch = chr(b)
        if ch in '\\"?':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


def c_comment(s: str) -> str:
    """`s` made safe inside /* */: letters, digits and a few marks only, cut to a readable length."""
    safe = re.sub(r"[^0-9A-Za-z_.:\-]", "_", s)
    return safe if len(safe) <= _COMMENT_MAX else safe[:_COMMENT_MAX] + "..."


def package_name(stem: str) -> str:
    """A package name (the `ep_<name>_` prefix of its C API, its file names) from a model file's stem:
    lower-case letters, digits and underscores, starting with a letter, at most 32 characters."""
    s = re.sub(r"[^0-9a-z_]+", "_", stem.lower()).strip("_")[:32].rstrip("_")
    if not s or not s[0].isalpha():
        s = f"m_{s}".rstrip("_")
    return s


def rename_model(model: onnx.ModelProto, dims: list[DimRange]) -> onnx.ModelProto:
    """A copy of the model whose dims, values and nodes carry generated names: dynamic dims of the inputs
    become their DimRange.c_name, any other dim_param is dropped (shapes are inferred again), every value
    is `t<k>` and every node `n<k>`, in the main graph and its subgraphs alike."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    by_name = {d.name: d.c_name for d in dims}
    inits = {t.name for t in g.initializer}
    for v in g.input:
        if v.name in inits:
            continue
        for k, d in enumerate(v.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                # the same display name onnx_load gives an axis without a dim_param
                d.dim_param = by_name[d.dim_param or f"{v.name}_dim{k}"]
    values: dict[str, str] = {"": ""}  # "" stays "": an absent optional input
    _rename_graph(g, values, by_name, [0])
    return m


def _rename_graph(g: onnx.GraphProto, values: dict[str, str], dims: dict[str, str], nodes: list[int]) -> None:
    def new(name: str) -> str:
        if name not in values:
            values[name] = f"t{len(values) - 1}"
        return values[name]

    g.name = "main" if not nodes[0] else f"g{nodes[0]}"
    for v in [*g.input, *g.output, *g.value_info]:
        v.name = new(v.name)
        _clear_unknown_dims(v.type, set(dims.values()))
    for t in g.initializer:
        t.name = new(t.name)
    for s in g.sparse_initializer:
        s.values.name = new(s.values.name)
        s.indices.name = new(s.indices.name)
    for n in g.node:
        n.input[:] = [new(x) for x in n.input]
        n.output[:] = [new(x) for x in n.output]
        nodes[0] += 1
        n.name = f"n{nodes[0]}"
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename_graph(sub, values, dims, nodes)
    g.doc_string = ""


def _clear_unknown_dims(t: onnx.TypeProto, known: set[str]) -> None:
    if t.HasField("tensor_type"):
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param not in known:
                d.ClearField("dim_param")
    elif t.HasField("sequence_type"):
        _clear_unknown_dims(t.sequence_type.elem_type, known)
    elif t.HasField("optional_type"):
        _clear_unknown_dims(t.optional_type.elem_type, known)
