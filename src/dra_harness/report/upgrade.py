"""The Upgrade concern, read from ``<run>/upgrade/upgrade.json`` (written by ``dra-harness upgrade``).

Each invariant becomes one result row, like a test case: the verdict, the concerns, the findings
and ``diff`` then treat an upgrade run as they treat a suite run (an invariant that held in the
base and breaks in the candidate is a regression). A file without the agreed shape is one
unreadable row naming what is missing, never a guess.
"""

from __future__ import annotations

import json
from pathlib import Path

from dra_harness.kube.types import Obj
from dra_harness.report.reading import present, read_bytes

FILE = Path("upgrade") / "upgrade.json"
SUITE = "upgrade"


def _row(test: str, outcome: str, message: str, evidence: list[Obj]) -> Obj:
    return {"suite": SUITE, "concern": SUITE, "test": test, "nodeid": f"{FILE}::{test}", "outcome": outcome,
            "seconds": 0.0, "message": message, "evidence": evidence, "failure_dump": None}


def rows(run_dir: Path) -> list[Obj]:
    """One row per invariant (``test_<name>``); none when the run performed no upgrade."""
    path = run_dir / FILE
    if not present(path):
        return []
    raw = read_bytes(path, "record")  # a link, a FIFO or a huge file is refused (exit 2), not reported as a row
    try:
        body = json.loads(raw)
        invariants = body["invariants"]
        steps = body["steps"]
        findings = body.get("findings") or []
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [_row("upgrade.json", "error", f"{FILE} unreadable: {e}", [])]
    timeline = [{k: s.get(k) for k in ("process", "version", "started_at", "stopping_s", "serving_after_s",
                                       "first_allocation_after_s", "real_node_pod_s")} for s in steps]
    out = []
    for i, inv in enumerate(invariants):
        breaches = inv.get("breaches") or []
        evidence: list[Obj] = [{"statement": inv.get("statement"), "breaches": breaches,
                                "from": body.get("from"), "to": body.get("to")}]
        if i == 0:  # the timeline and the findings once, on the first row
            evidence.append({"timeline": timeline, "findings": findings, "storage": body.get("storage")})
        outcome = "passed" if inv.get("held") else "failed"
        message = "" if not breaches else "; ".join(breaches[:3])
        out.append(_row(f"test_{inv['name']}", outcome, message, evidence))
    return out
