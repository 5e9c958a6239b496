"""Checks against a baseline taken from the cluster under test are "not established", never passed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dra_harness.providers import existing
from dra_harness.providers.hardware import Hardware
from dra_harness.report import write_report
from dra_harness.report.results import NOT_ESTABLISHED, established
from dra_harness.report.summary import build_summary
from dra_harness.checks.sharing import NOTHING_AUDITED
from dra_harness.options import RunConfig
from tests.unit.report_runs import DEFAULT_TESTS, make_run

HARDWARE_FILE = Path(__file__).resolve().parents[2] / "fixtures/hardware/embedded-default.yaml"
INVENTORY = "suites/test_inventory.py::test_device_counts_match_the_expected_hardware"
TENANT_AUDIT = "suites/test_sharing.py::test_no_existing_claim_is_shared_across_tenants"


def _with_baseline(source: str, outcome: str = "passed") -> list:
    """The default run, its inventory check recording where its expected hardware came from."""
    return [(m, n, outcome if m == "inventory" else o, s, [{"expected_source": source}] if m == "inventory" else r)
            for m, n, o, s, r in DEFAULT_TESTS]


def test_a_pass_against_an_observed_baseline_is_not_established():
    outcome, message = established("passed", "", [{"t": 1.0, "expected_source": "observed"}])
    assert outcome == NOT_ESTABLISHED and "compared the cluster with itself" in message


def test_a_pass_against_a_file_or_the_harness_own_hardware_stays_a_pass():
    for source in ("file", "provider"):
        assert established("passed", "", [{"expected_source": source}]) == ("passed", "")
    assert established("passed", "", []) == ("passed", "")  # checks that use no baseline


def test_a_failure_against_an_observed_baseline_is_still_a_failure():
    assert established("failed", "assert 3 == 4", [{"expected_source": "observed"}]) == ("failed", "assert 3 == 4")


def test_the_report_shows_an_observed_inventory_check_as_not_established_never_pass(tmp_path):
    run = make_run(tmp_path / "observed", tests=_with_baseline("observed"), contention_scale=None)
    summary = build_summary(run)
    row = next(r for r in summary["results"] if r["nodeid"] == INVENTORY)
    assert row["outcome"] == NOT_ESTABLISHED
    inventory = next(c for c in summary["concerns"] if c["id"] == "inventory")
    assert inventory["outcome"] == NOT_ESTABLISHED and inventory["checks"][0]["outcome"] == NOT_ESTABLISHED
    assert summary["counts"] == {"passed": len(DEFAULT_TESTS) - 1, NOT_ESTABLISHED: 1}
    assert "1 not established (their baseline came from the cluster under test" in summary["verdict_reason"]
    assert [f["severity"] for f in summary["findings"]] == [NOT_ESTABLISHED]
    html = write_report(run).read_text()
    md = (run / "signoff.md").read_text()
    assert f"| Inventory | test_device_counts_match_the_expected_hardware | {NOT_ESTABLISHED} |" in md
    assert "| Inventory | passed |" not in md and f"| Inventory | {NOT_ESTABLISHED} |" in md
    # The overview card, the concern heading, its check (the conformance section's own verdicts aside).
    checks_view = re.sub(r'<h2 id="conformance">.*?<h2 id="fingerprint">', "", html, flags=re.S)
    assert html != checks_view and checks_view.count(f">{NOT_ESTABLISHED}</span>") == 3


def test_the_same_run_with_a_hardware_file_or_the_embedded_cluster_passes(tmp_path):
    for source in ("file", "provider"):
        summary = build_summary(make_run(tmp_path / source, tests=_with_baseline(source), contention_scale=None))
        assert next(r for r in summary["results"] if r["nodeid"] == INVENTORY)["outcome"] == "passed"
        assert summary["counts"] == {"passed": len(DEFAULT_TESTS)} and summary["findings"] == []


def _allure_result(run: Path) -> Path:
    allure = run / "allure-results"
    allure.mkdir()
    path = allure / "1-result.json"
    path.write_text(json.dumps({"uuid": "1", "status": "passed", "name": "test_device_counts_match_the_expected_hardware",
                                "fullName": "suites.test_inventory#test_device_counts_match_the_expected_hardware"}))
    return path


def test_allure_shows_a_not_established_check_as_unknown_not_passed(tmp_path):
    observed = make_run(tmp_path / "observed", tests=_with_baseline("observed"), contention_scale=None)
    result = _allure_result(observed)
    write_report(observed)
    assert json.loads(result.read_text())["status"] == "unknown"
    # Control: with a hardware file it stays passed.
    from_file = make_run(tmp_path / "file", tests=_with_baseline("file"), contention_scale=None)
    result = _allure_result(from_file)
    write_report(from_file)
    assert json.loads(result.read_text())["status"] == "passed"


def test_an_existing_cluster_without_a_hardware_file_is_its_own_baseline(monkeypatch):
    monkeypatch.setattr(existing, "connect", lambda kubeconfig, context: object())
    monkeypatch.setattr(existing, "observed_hardware",
                        lambda kube, profile: Hardware(driver=profile.driver, device_class=profile.device_class, nodes={}))
    observed = existing.ExistingProvider(RunConfig(kubeconfig="kc", driver="example"), "r1").open(owner_pid=0)
    assert observed.expected_source == "observed"
    from_file = existing.ExistingProvider(RunConfig(kubeconfig="kc", driver="example", expected_hardware=str(HARDWARE_FILE)),
                                          "r1").open(owner_pid=0)
    assert from_file.expected_source == "file"


def _tenant_audit_over(claims: int) -> list:
    """The default run, its tenant audit having audited ``claims`` claims (recorded as the suite does)."""
    records = [{"claims_audited": claims, "findings": []}] + ([{"not_established": NOTHING_AUDITED}] if not claims else [])
    return [(m, n, o, s, records if n == TENANT_AUDIT.split("::")[1] else r) for m, n, o, s, r in DEFAULT_TESTS]


def test_a_tenant_audit_over_no_claims_is_not_established_and_says_why(tmp_path):
    summary = build_summary(make_run(tmp_path / "empty", tests=_tenant_audit_over(0), contention_scale=None))
    row = next(r for r in summary["results"] if r["nodeid"] == TENANT_AUDIT)
    assert row["outcome"] == NOT_ESTABLISHED and row["message"] == f"not established: {NOTHING_AUDITED}"
    assert summary["counts"] == {"passed": len(DEFAULT_TESTS) - 1, NOT_ESTABLISHED: 1}
    assert "1 not established (the cluster did not let them be tested, they had nothing to check" in summary["verdict_reason"]
    assert [(f["severity"], f["test"]) for f in summary["findings"]] == [(NOT_ESTABLISHED, TENANT_AUDIT)]


def test_a_tenant_audit_over_claims_passes_and_a_failed_one_stays_failed(tmp_path):
    summary = build_summary(make_run(tmp_path / "audited", tests=_tenant_audit_over(3), contention_scale=None))
    assert next(r for r in summary["results"] if r["nodeid"] == TENANT_AUDIT)["outcome"] == "passed"
    assert established("failed", "crossing", [{"not_established": NOTHING_AUDITED}]) == ("failed", "crossing")
