"""A suite names its concern in code, and the report groups and titles checks by what the suite named.

The marker's rule is pure logic (an item's markers and path); the report side runs on a synthetic run
directory. Negative controls: a suite module naming no concern, or two, stops collection in one line;
a check whose evidence line names a concern the report's table lacks is shown under that concern, not
under its file's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dra_harness.plugin import concerns
from dra_harness.report.evidence import CONCERN_PROPERTY
from dra_harness.report.results import concerns as report_concerns
from dra_harness.report.results import read_results
from tests.unit.report_runs import make_run


@dataclass
class _Item:
    path: Path
    marks: list[pytest.Mark]
    user_properties: list[tuple[str, object]] = field(default_factory=list)

    def iter_markers(self, name: str):
        return iter([m for m in self.marks if m.name == name])


def _mark(*args) -> pytest.Mark:
    return pytest.mark.concern(*args).mark


def test_every_shipped_suite_module_names_one_concern():
    modules = sorted(concerns.SUITES.glob("test_*.py"))
    assert modules, concerns.SUITES
    for module in modules:
        text = module.read_text()
        assert text.count("pytest.mark.concern(") == 1, f"{module.name} names {text.count('pytest.mark.concern(')} concerns"


def test_a_suite_item_gets_its_concern_on_its_reports():
    item = _Item(concerns.SUITES / "test_allocation.py", [_mark("allocation", "Allocation")])
    concerns.tag([item])  # type: ignore[list-item]
    assert item.user_properties == [(CONCERN_PROPERTY, {"id": "allocation", "title": "Allocation"})]


def test_negative_control_a_suite_module_naming_no_concern_stops_collection_in_one_line():
    item = _Item(concerns.SUITES / "test_new.py", [])
    with pytest.raises(pytest.UsageError, match=r"test_new\.py: a suite module names exactly one concern.*found 0$"):
        concerns.tag([item])  # type: ignore[list-item]


def test_negative_control_two_concerns_or_a_concern_without_a_title_are_refused():
    with pytest.raises(pytest.UsageError, match=r"found 2$"):
        concerns.of(_Item(Path("tests/unit/test_x.py"), [_mark("a", "A"), _mark("b", "B")]))  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match=r"takes an id and a title, got \('a',\)"):
        concerns.of(_Item(Path("tests/unit/test_x.py"), [_mark("a")]))  # type: ignore[arg-type]


def test_a_project_test_outside_the_suites_needs_no_concern():
    assert concerns.of(_Item(Path(__file__), [])) is None  # type: ignore[arg-type]


def test_the_report_groups_by_the_concern_the_suite_named_not_by_the_file_name(tmp_path):
    run = make_run(tmp_path / "run", tests=[
        ("allocation", "test_one", "passed", 0.1, []),
        ("gpu_burn_in", "test_burn", "failed", 0.2, []),
    ])
    lines = [json.loads(line) for line in (run / "evidence.jsonl").read_text().splitlines()]
    lines[1]["concern"] = {"id": "burn-in", "title": "GPU burn-in"}  # a new suite that named its concern
    (run / "evidence.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    results = read_results(run)
    assert [(r["concern"], r["concern_title"]) for r in results] == [("allocation", "Allocation"), ("burn-in", "GPU burn-in")]
    by_id = {c["id"]: c for c in report_concerns(results)}
    assert by_id["burn-in"]["title"] == "GPU burn-in" and by_id["burn-in"]["outcome"] == "failed"
    assert "gpu_burn_in" not in by_id  # the file name is not a concern
    assert list(by_id).index("allocation") < list(by_id).index("burn-in")  # known concerns keep the report's order
