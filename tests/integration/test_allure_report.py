"""``dra-harness report RUN_DIR --allure``: the real Allure command line turns a run's results into a report a browser opens.

No cluster: a small pytest session with the harness's plugin (as ``dra-harness run``
drives it, minus the suites' fixtures) writes real allure-pytest results, evidence and
junit.xml into a run directory; the report command then installs Allure (Maven Central,
on first use) and generates ``allure-report/index.html``, which headless Chromium loads
from ``file://``: the summary widget shows the session's test count, the categories
widget the product finding and the harness error apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dra_harness.components import allure, prereqs
from dra_harness.components.build import checkout_root
from dra_harness.report.rundir import claim, read_marker
from dra_harness.report.summary import finish_run, start_run
from tests.unit.report_runs import make_run

ROOT = checkout_root() or Path.cwd()

SESSION = '''
import pytest


def test_a_claim_gets_a_device(evidence):
    evidence.record(node="gpu-node-0", device="gpu-0", allocated_after_s=0.4)


@pytest.mark.parametrize("count", [1, 2])
def test_claims_for_several_devices(evidence, count):
    evidence.record(count=count)


def test_the_scheduler_allocates_what_was_asked(evidence):
    evidence.record(requested=5)
    assert 3 == 4, "got 3 devices"


def test_the_harness_breaks():
    raise KeyError("spec")


def test_not_on_this_version():
    pytest.skip("Kubernetes v1.31 serves no DeviceTaintRule API")
'''
COUNT = 6


def _session(run: Path, tmp_path: Path) -> None:
    """What run_suites does: claim the directory, the fingerprint, pytest with the runner's report flags, finish."""
    start_run(run, "allure-test", ["dra-harness", "run"], None)
    fingerprint = make_run(tmp_path / "synthetic", tests=[], contention_scale=None) / "fingerprint.json"
    (run / "fingerprint.json").write_text(fingerprint.read_text())
    suites = tmp_path / "session" / "suites"
    suites.mkdir(parents=True)
    (suites / "test_allocation.py").write_text(textwrap.dedent(SESSION))
    args = [sys.executable, "-m", "pytest", "suites", f"--run-id=allure-{os.urandom(4).hex()}", f"--report-dir={run}",
            f"--junitxml={run / 'junit.xml'}", f"--alluredir={run / 'allure-results'}", "-p", "no:cacheprovider",
            "-p", "no:locust", "-o", "junit_family=xunit2", f"--rootdir={tmp_path / 'session'}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(args, cwd=tmp_path / "session", env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # one failed, one broken
    assert len(list((run / "allure-results").glob("*-result.json"))) == COUNT
    finish_run(run, complete=True, exit_code=1)


def _report(run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "report", str(run), "--allure"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def _dom(html: Path) -> str:
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom", html.as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=True).stdout


def shown_test_cases(dom: str) -> int | None:
    """The number in Allure's summary widget ("N test cases"), None when the widget did not render."""
    found = re.search(r'class="splash__title">\s*(\d+)\s*</div>\s*<div class="splash__subtitle">\s*test cases', dom)
    return int(found.group(1)) if found else None


@pytest.fixture(scope="module")
def allure_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp_path = tmp_path_factory.mktemp("allure")
    run = tmp_path / "run"
    _session(run, tmp_path)
    return run, _report(run)


def test_report_allure_writes_one_file_that_headless_chromium_opens_with_the_test_count(allure_run, tmp_path):
    prereqs.ensure(["chromium"], "rendering the Allure report in a browser")
    run, proc = allure_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    index = run / "allure-report" / "index.html"
    assert proc.stdout.strip().splitlines() == [str(run / "signoff.html"), str(index)]
    assert sorted(p.name for p in index.parent.iterdir()) == ["index.html"]
    dom = _dom(index)
    assert shown_test_cases(dom) == COUNT
    assert "Product finding: other failed checks" in dom and "Harness error: other (a harness bug or its setup)" in dom
    # Control: the same widget in a report generated from no test results reads 0, so the check can fail.
    empty = tmp_path / "empty-results"
    empty.mkdir()
    allure.generate(empty, tmp_path / "empty-report")
    assert shown_test_cases(_dom(tmp_path / "empty-report" / "index.html")) == 0


def test_the_results_carry_links_parameters_steps_and_the_categories_of_their_status(allure_run):
    run, proc = allure_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["name"]: r for r in (json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json"))}
    assert results["test_the_scheduler_allocates_what_was_asked"]["status"] == "failed"
    assert results["test_the_harness_breaks"]["status"] == "broken"
    first = results["test_a_claim_gets_a_device"]
    assert first["links"][0]["url"].startswith("https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/")
    assert {p["name"]: p["value"] for p in first["parameters"]}["Kubernetes"] == "v1.37.2"
    assert [s["name"] for s in first["steps"]] == ["evidence: node=gpu-node-0, device=gpu-0, allocated_after_s=0.4"]
    assert {p["name"]: p["value"] for p in results["test_claims_for_several_devices[2]"]["parameters"]}["count"] == "2"
    # The run directory's marker owns the report, so a later run in the directory replaces it.
    assert "allure-report/index.html" in read_marker(run)["files"]


def test_generating_again_replaces_the_report_and_a_run_without_results_is_refused_in_one_line(allure_run, tmp_path):
    run, _ = allure_run
    again = _report(run)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in (run / "allure-report").iterdir()) == ["index.html"]
    # A new run in the same directory removes the report with the rest of the previous run's files.
    reused = tmp_path / "reused"
    shutil.copytree(run, reused)
    claim(reused, "next-run")
    assert not (reused / "allure-report").exists() and not (reused / "allure-results").exists()
    bare = make_run(tmp_path / "bare", contention_scale=None)
    refused = _report(bare)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "allure-results does not exist" in refused.stderr
