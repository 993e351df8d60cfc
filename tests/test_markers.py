"""Every test module says what kind of test it is: one of the markers unit, e2e, hil in its `pytestmark`
(registered in pyproject.toml), so that `pytest -m unit` and the like select whole kinds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

KINDS = {"unit", "e2e", "hil"}


def _kinds(path: Path) -> set[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return {m.attr for m in marks if isinstance(m, ast.Attribute)} & KINDS
    return set()


def test_every_test_module_has_one_kind():
    wrong = {p.name: sorted(_kinds(p)) for p in sorted(Path(__file__).parent.glob("test_*.py")) if len(_kinds(p)) != 1}
    assert not wrong, f"test modules without exactly one of {sorted(KINDS)}: {wrong}"
