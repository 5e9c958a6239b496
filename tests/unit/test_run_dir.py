"""--report-dir safety: a run writes only into directories it may own, and deletes only what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dra_harness import providers
from dra_harness.cli import runner
from dra_harness.cli.app import main
from dra_harness.report import write_report
from dra_harness.report.rundir import MARKER, RunDirError, read_marker
from dra_harness.report.summary import finish_run, start_run
from tests.unit.report_runs import make_run

ROOT = Path(__file__).resolve().parents[2]


def _finished_run(run: Path, run_id: str = "first") -> Path:
    """A run directory as `dra-harness run` leaves it: claimed, filled by the test session, sealed."""
    start_run(run, run_id, ["dra-harness", "run"], None)
    make_run(run)  # what the test session writes: junit.xml, evidence, contention, fingerprint
    finish_run(run, complete=True, exit_code=0)
    return run


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _assert_refused(run: Path, match: str) -> None:
    """A new run in ``run`` is refused in one line, and not one file there changes."""
    before = _tree(run)
    with pytest.raises(RunDirError, match=match) as e:
        start_run(run, "second", ["dra-harness", "run"], None)
    assert "\n" not in str(e.value)
    assert _tree(run) == before


def test_a_new_directory_is_created_and_marked_with_the_run_id_only(tmp_path):
    run = tmp_path / "new" / "run"
    start_run(run, "r1", ["dra-harness", "run", "--token=sekret123456"], None)
    marker = read_marker(run)
    assert marker == {"run_id": "r1", "finished": False, "files": ["run.json", "signoff.html", "signoff.md", "summary.json"]}
    assert "sekret123456" not in (run / MARKER).read_text()


def test_an_empty_existing_directory_is_taken(tmp_path):
    start_run(tmp_path, "r1", ["dra-harness", "run"], None)
    assert read_marker(tmp_path)["run_id"] == "r1"


def test_a_non_empty_directory_without_the_marker_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "summary.json").write_text("{}")  # even a file named like ours
    _assert_refused(tmp_path, f"{tmp_path} is not empty and has no {MARKER} marker")


def test_run_refuses_an_unmarked_directory_before_any_build_or_cluster_work(tmp_path, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("cluster or build work started before the report directory was checked")

    monkeypatch.setattr(runner.builder, "build_all", started)
    for cls in providers.registry().values():  # reaching, building or starting any cluster
        for method in ("check_inputs", "prepare", "open", "connect"):
            monkeypatch.setattr(cls, method, started)
    (tmp_path / "notes.txt").write_text("mine")
    for provider in ("local", "existing", "kind"):
        result = CliRunner().invoke(main, ["run", "--cluster", provider, "--report-dir", str(tmp_path)])
        output = " ".join(result.output.split())  # rich wraps the one line at the test terminal's width
        assert result.exit_code == 2, result.output
        assert f"{tmp_path} is not empty and has no {MARKER} marker" in output and "Traceback" not in result.output
        assert _tree(tmp_path) == {"notes.txt": b"mine"}


def test_a_users_file_in_a_marked_directory_survives_a_new_run(tmp_path):
    run = _finished_run(tmp_path / "run")
    assert read_marker(run)["finished"] and "contention/inference-vs-training-shared.json" in read_marker(run)["files"]
    (run / "notes.txt").write_text("mine")
    start_run(run, "second", ["dra-harness", "run"], None)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_id"] == "second" and summary["results"] == [] and summary["verdict"] == "INCOMPLETE"
    # The previous run's files are gone (no earlier result leaks into this run); the user's file is not.
    assert not (run / "contention").exists() and not (run / "junit.xml").exists()
    assert (run / "notes.txt").read_text() == "mine"
    assert read_marker(run) == {"run_id": "second", "finished": False,
                                "files": ["run.json", "signoff.html", "signoff.md", "summary.json"]}


def test_a_file_the_previous_run_did_not_record_is_never_overwritten(tmp_path):
    run = _finished_run(tmp_path / "run")
    (run / "failures").mkdir()
    (run / "failures" / "my-analysis.json").write_text("{}")
    _assert_refused(run, "failures/my-analysis.json was not written by run first")


def test_a_run_that_did_not_finish_is_refused_since_its_files_are_not_all_recorded(tmp_path):
    run = tmp_path / "run"
    start_run(run, "killed", ["dra-harness", "run"], None)
    make_run(run)  # its test session wrote files the marker does not list yet
    _assert_refused(run, "holds run killed, which did not finish")


def test_a_marker_naming_a_file_outside_the_run_layout_deletes_nothing(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    run = _finished_run(tmp_path / "run")
    marker = read_marker(run)
    (run / MARKER).write_text(json.dumps({**marker, "files": [*marker["files"], "../victim.txt"]}))
    _assert_refused(run, r"lists \.\./victim\.txt, which no run writes")
    assert victim.read_text() == "keep"


def test_a_marker_that_is_not_ours_is_refused_in_one_line(tmp_path):
    (tmp_path / MARKER).write_text("not json")
    _assert_refused(tmp_path, "is not a dra-harness run marker")


def test_re_rendering_records_what_it_adds_so_the_next_run_may_remove_it(tmp_path):
    run = _finished_run(tmp_path / "run")
    # As a run without Allure results leaves it: no allure-results/, none recorded.
    marker = read_marker(run)
    shutil.rmtree(run / "allure-results")
    (run / MARKER).write_text(json.dumps({**marker, "files": [f for f in marker["files"] if not f.startswith("allure-results/")]}))
    write_report(run)  # `dra-harness report`: summary, signoff and the Allure extras again
    assert "allure-results/categories.json" in read_marker(run)["files"]
    start_run(run, "second", ["dra-harness", "run"], None)
    assert not (run / "allure-results").exists()


def test_a_pytest_session_run_directly_marks_its_report_dir_so_report_renders_it(tmp_path):
    """``pytest --report-dir DIR --junitxml DIR/junit.xml`` then ``dra-harness report DIR``, as docs/report.md says."""
    run, session = tmp_path / "run", tmp_path / "session"
    session.mkdir()
    (session / "test_one.py").write_text("def test_one():\n    pass\n")
    run_id = f"direct-{os.urandom(4).hex()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_one.py", f"--run-id={run_id}", f"--report-dir={run}",
                           f"--junitxml={run / 'junit.xml'}", "-p", "no:cacheprovider", "-p", "no:locust", f"--rootdir={session}"],
                          cwd=session, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_marker(run) == {"run_id": run_id, "finished": False, "files": []}
    out = CliRunner().invoke(main, ["report", str(run)])
    assert out.exit_code == 0, out.output
    assert json.loads((run / "summary.json").read_text())["counts"] == {"passed": 1}
    assert "summary.json" in read_marker(run)["files"]  # what rendering wrote, recorded as the run's


def test_a_directory_that_holds_a_junit_xml_but_no_marker_is_never_rendered_into(tmp_path):
    run = make_run(tmp_path / "run")
    (run / MARKER).unlink()  # someone's CI output: junit.xml, evidence, even a run.json, but no run marked it
    before = _tree(run)
    with pytest.raises(RunDirError, match=f"{run} is not a run directory: it has no {MARKER} marker"):
        write_report(run)
    assert _tree(run) == before


def _allocation(pod: str) -> dict:
    return {"namespace": "ns", "workload": f"Pod/{pod}", "pod": pod, "node": "gpu-node-0", "claims": []}


def test_a_reused_directory_starts_allocations_jsonl_afresh(tmp_path, monkeypatch):
    from dra_harness.report import allocations, rundir

    def reuse(run: Path) -> list[str]:
        """A finished run that allocated pod-a, then a second run in the same directory that allocates pod-b."""
        start_run(run, "first", ["dra-harness", "run"], None)
        make_run(run)
        allocations.append(run, "suites/test_allocation.py::test_x", [_allocation("pod-a")])
        finish_run(run, complete=True, exit_code=0)
        start_run(run, "second", ["dra-harness", "run"], None)
        allocations.append(run, "suites/test_allocation.py::test_x", [_allocation("pod-b")])
        return [r["pod"] for r in allocations.load(run)]

    assert reuse(tmp_path / "run") == ["pod-b"]
    # Negative control: outside the layout, the second run's table held the first run's rows too.
    monkeypatch.setattr(rundir, "RUN_FILES", tuple(f for f in rundir.RUN_FILES if f != allocations.FILE))
    assert reuse(tmp_path / "old") == ["pod-a", "pod-b"]


def test_an_allocations_file_the_previous_run_did_not_record_is_never_overwritten(tmp_path):
    run = _finished_run(tmp_path / "run")
    (run / "allocations.jsonl").write_text("mine\n")
    _assert_refused(run, "allocations.jsonl was not written by run first")
