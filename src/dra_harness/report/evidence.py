"""Evidence a test records: which device, which node, how long.

Tests call ``evidence.record(key=value, ...)``, or ``evidence.record(section="metrics", ...)`` for a record
a report section (:mod:`.sections`) turns into rows, which must name a registered section; the records ride on the test report's
``user_properties`` (which pytest-xdist carries from workers to the controller) and
the controller appends them, with the outcome, to ``<report-dir>/evidence.jsonl``.
Values must be JSON-serialisable; nothing secret belongs here, and should a value
or a failure message hold a credential anyway, it is blanked before it is written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

# operations: imported for the sections it registers, so a record's section is checked in every worker.
from dra_harness.report import operations  # noqa: F401
from dra_harness.report.files import redact
from dra_harness.report.sections import known

EVIDENCE_PROPERTY = "dra-harness.evidence"
#: The concern the test's suite names (``pytest.mark.concern``, :mod:`dra_harness.plugin.concerns`): ``{"id", "title"}``.
CONCERN_PROPERTY = "dra-harness.concern"


class Evidence:
    def __init__(self, item: pytest.Item) -> None:
        self.item = item

    @classmethod
    def for_item(cls, item: pytest.Item) -> Evidence:
        return cls(item)

    def record(self, *, section: str | None = None, **values: Any) -> None:
        if section is not None:
            known(section).check(values)  # a section nothing renders, or a record it cannot, fails here, not in the report
            values = {"section": section, **values}
        json.dumps(values)  # fail at the call site, not at report time
        self.item.user_properties.append((EVIDENCE_PROPERTY, {"t": round(time.time(), 3), **values}))


def write(report_dir: Path, report: pytest.TestReport) -> None:
    records = [v for k, v in report.user_properties if k == EVIDENCE_PROPERTY]
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    report_dir.mkdir(parents=True, exist_ok=True)
    line = {
        "test": report.nodeid,
        "outcome": report.outcome,
        "duration_s": round(report.duration, 3),
        "records": records,
    }
    concern = next((v for k, v in report.user_properties if k == CONCERN_PROPERTY), None)
    if concern is not None:
        line["concern"] = concern
    if report.outcome == "failed":
        line["failure"] = str(report.longrepr).splitlines()[-1][:2000] if report.longrepr else ""
    with open(report_dir / "evidence.jsonl", "a") as f:
        f.write(redact(json.dumps(line)) + "\n")
