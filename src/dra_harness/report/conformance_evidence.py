"""The report's "Conformance evidence": a verdict per requirement, in the reader's terms, with its provenance.

Why a module of its own: :mod:`dra_harness.conformance` judges plain data (check -> outcome); the
report has result rows (pytest node ids, our outcome "not established", each row's provenance)
and must say, beside each verdict, *where* the checks behind it ran: "met" on simulated nodes
with the example driver is not "met" on a vendor's GPUs, and a buyer signs the difference.

Only suite checks count (``suites/test_*.py``); an upgrade's or a contention run's rows are not
in the mapping. A check whose outcome is "not established" counts as skipped, its reason kept:
it proved nothing either way.
"""

from __future__ import annotations

from collections import Counter

from dra_harness import conformance
from dra_harness.kube.types import Obj
from dra_harness.report.results import NOT_ESTABLISHED


def _outcome(outcome: str) -> str:
    return "skipped" if outcome == NOT_ESTABLISHED else outcome


def _provenance(rows: list[Obj]) -> str:
    """What the checks that ran (passed or failed) ran on, most frequent first; '' when none ran."""
    texts = Counter(str((r.get("provenance") or {}).get("text") or "placement not recorded")
                    for r in rows if r["outcome"] in ("passed", "failed", "error"))
    return " | ".join(f"{text} ({n} case{'s' if n > 1 else ''})" for text, n in texts.most_common())


def _drivers(rows: list[Obj], builds: dict[str, str]) -> str:
    """The drivers whose devices the checks that ran held, each with its build when the fingerprint knows it."""
    names = sorted({d for r in rows if r["outcome"] in ("passed", "failed", "error")
                    for d in (r.get("provenance") or {}).get("drivers") or []})
    return ", ".join(f"{n} ({builds[n]})" if builds.get(n) else n for n in names)


def section(rows: list[Obj], builds: dict[str, str] | None = None, mapping: conformance.Mapping | None = None) -> Obj:
    """``{"rows": [...], "counts": {state: n}, "gaps": n}`` for the report (``rows``: the summary's results,
    each with ``provenance`` already added; ``builds``: driver name -> what the fingerprint says built it)."""
    mapping = mapping or conformance.load()
    suite_rows = [r for r in rows if conformance.check_id(r["nodeid"]) in mapping.checks]
    outcomes = conformance.check_outcomes((r["nodeid"], _outcome(r["outcome"])) for r in suite_rows)
    reasons: dict[str, str] = {}
    for r in suite_rows:
        if r["outcome"] != "passed" and r.get("message"):
            reasons.setdefault(conformance.check_id(r["nodeid"]), str(r["message"]).splitlines()[0][:300])
    by_check: dict[str, list[Obj]] = {}
    for r in suite_rows:
        by_check.setdefault(conformance.check_id(r["nodeid"]), []).append(r)
    out = []
    for v in conformance.verdicts(mapping, outcomes, reasons):
        req = v.requirement
        ran = [r for c in v.checks for r in by_check.get(c, [])]
        out.append({
            "id": req.id, "framework": req.framework, "kar": req.kar, "title": req.title, "level": req.level,
            "since": req.since, "source": req.source, "state": v.state, "reason": v.reason,
            "checks": [{"check": c, "outcome": outcomes.get(c, "not run")} for c in v.checks],
            "provenance": _provenance(ran), "drivers": _drivers(ran, builds or {}),
        })
    return {"rows": out, "counts": dict(Counter(r["state"] for r in out)),
            "gaps": sum(not r["checks"] for r in out)}


def states(summary: Obj) -> dict[str, str]:
    """Requirement id -> state, from a summary (``{}`` for a summary written before the section existed)."""
    return {r["id"]: r["state"] for r in (summary.get("conformance") or {}).get("rows") or []}
