"""The facts a run keeps for its whole length are read under a shared Lease (issue #60, item 10).

The preflight (and the hardware observed when the handle opens) were read before any Lease was
held, so another run's drain in progress (its cordon, its driver's slices gone) became this run's
facts for the whole run. Here another run holds the exclusive Lease while a real pytest session
opens the same cluster: the session's preflight must not start until that section has ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from dra_harness.providers.lock import ClusterLock

pytestmark = pytest.mark.cluster
#: How long the other run's exclusive section lasts: longer than the session takes to start and gather its facts.
HOLD_S = 20.0


def _reads_after_the_section(small_cluster, tmp_path, argv: list[str], facts, hold_s: float) -> None:
    """``argv`` started while another run holds the exclusive Lease for ``hold_s``: it exits 0, and its facts
    (``preflight.json``) were gathered only after the section ended."""
    other = ClusterLock(small_cluster.kube(), "other-run", lease_s=3.0)
    with other.exclusive():
        command = subprocess.Popen(argv, cwd=tmp_path, stdout=(tmp_path / "out.log").open("w"), stderr=subprocess.STDOUT)
        time.sleep(hold_s)
        gathered_during_the_section = facts.exists()
        released = time.time()
    other.close()
    try:
        code = command.wait(timeout=180)
    finally:
        if command.poll() is None:
            command.kill()
    assert code == 0, (tmp_path / "out.log").read_text()[-3000:]
    started = facts.stat().st_mtime - json.loads(facts.read_text())["seconds"]
    assert not gathered_during_the_section and started >= released - 0.05, (
        f"the preflight started {released - started:.1f}s before another run's exclusive section ended")


def test_the_preflight_waits_for_another_runs_exclusive_section_to_end(small_cluster, tmp_path):
    (tmp_path / "test_opens.py").write_text("def test_opens(cluster, preflight):\n    assert preflight.nodes\n")
    _reads_after_the_section(small_cluster, tmp_path, [
        sys.executable, "-m", "pytest", str(tmp_path / "test_opens.py"), "--cluster=existing",
        f"--kubeconfig={small_cluster.kubeconfig}", f"--report-dir={tmp_path / 'run'}",
        "-p", "no:cacheprovider", "-p", "no:locust", "-q"], tmp_path / "run" / "preflight.json", HOLD_S)


#: The CLI starts within a couple of seconds: a shorter section shows it waits.
CLI_HOLD_S = 8.0


def test_the_preflight_command_waits_for_another_runs_exclusive_section_to_end(small_cluster, tmp_path):
    """``dra-harness preflight`` on its own (what a user runs before a run) reads under a shared Lease too."""
    _reads_after_the_section(small_cluster, tmp_path, [
        sys.executable, "-m", "dra_harness.cli", "preflight", f"--kubeconfig={small_cluster.kubeconfig}",
        f"--out={tmp_path / 'preflight.json'}"], tmp_path / "preflight.json", CLI_HOLD_S)
