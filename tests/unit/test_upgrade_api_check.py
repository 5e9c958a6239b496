"""The upgrade go/no-go's pure parts: removals by target, the deprecated-API gauge, manifests, writers, gates."""

from __future__ import annotations

import pytest

from dra_harness.errors import InputError
from dra_harness.upgrade import api_check

METRICS = """# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="resource.k8s.io",removed_release="1.38",resource="resourceclaims",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="resource.k8s.io",removed_release="1.39",resource="resourceslices",subresource="",version="v1beta2"} 1
apiserver_requested_deprecated_apis{group="flowcontrol.apiserver.k8s.io",removed_release="1.32",resource="flowschemas",subresource="",version="v1beta3"} 1
"""


def _removed(target: str) -> list[api_check.Removal]:
    to = api_check.minor(target)
    return [r for r in api_check.lifecycle() if api_check._release(r.removed) <= to]


def test_1_38_removes_every_v1beta1_kind_and_1_39_also_v1beta2():
    assert {(r.version, r.kind) for r in _removed("1.38")} == {
        ("v1beta1", k) for k in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")}
    assert {r.version for r in _removed("v1.39.0")} == {"v1beta1", "v1beta2", "v1alpha3"}


def test_only_series_of_a_removed_dra_version_count_as_requests():
    assert api_check.requested(METRICS, _removed("1.38")) == [
        {"version": "v1beta1", "resource": "resourceclaims", "subresource": "", "removed_release": "1.38"}]
    # Negative control: 1.37 removes nothing, so the same gauge names no request.
    assert api_check.requested(METRICS, _removed("1.37")) == []


def test_a_manifest_of_a_removed_version_is_named_by_file_and_document():
    docs = [("a.yaml", 1, {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim"}),
            ("a.yaml", 2, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}),
            ("b.yaml", 1, {"apiVersion": "v1", "kind": "Pod"})]
    assert api_check.in_manifests(docs, _removed("1.38")) == ["a.yaml#1: ResourceClaim resource.k8s.io/v1beta1"]


def test_a_stored_object_names_the_manager_that_wrote_it_through_a_removed_version():
    claim = {"metadata": {"namespace": "ml", "name": "c", "managedFields": [
        {"manager": "old-operator", "operation": "Update", "apiVersion": "resource.k8s.io/v1beta1", "time": "2026-01-01T00:00:00Z"},
        {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "resource.k8s.io/v1", "time": "2026-01-02T00:00:00Z"}]}}
    assert api_check.writers([claim], "ResourceClaim", {"v1beta1"}) == [
        "ResourceClaim ml/c: Update through resource.k8s.io/v1beta1 by manager 'old-operator' at 2026-01-01T00:00:00Z"]


def test_gate_changes_between_known_releases_and_an_unknown_target_says_so():
    changes, note, known = api_check.gate_changes("v1.36.3", "1.37")
    assert known and changes and "1.36.3" in note and "1.37.2" in note
    assert any(c.startswith("DRADeviceTaintRules:") or "new in 1.37.2" in c for c in changes), changes
    changes, note, known = api_check.gate_changes("v1.37.2", "1.38")  # the beta's table: what 1.38 changes
    assert known and "1.38.0-beta.0" in note, note
    assert any(c.startswith("DynamicResourceAllocation: gone in 1.38.0-beta.0") for c in changes), changes
    assert any(c.startswith("DRADeviceTaints: GA and locked on in 1.38.0-beta.0") for c in changes), changes
    changes, note, known = api_check.gate_changes("v1.37.2", "1.39")
    assert not known and changes == [] and "1.39 not known" in note


@pytest.mark.parametrize("text", ["1.x", "", "latest", "2"])
def test_a_target_that_is_not_a_release_is_one_line(text):
    with pytest.raises(InputError, match="expected a Kubernetes release"):
        api_check.minor(text, "--to")


def test_the_report_shows_the_runs_upgrade_readiness_and_an_older_run_says_not_recorded(tmp_path):
    import json

    from dra_harness.report.summary import write_report
    from tests.unit.report_runs import make_run

    run = make_run(tmp_path / "run", contention_scale=None)
    write_report(run)
    assert "Upgrade readiness\n\nNot recorded in this run." in (run / "signoff.md").read_text()
    verdict = api_check.Verdict("v1.37.2", "1.38", _removed("1.38"), [])
    verdict.requested = api_check.requested(METRICS, verdict.removed)
    fp = json.loads((run / "fingerprint.json").read_text())
    fp["upgrade_readiness"] = verdict.as_json()
    (run / "fingerprint.json").write_text(json.dumps(fp))
    write_report(run)
    md = (run / "signoff.md").read_text()
    assert "**NO-GO** for Kubernetes v1.37.2 → 1.38" in md
    assert "- would break: clients requested resource.k8s.io/v1beta1 resourceclaims" in md
    assert "NO-GO" in (run / "signoff.html").read_text()


def test_a_server_counts_a_removed_version_only_from_the_release_that_deprecates_it():
    # 1.35 deprecates v1beta1 but not v1beta2 (1.36) nor v1beta2's DeviceTaintRule (1.39): those go uncounted.
    on_135 = api_check.uncounted((1, 35), _removed("1.39"))
    assert on_135 == ["resource.k8s.io/v1alpha3 DeviceTaintRule (deprecated in 1.36)",
                      "resource.k8s.io/v1beta2 DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice (deprecated in 1.36)"]
    assert api_check.uncounted((1, 36), _removed("1.39")) == []
    assert api_check.uncounted((1, 37), _removed("1.38")) == []


def test_the_gauge_window_is_the_api_servers_start_and_absent_without_it():
    assert api_check.started("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e+09\n") == 1.7e9
    assert api_check.started(METRICS) is None


def test_a_verdict_with_uncounted_clients_says_go_only_for_what_the_server_shows():
    v = api_check.Verdict("v1.35.4", "1.39", _removed("1.39"), [], uncounted=api_check.uncounted((1, 35), _removed("1.39")),
                          counted_since=0.0)
    lines = api_check.text(v)
    assert any(line.startswith("NOT ESTABLISHED  clients of resource.k8s.io/v1beta2 DeviceClass") for line in lines), lines
    assert lines[-1].startswith("GO for what this API server shows") and not v.as_json()["established"]
    assert any(line.startswith("window   clients counted since the API server started at 1970-01-01") for line in lines)
