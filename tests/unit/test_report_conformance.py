"""The report's conformance section, its place in ``compare`` and the conformance bundle, on synthetic run directories."""

from __future__ import annotations

import gzip
from html import escape as html_escape
import io
import json
import subprocess
import tarfile

from click.testing import CliRunner

from dra_harness.cli.app import main
from dra_harness.report import bundle, compare
from dra_harness.report.summary import build_summary, write_report
from tests.unit.report_runs import DEFAULT_TESTS, make_run

EXPOSURE = "dra_support/exposure"
ALLOCATION = "dra_support/allocation"
NOT_ESTABLISHED = "not established"


def _tests(**outcomes: str):
    """DEFAULT_TESTS with some checks' outcomes replaced (by test name)."""
    return [(m, n, outcomes.get(n, o), s, r) for m, n, o, s, r in DEFAULT_TESTS]


def _states(summary) -> dict[str, str]:
    return {r["id"]: r["state"] for r in summary["conformance"]["rows"]}


def test_a_requirement_whose_mapped_check_passed_is_met_and_the_report_shows_it(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    write_report(run)
    summary = json.loads((run / "summary.json").read_text())
    row = next(r for r in summary["conformance"]["rows"] if r["id"] == EXPOSURE)
    assert row["state"] == "met" and row["level"] == "MUST" and row["source"].startswith("https://")
    assert {"check": "test_inventory::test_device_counts_match_the_expected_hardware", "outcome": "passed"} in row["checks"]
    assert "## Conformance evidence" in (run / "signoff.md").read_text()
    html = (run / "signoff.html").read_text()
    assert 'id="conformance"' in html and html_escape(row["title"]) in html
    # A requirement no check of this run covers is never met: most of the mapping did not run here.
    assert summary["conformance"]["counts"].get(NOT_ESTABLISHED, 0) > 0


def test_a_failed_mapped_check_makes_its_requirement_not_met_whatever_else_passed(tmp_path):
    """Negative control: the same run with the inventory check failed."""
    summary = build_summary(make_run(tmp_path / "run", contention_scale=None,
                                     tests=_tests(test_device_counts_match_the_expected_hardware="failed")))
    row = next(r for r in summary["conformance"]["rows"] if r["id"] == EXPOSURE)
    assert row["state"] == "not met" and "test_inventory::test_device_counts_match_the_expected_hardware" in row["reason"]


def test_a_skipped_check_leaves_its_requirement_not_established_with_the_skip_reason(tmp_path):
    summary = build_summary(make_run(tmp_path / "run", contention_scale=None,
                                     tests=_tests(test_pods_using_templates_never_share_a_device="skipped")))
    states = _states(summary)
    allocation = next(r for r in summary["conformance"]["rows"] if r["id"] == ALLOCATION)
    # test_allocation's several-devices check still passed: one pass is enough when nothing failed.
    assert states[ALLOCATION] == "met" and "test_allocation::" in allocation["reason"]
    summary = build_summary(make_run(tmp_path / "run2", contention_scale=None, tests=[
        ("sharing", "test_pods_using_templates_never_share_a_device", "skipped", 0.1, [])]))
    allocation = next(r for r in summary["conformance"]["rows"] if r["id"] == ALLOCATION)
    assert allocation["state"] == NOT_ESTABLISHED and "serves no DeviceTaintRule API" in allocation["reason"]


def test_compare_shows_each_requirements_verdict_per_run_and_marks_a_difference(tmp_path):
    good = build_summary(make_run(tmp_path / "good", contention_scale=None))
    bad = build_summary(make_run(tmp_path / "bad", contention_scale=None,
                                 tests=_tests(test_device_counts_match_the_expected_hardware="failed")))
    table = compare.build([good, bad], ["example", "vendor"])
    row = next(r for r in table["conformance"] if r["id"] == EXPOSURE)
    assert [c["state"] for c in row["cells"]] == ["met", "not met"] and row["differs"]
    same = next(r for r in table["conformance"] if r["id"] == "gang_scheduling/positive")
    assert not same["differs"]
    out = compare.write(tmp_path / "cmp", table)
    assert "Conformance evidence" in out.read_text() and "**not met**" in (tmp_path / "cmp" / "compare.md").read_text()


def _members(path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_bundle_verifies_carries_the_reports_verdicts_and_is_the_same_bytes_when_rebuilt(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    write_report(run)
    first = bundle.write(run).read_bytes()
    assert bundle.verify(run / bundle.FILE) == {}
    write_report(run)  # re-rendered: same run, same bundle
    assert bundle.write(run).read_bytes() == first
    files = _members(run / bundle.FILE)
    summary = json.loads((run / "summary.json").read_text())
    verdicts = {r["id"]: r["state"] for r in json.loads(files["conformance.json"])["requirements"]}
    assert verdicts == _states(summary)
    behind = json.loads(files["verdicts/dra_support_exposure.json"])
    assert behind["results"][0]["nodeid"] == "suites/test_inventory.py::test_device_counts_match_the_expected_hardware"
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["command"] == ["dra-harness", "run"] and "run/junit.xml" in manifest["files"]
    assert {"run/junit.xml", "run/fingerprint.json", "mapping/conformance.yaml", bundle.SUMS} <= set(files)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(run / bundle.FILE, "r:gz") as tar:
        tar.extractall(unpacked, filter="data")
    check = subprocess.run(["sha256sum", "-c", "--quiet", bundle.SUMS], cwd=unpacked / "conformance-bundle",
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_bundle_edited_after_it_was_written_fails_verification_naming_the_file(tmp_path):
    """Negative control of the checksums: one verdict changed inside the archive."""
    run = make_run(tmp_path / "run", contention_scale=None)
    write_report(run)
    files = _members(bundle.write(run))
    sums = files.pop(bundle.SUMS)
    files["conformance.json"] = files["conformance.json"].replace(b'"not established"', b'"met"', 1)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, body in {**files, bundle.SUMS: sums}.items():
            info = tarfile.TarInfo(f"conformance-bundle/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(gzip.compress(raw.getvalue()))
    assert bundle.verify(forged) == {"conformance.json": "checksum differs"}


def test_report_bundle_prints_the_archive_and_a_run_without_a_summary_is_one_line(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    result = CliRunner().invoke(main, ["report", str(run), "--bundle"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == str(run / bundle.FILE)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["report", str(empty), "--bundle"])
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
