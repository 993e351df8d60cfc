"""Names from a model are hostile input: every one below, as a dim, an input, an output and a model file name,
builds and matches onnxruntime (min, max, odd and prime sizes), and none of them reaches the generated C other
than as an escaped string literal, a generated identifier or a sanitised comment.

The names are packed into a few models (one slot of a model = a dim, an input and an output with three names
of the list) so that the whole list costs a handful of builds.
"""

from __future__ import annotations

import keyword
import re

import numpy as np
import onnx
import pytest
from conftest import run_cli
from onnx import TensorProto, helper, numpy_helper

from edgepack.check import check_against_onnxruntime
from edgepack.codegen.bundle import Bundle
from edgepack.model.names import c_string, package_name
from edgepack.pipeline import build_package

pytestmark = pytest.mark.e2e

C_KEYWORDS = """auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local""".split()
C_TYPES_AND_MACROS = """int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t intptr_t
uintptr_t bool true false NULL EOF FILE errno main printf memcpy malloc system __LINE__ __FILE__ NDEBUG INT_MAX
DLTensor DLDataType TVMFFIAny T""".split()
# identifiers the generated C itself uses (emit_c.py, the runtime header, the dispatcher)
GENERATED = """ctx dims inputs outputs st a v vs rows tile whole tiles choice arena threads msg shape call_ns
call_names dims_desc input_desc output_desc pkg_init pkg_run pkg_message ep_t0 ep_d0 ep_d1 ep_d10 t0 t1 n1 mt
ep_call ep_msg_set ep_row_view ep_tensor_init ep_max_i64 EP_OK EP_ERR_SHAPE EP_ERR_ARG EP_ERR_KERNEL EP_ALIGN
EP_PROFILE EP_PACKAGE EP_PACKAGE_CTX ep_buffer_t ep_status_t""".split()
ODD = [
    "1", "0", "007", "-1", "1e3", "0x10", "3.5", "séq", "序列", "🙂", "ß", "Ω", "\u200f", "a\u200db", "e\u0301",
    '"', "'", 'a"b', "\\", "a\\", "\\n", "\n", "a\nb", "\t", "\r\n", " ", "a b", "*/", "/*", "//", "*/ /*",
    'x */ { extern int system(const char*); (void)system("touch PWNED"); } /*', '"); system("touch PWNED"); ("',
    "%s", "%n", "%d%d%d%d", "??/", "??=", "??'", "#define", "#include <stdio.h>", "${HOME}", "$(touch PWNED)",
    "`id`", ";rm -rf PWNED", "a:b", "a=b", "a,b", "(a)", "a[0]", "a.b", "a-b", "a+b", "a*b", "a/b",
    "x" * 3000, "é" * 1500, "seq", "SEQ", "Seq", "s.q", "s_q", "s-q", "batch size", "batch_size", "batch-size",
]
NAMES = list(dict.fromkeys(C_KEYWORDS + keyword.kwlist + keyword.softkwlist + C_TYPES_AND_MACROS + GENERATED + ODD))

SLOTS = 12  # names per model and role
K, N, LO, HI = 8, 16, 1, 7  # each slot: [dim, K] @ [K, N] + bias -> [dim, N]; sizes within LO..HI


def test_the_list_is_long_enough():
    assert len(NAMES) >= 200


def _model(dim_names: list[str], in_names: list[str], out_names: list[str]) -> onnx.ModelProto:
    rng = np.random.default_rng(len(dim_names))
    nodes, inits, ins, outs = [], [], [], []
    for i, (d, x, y) in enumerate(zip(dim_names, in_names, out_names)):
        w, b = f"w{i}_{x}", f"b{i}_{x}"  # initialisers carry hostile names too
        inits += [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32), w),
                  numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), b)]
        nodes += [helper.make_node("MatMul", [x, w], [f"mm_{x}"], name=f"node */ {x}"),
                  helper.make_node("Add", [f"mm_{x}", b], [y], name=f"add {y}")]
        ins.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [d, K]))
        outs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, [d, N]))
    g = helper.make_graph(nodes, "g */ \n", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _batches() -> list[tuple[list[str], list[str], list[str]]]:
    """Every name once as a dim, once as an input and once as an output, in different models."""
    out = []
    n = len(NAMES)
    for start in range(0, n, SLOTS):
        idx = [(start + j) % n for j in range(SLOTS)]
        out.append(([NAMES[i] for i in idx], [NAMES[(i + SLOTS) % n] for i in idx],
                    [NAMES[(i + 2 * SLOTS) % n] for i in idx]))
    return out


def _file_stem(name: str) -> str:
    """The name as a file stem (no '/', no NUL, at most 200 bytes): the model role of the name."""
    s = name.replace("/", "_").replace("\0", "_")
    while len(s.encode()) > 200:
        s = s[:-1]
    return s or "_"


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(len(_batches())))
def test_hostile_names_build_and_match_onnxruntime(tmp_path, batch):
    dims, ins, outs = _batches()[batch]
    model = _model(dims, ins, outs)
    stem = _file_stem(NAMES[batch * 7 % len(NAMES)])
    path = tmp_path / f"{stem}.onnx"
    onnx.save(model, str(path))
    unique_dims = list(dict.fromkeys(dims))
    result = build_package(path, "host", {d: (LO, HI) for d in unique_dims}, out=tmp_path / "pkg")
    bundle = result.bundle
    assert bundle.name == package_name(stem)
    _assert_no_raw_names(bundle, unique_dims + ins + outs)
    sizes = [{d: v for d, v in zip(unique_dims, (vals * len(unique_dims))[:len(unique_dims)])}
             for vals in ([LO], [HI], [5], [3, 7, 2, 5, 1])]
    for size, err in check_against_onnxruntime(bundle, path, sizes):
        assert err < 1e-4, f"{size}: max relative error {err:.2e}"
    assert not list(tmp_path.rglob("PWNED")) and not list(tmp_path.parent.rglob("PWNED"))


def _assert_no_raw_names(bundle: Bundle, names: list[str]) -> None:
    """Outside string literals and comments, the C holds no name of the model unless every package's C has
    that token anyway; and the descriptors hold every name as an escaped literal."""
    for f in [*bundle.path.glob("src/*.c"), *bundle.path.glob("include/*.h")]:
        text = f.read_text()
        code = re.sub(r"/\*.*?\*/", " ", re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text), flags=re.S)
        assert "PWNED" not in code and "system" not in code, f.name
        tokens = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
        for n in names:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) and n in tokens:
                assert n in _C_OF_EVERY_PACKAGE, f"{f.name}: model name {n!r} used as C code"
    descriptors = (bundle.path / "src" / f"{bundle.name}.c").read_text()
    for n in names:
        assert f'"{c_string(n)}"' in descriptors, f"{n[:40]!r} is not in the descriptors as an escaped literal"


# Tokens every package's C has, whatever the model: a model name equal to one of them proves nothing.
_C_OF_EVERY_PACKAGE = set(C_KEYWORDS) | set(C_TYPES_AND_MACROS) | set(GENERATED) | {"if", "for", "return"}


def test_c_string_escapes_every_byte_that_could_end_or_bend_a_literal():
    assert c_string('a"b\\c?\n') == 'a\\"b\\\\c\\?\\012'
    assert c_string("é") == "\\303\\251"
    assert c_string("??/") == "\\?\\?/"


@pytest.mark.parametrize("stem,expected", [("Encoder", "encoder"), ("my-model.v2", "my_model_v2"),
                                           ("1st", "m_1st"), ("序列", "m"), ("x" * 100, "x" * 32), ("_a", "a")])
def test_package_name_from_file_stem(stem, expected):
    assert package_name(stem) == expected


def test_hostile_dim_via_cli_builds_and_runs(tmp_path):
    """The CLI path end to end: a dim named EP_OK and an input whose name closes a comment and calls system()."""
    model = _model(["EP_OK"], ['x */ { extern int system(const char*); (void)system("touch PWNED"); } /*'],
                   ["choice"])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    r = run_cli("build", str(path), "--dim", "EP_OK=1:7", "-o", str(tmp_path / "pkg"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).standard_normal((5, K)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run_cli("run", str(tmp_path / "pkg"), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "0_choice.npy")
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)
    assert not list(tmp_path.rglob("PWNED"))
