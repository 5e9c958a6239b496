"""The Allure extras on synthetic runs: links, run parameters, evidence steps, categories; re-rendering adds nothing twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report import write_report
from dra_harness.report.allure_extra import (CATEGORIES, DEFAULT_DOCS, DOCS, EVIDENCE_ATTACHMENT, STEP_PREFIX, decorate,
                                            parameters)
from dra_harness.report.results import CONCERNS
from dra_harness.report.summary import build_summary
from tests.unit.report_runs import make_run

ALLOCATION = "test_a_claim_for_several_devices_gets_distinct_devices_on_one_node"


def _result(run: Path, module: str, name: str, **extra) -> Path:
    allure = run / "allure-results"
    allure.mkdir(exist_ok=True)
    path = allure / f"{module}-{len(list(allure.iterdir()))}-result.json"
    path.write_text(json.dumps({"uuid": path.name, "status": "passed", "name": name, "start": 1000, "stop": 2000,
                                "fullName": f"suites.test_{module}#{name}", **extra}))
    return path


def test_a_result_gets_its_concerns_docs_the_run_facts_and_one_step_per_evidence_record(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    path = _result(run, "allocation", ALLOCATION, parameters=[{"name": "x", "value": "1"}],
                   steps=[{"name": "create the claim", "status": "passed"}])
    write_report(run)
    result = json.loads(path.read_text())
    assert [link["url"] for link in result["links"]] == [url for _, url in DOCS["allocation"]]
    assert all(link["type"] == "link" and link["url"].startswith("https://kubernetes.io/docs/") for link in result["links"])
    assert {p["name"]: p["value"] for p in result["parameters"]} == {
        "x": "1", "Kubernetes": "v1.37.2", "Provider": "local", "Nodes with devices": "1", "DRA drivers": "gpu.example.com"}
    # allure-pytest's own steps stay first; the evidence record ({"count": 4, "node": "gpu-node-1"}) follows.
    assert [s["name"] for s in result["steps"]] == ["create the claim", STEP_PREFIX + "count=4, node=gpu-node-1"]
    step = result["steps"][1]
    assert step["status"] == "passed" and step["start"] == step["stop"] > 1_000_000_000_000
    assert step["parameters"] == [{"name": "count", "value": "4"}, {"name": "node", "value": "gpu-node-1"}]
    assert [a["name"] for a in result["attachments"]] == [EVIDENCE_ATTACHMENT]


def test_re_rendering_adds_no_link_parameter_step_or_attachment_twice(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    path = _result(run, "allocation", ALLOCATION)
    write_report(run)
    once = path.read_text()
    files = sorted(p.name for p in (run / "allure-results").iterdir())
    write_report(run)
    write_report(run)
    assert path.read_text() == once
    assert sorted(p.name for p in (run / "allure-results").iterdir()) == files
    # Control: the decoration did change the result the first time.
    assert json.loads(once)["steps"] and json.loads(once)["links"]


def test_steps_follow_the_evidence_when_it_changes_and_long_values_are_cut():
    row = {"outcome": "passed", "message": "", "evidence": [{"t": 1.5, "devices": ["gpu-0"] * 200, "scheduler_message": "x" * 90}]}
    result = decorate({"fullName": "suites.test_topology#test_t", "start": 7}, row, [])
    (step,) = result["steps"]
    assert step["name"] == STEP_PREFIX + "devices, scheduler_message=" + "x" * 39 + "…" and step["start"] == 1500
    assert len(step["parameters"][0]["value"]) == 500 and step["parameters"][0]["value"].endswith("…")
    row["evidence"] = [{"node": "n1"}, {"node": "n2"}]
    assert [s["name"] for s in decorate(result, row, [])["steps"]] == [STEP_PREFIX + "node=n1", STEP_PREFIX + "node=n2"]
    assert all(s["start"] == 7 for s in result["steps"])  # no time recorded: the test's start


def test_every_concern_links_to_its_docs_and_an_unknown_module_to_the_dra_page():
    assert {cid for cid, _ in CONCERNS.values()} <= set(DOCS)
    for name, url in (link for links in DOCS.values() for link in links):
        assert name and re.fullmatch(r"https://(kubernetes\.io/(docs|releases)/|github\.com/kubernetes/kubernetes/)\S+", url), url
    result = decorate({"fullName": "tests.test_other#test_x"}, None, [])
    assert [link["name"] for link in result["links"]] == ["Dynamic Resource Allocation"]


def test_the_links_follow_the_concern_the_suite_declares_not_its_modules_name():
    """A suite module named for nothing in the table (a user's, or one renamed) declares its concern with
    ``pytest.mark.concern``; the results row carries it, and the links follow the row."""
    row = {"concern": "node-drain", "outcome": "passed", "evidence": []}
    result = decorate({"fullName": "suites.test_maintenance_window#test_x"}, row, [])
    assert [link["url"] for link in result["links"]] == [url for _, url in DOCS["node-drain"]]
    # Negative control: without the row, the module's name alone finds no concern.
    assert [link["url"] for link in decorate({"fullName": "suites.test_maintenance_window#test_x"}, None, [])["links"]] \
        == [url for _, url in DEFAULT_DOCS]


def test_a_not_established_check_is_unknown_in_allure_even_without_an_attachment():
    row = {"outcome": "not established", "message": "not established: compared with itself", "evidence": []}
    assert decorate({"fullName": "suites.test_inventory#t", "status": "passed"}, row, [])["status"] == "unknown"
    assert decorate({"fullName": "suites.test_inventory#t", "status": "failed"}, row, [])["status"] == "failed"


def _categories_of(status: str, message: str) -> list[str]:
    """What Allure does: every category whose statuses include the result's and whose regex matches the whole message."""
    return [c["name"] for c in CATEGORIES if status in c["matchedStatuses"]
            and (c.get("messageRegex") is None or re.fullmatch(c["messageRegex"], message))]


MESSAGES = {
    ("failed", "AssertionError: assert 3 == 4"): "Product finding: other failed checks",
    ("failed", "dra_harness.kube.waits.WaitTimeout: timed out after 60s waiting for pod p: 0/2 nodes: cannot allocate all claims"):
        "Product finding: devices not allocated",
    ("failed", "dra_harness.kube.waits.WaitTimeout: timed out after 60s waiting for claim c\nmore"):
        "Product finding: timed out waiting for the cluster",
    ("broken", "dra_harness.kube.rest.ApiError: 500 Internal Server Error"):
        "Harness error: the API server answered with an error or not at all",
    ("broken", "dra_harness.errors.LockTimeout: run r2 held the cluster"): "Harness error: another run held the cluster",
    ("broken", "dra_harness.providers.embedded.realnode.RealNodeError: runc missing"):
        "Harness error: the cluster or a prerequisite is missing",
    ("broken", "dra_harness.checks.incontainer.ProbeError: the probe printed no report"):
        "Harness error: the check could not reach a verdict",
    ("broken", "KeyError: 'spec'"): "Harness error: other (a harness bug or its setup)",
    ("unknown", "not established: compared with itself"): "Not established (passed, but proved nothing)",
}


def test_each_failed_or_broken_result_falls_in_exactly_one_category_of_its_kind():
    for (status, message), category in MESSAGES.items():
        assert _categories_of(status, message) == [category], message
    # Product findings are failed results only, harness errors broken ones only.
    for c in CATEGORIES:
        kind = c["name"].partition(":")[0]
        assert c["matchedStatuses"] == {"Product finding": ["failed"], "Harness error": ["broken"]}.get(kind, c["matchedStatuses"])
    # Control: the same message under the other status lands in the other kind.
    assert _categories_of("broken", "AssertionError: assert 3 == 4") == ["Harness error: other (a harness bug or its setup)"]


def test_the_run_facts_say_unknown_without_a_fingerprint(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    (run / "fingerprint.json").unlink()
    facts = {p["name"]: p["value"] for p in parameters(build_summary(run))}
    assert facts == {"Kubernetes": "unknown", "Provider": "unknown", "Nodes with devices": "unknown", "DRA drivers": "none"}


def test_report_allure_without_allure_results_is_one_line_naming_them_and_renders_nothing(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    result = CliRunner().invoke(main, ["report", str(run), "--allure"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{run / 'allure-results'} does not exist" in " ".join(result.output.split())
    assert not (run / "allure-results").exists() and not (run / "signoff.html").exists()
    # An allure-results/ with only the report's extras (no test result) is refused the same way.
    write_report(run)
    assert (run / "allure-results" / "categories.json").exists()
    result = CliRunner().invoke(main, ["report", str(run), "--allure"])
    assert result.exit_code == 2 and "holds no Allure test results" in " ".join(result.output.split())
