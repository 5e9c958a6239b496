"""Which report concern a check belongs to, as its suite says in code: ``pytest.mark.concern(id, title)``.

Why: the report used to find a check's concern from its module's file name through a table of names,
so a suite added or renamed showed under its file name and a title lived far from its checks. Each
suite module now names its concern in its ``pytestmark``; collection stops, in one line, at a suite
module under ``suites/`` that names none or several. The concern travels with the test's report (a user
property: junit.xml carries it, and ``evidence.jsonl``'s line for the test), where
:func:`dra_harness.report.results.read_results` reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_harness.report.evidence import CONCERN_PROPERTY

MARKER = "concern"
#: Where the suites a user runs live (the checkout's suites/ links here).
SUITES = (Path(__file__).resolve().parents[1] / "suites").resolve()


def register(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(id, title): the report concern the module's checks belong to "
                                       "(every suite module names one)")


def of(item: pytest.Item) -> dict[str, str] | None:
    """The concern ``item``'s module names; a suite module naming none or several is a usage error."""
    marks = [m for m in item.iter_markers(MARKER)]
    suite = Path(str(item.path)).resolve().parent == SUITES
    if len(marks) > 1 or (suite and not marks):
        raise pytest.UsageError(f"{item.path}: a suite module names exactly one concern, as "
                                f"pytestmark = [pytest.mark.{MARKER}('id', 'Title')]; found {len(marks)}")
    if not marks:
        return None
    args = marks[0].args
    if len(args) != 2 or not all(isinstance(a, str) and a for a in args):
        raise pytest.UsageError(f"{item.path}: pytest.mark.{MARKER} takes an id and a title, got {args!r}")
    return {"id": args[0], "title": args[1]}


def tag(items: list[pytest.Item]) -> None:
    """Put each item's concern on its reports (collection time, before any test runs)."""
    for item in items:
        concern = of(item)
        if concern is not None:
            item.user_properties.append((CONCERN_PROPERTY, concern))

