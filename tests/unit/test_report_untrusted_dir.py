"""``dra-harness report DIR`` on a directory it did not write, or on a run unpacked from someone's artifact.

Issue 60 reproduced each of these with the real command: a directory that merely held a
``junit.xml`` was rendered into (the user's files rewritten, exit 0); a link planted at a
temporary name was written through; a FIFO ``run.json`` hung the command; a sparse 3 GiB
``evidence.jsonl`` and a link to ``/dev/zero`` were read whole (MemoryError, exit 70). So these
tests run the installed command as the user would, in a child process with a time limit (a hang
fails the test rather than hanging it) and an address-space limit (a file read without bound
fails with MemoryError quickly instead of taking the machine's memory). Each must end in one
line naming the file and exit 2, with nothing outside the directory touched.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dra_harness.report.rundir import MARKER
from tests.unit.report_runs import make_run

ROOT = Path(__file__).resolve().parents[2]
#: The console script beside this interpreter (the venv's), as a user runs it; ``-m`` where there is none.
SCRIPT = Path(sys.executable).with_name("dra-harness")
#: Rendering a synthetic run takes a few seconds; a command still running after this is blocked.
TIMEOUT_S = 60
#: Far above what rendering needs (about 1 GiB of address space with numpy and matplotlib loaded), far below
#: what reading a 3 GiB file or /dev/zero whole would take.
ADDRESS_SPACE = 2 * 2**30


def report(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dra_harness.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    try:
        return subprocess.run([*cmd, "report", str(run), *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=env, cwd=ROOT, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`dra-harness report {run}` was still running after {TIMEOUT_S} s: it blocked on a file")


def assert_refused(proc: subprocess.CompletedProcess[str], named: Path, says: str) -> None:
    """Exit 2 and one line on stderr naming the file, never a traceback (exit 70)."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(named) in lines[0] and says in lines[0], lines[0]


def tree(path: Path) -> dict[str, bytes | str]:
    """Every entry under ``path``: a file's bytes, a link's target."""
    return {p.relative_to(path).as_posix(): os.readlink(p) if p.is_symlink() else p.read_bytes()
            for p in sorted(path.rglob("*")) if p.is_symlink() or p.is_file()}


def test_a_directory_no_run_marked_is_refused_and_none_of_its_files_change(tmp_path):
    mine = tmp_path / "my-ci-results"
    mine.mkdir()
    (mine / "junit.xml").write_text('<?xml version="1.0"?><testsuites><testsuite name="mine" tests="1">'
                                    '<testcase classname="app" name="test_login">password=hunter2hunter2</testcase>'
                                    "</testsuite></testsuites>")
    (mine / "summary.json").write_text('{"my": "own summary"}\n')
    (mine / "signoff.md").write_text("# Signed off by me\n")
    before = tree(mine)
    proc = report(mine)
    assert_refused(proc, mine, f"has no {MARKER} marker")
    assert tree(mine) == before  # not one file rewritten (the old command redacted junit.xml and rewrote the other two)


def test_report_never_writes_through_a_link_planted_at_a_temporary_name(tmp_path):
    run = make_run(tmp_path / "run", tests=[("allocation", "test_a_claim_gets_a_device", "failed", 1.0, [])])
    junit = run / "junit.xml"
    junit.write_text(junit.read_text().replace("Traceback: assert 3 == 4", "Traceback: password=hunter2hunter2"))
    victim = tmp_path / "victim.txt"
    victim.write_text("not the report's\n")
    # The names the old writer used for every file it wrote (junit.xml is rewritten to redact the password).
    for name in ("junit.xml", "summary.json", "signoff.md", "signoff.html", MARKER):
        (run / f".{name}.tmp").symlink_to(victim)
    proc = report(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert victim.read_text() == "not the report's\n"
    assert not junit.is_symlink() and "hunter2hunter2" not in junit.read_text() and "[redacted]" in junit.read_text()
    assert not (run / "summary.json").is_symlink() and (run / "signoff.html").read_text().count("Verdict: FAIL")


def test_a_fifo_in_place_of_run_json_is_refused_at_once_not_waited_on(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")
    assert_refused(report(run), run / "run.json", "is not a regular file")


def test_a_sparse_3_gib_evidence_file_is_refused_by_its_size_without_reading_it(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / "evidence.jsonl", "r+b") as f:
        f.truncate(3 * 2**30)  # sparse: no disk is spent
    assert_refused(report(run), run / "evidence.jsonl", "is larger than 256 MiB (3072 MiB), the cap on any evidence log")


def test_a_contention_file_linked_to_dev_zero_is_refused_not_read(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "contention" / "x.json").symlink_to("/dev/zero")
    assert_refused(report(run), run / "contention" / "x.json", "is a symbolic link")


def test_a_layout_folder_linked_outside_the_run_is_neither_read_nor_written(tmp_path):
    run = make_run(tmp_path / "run", contention_scale=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "allure-results").symlink_to(elsewhere, target_is_directory=True)
    assert_refused(report(run), run / "allure-results", "is a symbolic link")
    assert list(elsewhere.iterdir()) == []  # the old command wrote environment.properties and categories.json there
