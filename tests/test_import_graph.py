"""The package's imports run one way down the flow: no cycle between modules, and no import from a lower
layer into a higher one (errors/board -> model -> schedule -> codegen -> mcu -> standin -> deploy -> check ->
report -> tune -> pipeline -> commands -> cli). Function-level imports count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PKG = Path(__file__).resolve().parents[1] / "edgepack"

# Lowest first; a module may import from its own layer and the layers before it.
LAYERS = [
    {"edgepack", "errors", "resources", "paths", "argtypes", "net"},
    {"board", "examples"},
    {"model"},
    {"schedule"},
    {"codegen"},
    {"mcu"},
    {"standin"},
    {"deploy"},
    {"check"},
    {"report"},
    {"tune"},
    {"pipeline"},
    {"commands"},
    {"cli", "__main__"},
]


def _module(p: Path) -> str:
    parts = ["edgepack", *p.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(p: Path, mod: str) -> set[str]:
    package = mod if p.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            for a in node.names:  # `from . import x` imports the module x when there is one
                sub = f"{target}.{a.name}"
                out.add(sub if _exists(sub) else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m == "edgepack" or m.startswith("edgepack.")}


def _exists(mod: str) -> bool:
    rel = Path(*mod.split(".")[1:])
    return (PKG / rel).with_suffix(".py").exists() or (PKG / rel / "__init__.py").exists()


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p, _module(p)) - {_module(p)} for p in PKG.rglob("*.py")}


def _layer(mod: str) -> int:
    top = mod.split(".")[1] if "." in mod else "edgepack"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_package_has_a_layer():
    for mod in _graph():
        _layer(mod)


def test_no_import_runs_back_up():
    back = sorted(f"{a} -> {b}" for a, bs in _graph().items() for b in bs if _layer(b) > _layer(a))
    assert not back, "imports from a higher layer: " + "; ".join(back)


def test_no_import_cycle():
    g = _graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
