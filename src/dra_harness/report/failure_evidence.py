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
from collections.abc import Callable
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


NO_DRIVER_LOG = "no log: the driver's process or pod is not known here (name its DaemonSet with --driver-daemonset)"
#: Nodes whose driver log a dump carries at most: those the test's pods ran on, else the first with devices.
MAX_DRIVER_LOGS = 4


def collect(kube: Kube, namespace: str, driver: str, driver_log: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Pods, claims, events and the driver's slices, a diagnosis of each Pending pod, and the
    last lines of the driver on the nodes the test's pods used (``driver_log(node)``)."""
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
    if driver_log is not None:
        dump["driver_logs"] = _driver_logs(dump, driver_log)
    try:
        dump["pending_diagnosis"] = [d.as_dict() for d in diagnose(kube, namespace)]
    except (HarnessError, ValueError) as e:  # an API error, a selector celpy cannot compile, a bad quantity
        dump["pending_diagnosis"] = f"unavailable: {e}"
    return dump


def _driver_logs(dump: dict[str, Any], driver_log: Callable[[str], str]) -> dict[str, str]:
    pods, slices = (v if isinstance(v := dump.get(k), list) else [] for k in ("pods", "resourceslices"))
    nodes = sorted({p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")})
    nodes = nodes or sorted({s["spec"]["nodeName"] for s in slices if s["spec"].get("nodeName")})
    out = {}
    for node in nodes[:MAX_DRIVER_LOGS]:
        try:
            out[node] = driver_log(node) or NO_DRIVER_LOG
        except HarnessError as e:
            out[node] = f"unavailable: {e}"
    return out


def save(dump: dict[str, Any], report_dir: Path | None, test_slug: str) -> Path | None:
    text = redact(json.dumps(dump, indent=2, default=str))
    try:
        import allure

        allure.attach(text, name=f"namespace {dump['namespace']}", attachment_type=allure.attachment_type.JSON)
        for node, log in (dump.get("driver_logs") or {}).items():
            allure.attach(redact(log), name=f"driver log {node}", attachment_type=allure.attachment_type.TEXT)
    except Exception:  # noqa: BLE001 - evidence must never turn a failure into an error
        pass
    if report_dir is None:
        return None
    path = report_dir / "failures" / f"{test_slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
