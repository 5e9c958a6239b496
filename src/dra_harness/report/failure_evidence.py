"""What a failed test leaves behind: the state of its namespace, and why pods wait.

Collected in the namespace fixture's teardown, before the namespace is deleted, only
when the test failed (outcomes are kept in ``item.stash`` by a report hook, as in
pytest's own plugins). Saved as JSON under ``<report-dir>/failures/`` and attached to
the Allure result. Pod logs exist only where containers run; on simulated nodes the
dump says so instead. Events and statuses quote whatever a workload printed, so the
dump is redacted before it is written or attached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dra_harness.checks.diagnose import diagnose
from dra_harness.kube import rest
from dra_harness.kube.rest import ApiError, Kube
from dra_harness.report.files import redact
from dra_harness.errors import HarnessError

_KEEP = ("metadata", "spec", "status")


def _trim(obj: dict) -> dict:
    out = {k: obj[k] for k in _KEEP if k in obj}
    out.get("metadata", {}).pop("managedFields", None)
    return out


def collect(kube: Kube, namespace: str, driver: str) -> dict[str, Any]:
    """Pods, claims, events and the driver's slices, plus a diagnosis of each Pending pod."""
    dump: dict[str, Any] = {"namespace": namespace}
    for key, res, ns in (
        ("pods", rest.PODS, namespace),
        ("resourceclaims", rest.RESOURCE_CLAIMS, namespace),
        ("resourceclaimtemplates", rest.RESOURCE_CLAIM_TEMPLATES, namespace),
        ("events", rest.EVENTS, namespace),
        ("resourceslices", rest.RESOURCE_SLICES, None),
    ):
        try:
            items = kube.list(res, ns, field_selector=f"spec.driver={driver}" if key == "resourceslices" else None)
            dump[key] = [_trim(i) for i in items]
        except ApiError as e:
            dump[key] = f"unavailable: {e}"
    try:
        dump["pending_diagnosis"] = [d.as_dict() for d in diagnose(kube, namespace)]
    except (HarnessError, ValueError) as e:  # an API error, a selector celpy cannot compile, a bad quantity
        dump["pending_diagnosis"] = f"unavailable: {e}"
    return dump


def save(dump: dict[str, Any], report_dir: Path | None, test_slug: str) -> Path | None:
    text = redact(json.dumps(dump, indent=2, default=str))
    try:
        import allure

        allure.attach(text, name=f"namespace {dump['namespace']}", attachment_type=allure.attachment_type.JSON)
    except Exception:  # noqa: BLE001 - evidence must never turn a failure into an error
        pass
    if report_dir is None:
        return None
    path = report_dir / "failures" / f"{test_slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
