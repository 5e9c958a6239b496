"""Operators' sections of the sign-off read as sentences and tables, from the suites' evidence."""

from __future__ import annotations

from dra_harness.checks.metrics import plugin_means
from dra_harness.report.operations import governance_rows, health_rows, metrics_rows

_TEXT = """# TYPE scheduler_plugin_execution_duration_seconds histogram
scheduler_plugin_execution_duration_seconds_bucket{{extension_point="Filter",plugin="DynamicResources",status="Success",le="+Inf"}} {n}
scheduler_plugin_execution_duration_seconds_sum{{extension_point="Filter",plugin="DynamicResources",status="Success"}} {s}
scheduler_plugin_execution_duration_seconds_count{{extension_point="Filter",plugin="DynamicResources",status="Success"}} {n}
scheduler_plugin_execution_duration_seconds_sum{{extension_point="Reserve",plugin="DynamicResources",status="Success"}} 1
scheduler_plugin_execution_duration_seconds_count{{extension_point="Reserve",plugin="DynamicResources",status="Success"}} 2
scheduler_plugin_execution_duration_seconds_sum{{extension_point="Filter",plugin="NodeName",status="Success"}} 9
scheduler_plugin_execution_duration_seconds_count{{extension_point="Filter",plugin="NodeName",status="Success"}} 9
"""


def _result(concern: str, test: str, records: list[dict], outcome: str = "passed") -> dict:
    return {"concern": concern, "test": test, "nodeid": f"suites/test_x.py::{test}", "outcome": outcome, "evidence": records}


def _summary(*results: dict, allocations: list[dict] | None = None) -> dict:
    return {"results": list(results), "allocations": {"rows": allocations or []}}


def test_a_series_that_did_not_rise_enough_says_by_how_much_it_had_to():
    rows = metrics_rows(_summary(_result("metrics", "t", [{"kube-scheduler": {
        "moved": {"a{x=1}": [0, 4]}, "still": {"b{y=2}": [3, 4, 4]}, "absent": ["c"]}}])))
    assert [(r["series"], r["change"], r["status"]) for r in rows] == [
        ("a{x=1}", "0 → 4", "moved"), ("b{y=2}", "3 → 4", "did not rise by 4"), ("c", "—", "not served")]


def test_a_kubelets_series_are_named_with_its_node():
    rows = metrics_rows(_summary(_result("metrics", "t", [{"node": "n1", "moved": {"dra_x": [0, 1]}, "still": {}, "absent": []}])))
    assert rows[0]["component"] == "kubelet on n1"


def test_a_class_let_into_a_limited_namespace_is_said_in_capitals():
    rows = governance_rows(_summary(_result("governance", "limits", [{
        "allowed_class": "a", "refused": {"claim": "403 no", "template": None}, "own_class": "created"}], "failed")))
    assert "claim for another class refused; template for another class LET IN" in rows[0]["seen"]


def test_the_driver_audit_names_what_it_may_do_beyond_need_and_the_slice_probe():
    rows = governance_rows(_summary(_result("governance", "audit", [{
        "section": "governance", "service_account": "ns/sa", "granted_beyond": ["get secrets"], "findings": ["may read Secrets"],
        "slice_probe": {"own_node": "accepted", "other_node": "refused: 403 no"}}])))
    assert "may get secrets; a slice for its own node accepted, for another node refused: 403 no" in rows[0]["seen"]
    assert rows[0]["findings"] == "may read Secrets"


def test_health_counts_each_nodes_claims_by_what_its_kubelet_reported():
    allocations = [{"node": "n1", "workload": "Pod/p", "claims": [{"claim": "c", "health": {"cdi=1": "Unknown"}}]},
                   {"node": "n1", "workload": "Pod/q", "claims": [{"claim": "d", "health": {"cdi=1": "Healthy"}}]}]
    rows = health_rows(_summary(_result("device-health", "t", [{"tainted": "gpu-0", "evicted_after_s": 0.04,
                                                         "condition": {"reason": "DeletionByDeviceTaintManager"}}]),
                                allocations=allocations))
    assert rows[0]["what"] == "NoExecute on gpu-0: the pod holding it was evicted after 0.04 s (DeletionByDeviceTaintManager)"
    assert rows[1]["what"] == "kubelet on n1 reported device health for the run's claims: Healthy 1, Unknown 1"


def test_the_dra_plugins_mean_time_per_call_is_taken_over_the_work_between_two_readings():
    means = plugin_means(_TEXT.format(n=2, s=0.5), _TEXT.format(n=6, s=0.9))
    assert means == {"Filter": 0.1}  # (0.9 - 0.5) / (6 - 2); Reserve had no sampled call in between
