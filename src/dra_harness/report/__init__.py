"""The run directory a reviewer signs: JUnit, Allure, summary.json, signoff.md and signoff.html.

One concept per module: :mod:`.fingerprint` (what was tested), :mod:`.results` (what
the tests found), :mod:`.contention` (the design comparison), :mod:`.design` (what the
user meant to build), :mod:`.vendor` (what to ask the GPU vendor), :mod:`.summary`
(the machine-readable whole), :mod:`.render` (the people-readable whole),
:mod:`.diff` (two runs compared: the pre-upgrade gate), :mod:`.compare` (several runs side by side),
:mod:`.provenance` (where each check ran and what made its devices), :mod:`.readable`
(evidence as phrases with units) and :mod:`.pdf` (the sign-off printed for filing).
"""

from __future__ import annotations

from typing import Any

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    # Lazy, so the pytest plugin's writers can use .files (redaction) without importing
    # the renderers (jinja2, matplotlib) in every test process.
    if name == "write_report":
        from dra_harness.report.summary import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
