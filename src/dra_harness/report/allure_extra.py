"""What Allure needs beyond allure-pytest's results: environment, categories, evidence attachments.

allure-pytest writes one ``*-result.json`` per test. The report adds the run's
fingerprint as ``environment.properties`` (Allure's environment widget), failure
categories as ``categories.json``, and each test's evidence records as a JSON
attachment, so the Allure view shows the same facts as ``signoff.html``; a check the
report shows as not established is "unknown" there rather than passed. Idempotent:
re-rendering a run does not attach twice.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from dra_harness.kube.types import Obj
from dra_harness.report.files import atomic_write, redact
from dra_harness.report.results import NOT_ESTABLISHED

CATEGORIES = [
    {"name": "Scheduler could not allocate devices", "matchedStatuses": ["failed", "broken"],
     "messageRegex": r"(?s).*(cannot allocate all claims|unschedulable|Pending).*"},
    {"name": "Timed out waiting", "matchedStatuses": ["failed", "broken"],
     "messageRegex": r"(?s).*(timed out|did not .* within|deadline|WaitError).*"},
    {"name": "API not served by this Kubernetes version", "matchedStatuses": ["skipped"],
     "messageRegex": r"(?s).*(serves no|not served|needs DRA).*"},
    {"name": "Needs real devices or containers", "matchedStatuses": ["skipped"],
     "messageRegex": r"(?s).*(simulated|in-container|KWOK).*"},
    {"name": "Product defects", "matchedStatuses": ["failed"]},
    {"name": "Harness defects", "matchedStatuses": ["broken"]},
]


def _properties(env: dict[str, str]) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("\n", " ").replace("=", "\\=").replace(":", "\\:")

    return "".join(f"{esc(k)}={esc(v)}\n" for k, v in env.items())


def environment(summary: Obj) -> dict[str, str]:
    fp = summary.get("fingerprint") or {}
    gates = fp.get("feature_gates") or {}
    api = fp.get("resource_api") or {}
    inv = fp.get("inventory") or {}
    return {
        "Run": summary["run_id"],
        "Verdict": summary["verdict"],
        "Kubernetes": str((fp.get("kubernetes") or {}).get("gitVersion", "unknown")),
        "Provider": str(fp.get("provider", "unknown")),
        "DRA feature gates on": ", ".join(gates.get("enabled", [])) if gates.get("status") == "read" else "unknown",
        "resource.k8s.io versions": ", ".join(api.get("versions", [])) or "unknown",
        "Drivers": ", ".join(d["name"] for d in fp.get("drivers", [])) or "none",
        "Devices": str(sum(d.get("devices", 0) for d in inv.values() if isinstance(d, dict))),
        "Harness": summary["harness_version"],
    }


def _nodeid(result: Obj) -> str | None:
    """allure-pytest's fullName ``suites.test_x#test_y`` plus its parameters -> pytest's node id."""
    full = result.get("fullName") or ""
    module, _, func = full.partition("#")
    if not func:
        return None
    name = result.get("name") or func
    return module.replace(".", "/") + ".py::" + (name if name.startswith(func) else func)


def enrich(run_dir: Path, summary: Obj) -> list[Path]:
    """Write the extras and attach the evidence; return the files written (the run directory records them)."""
    allure_dir = run_dir / "allure-results"
    allure_dir.mkdir(parents=True, exist_ok=True)
    written = [allure_dir / "environment.properties", allure_dir / "categories.json"]
    atomic_write(written[0], _properties(environment(summary)))
    atomic_write(written[1], json.dumps(CATEGORIES, indent=2))
    by_id = {r["nodeid"]: r for r in summary["results"]}
    for path in sorted(allure_dir.glob("*-result.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        row = by_id.get(_nodeid(result) or "")
        if row is None or not row["evidence"]:
            continue
        if row["outcome"] == NOT_ESTABLISHED and result.get("status") == "passed":
            # Allure has no "not established"; "unknown" keeps it from counting as passed.
            result.update(status="unknown", statusDetails={"message": row["message"]})
            atomic_write(path, json.dumps(result))
        if any(a.get("name") == "dra-harness evidence" for a in result.get("attachments", [])):
            continue
        source = f"{uuid.uuid4()}-attachment.json"
        atomic_write(allure_dir / source, redact(json.dumps(row["evidence"], indent=2)))
        result.setdefault("attachments", []).append({"name": "dra-harness evidence", "source": source, "type": "application/json"})
        atomic_write(path, json.dumps(result))
        written.append(allure_dir / source)
    return written
