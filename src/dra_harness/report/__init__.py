"""The run directory a reviewer signs: JUnit, Allure, summary.json, signoff.md and signoff.html.

One concept per module: :mod:`.fingerprint` (what was tested), :mod:`.results` (what
the tests found), :mod:`.contention` (the design comparison), :mod:`.design` (what the
user meant to build), :mod:`.vendor` (what to ask the GPU vendor), :mod:`.summary`
(the machine-readable whole), :mod:`.render` (the people-readable whole) and
:mod:`.diff` (two runs compared: the pre-upgrade gate).
"""

from __future__ import annotations

from .summary import write_report

__all__ = ["write_report"]
