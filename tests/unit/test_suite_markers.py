"""A pytest marker on a helper function does nothing, silently: the suites must not carry one.

``@pytest.mark.exclusive`` once decorated the helper ``_state`` instead of the deadlock
test, so the test ran beside others and saw their devices held. This reads the suites'
source and fails on any mark that decorates something pytest does not collect.
"""

from __future__ import annotations

import ast
from pathlib import Path

SUITES = Path(__file__).resolve().parents[2] / "suites"


def _is_mark(decorator: ast.expr) -> bool:
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    return "pytest.mark." in ast.unparse(node)


def misplaced_marks(source: str) -> list[str]:
    """Names of module-level functions that carry a pytest mark but are not tests."""
    return [
        f.name for f in ast.parse(source).body
        if isinstance(f, ast.FunctionDef) and not f.name.startswith("test_") and any(map(_is_mark, f.decorator_list))
    ]


def test_no_suite_marks_a_helper_instead_of_a_test() -> None:
    found = {p.name: misplaced_marks(p.read_text()) for p in sorted(SUITES.glob("test_*.py"))}
    assert not {k: v for k, v in found.items() if v}, found


def test_the_marker_check_catches_a_mark_on_a_helper() -> None:
    """Negative control: the shape of the original defect is caught."""
    source = "import pytest\n\n@pytest.mark.exclusive\ndef _state(pod):\n    return ''\n\ndef test_x():\n    pass\n"
    assert misplaced_marks(source) == ["_state"]
