"""A killed run leaves nothing behind: no process acting on the cluster, no object, no lock.

CI cancels jobs with SIGTERM and, when they linger, SIGKILL. Either way the run's
pytest must end promptly, its teardown (or, when pytest itself is killed, its
watchdog) must delete every object of the run, and its private lock directory must go.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.plugin import run_watchdog
from tests.integration import owned

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _run_objects(kube: rest.Kube) -> list[str]:
    """Namespaces and cluster-scoped objects any run of the harness labelled."""
    found = [f"namespace/{n['metadata']['name']}" for n in kube.list(rest.NAMESPACES, label_selector=RUN_LABEL)
             if not n["metadata"].get("deletionTimestamp")]
    for res in (rest.PRIORITY_CLASSES, rest.DEVICE_CLASSES):
        found += [f"{res.kind}/{o['metadata']['name']}" for o in kube.list(res, label_selector=RUN_LABEL)]
    return found


def _wait_for(what: str, probe, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def _start(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, stdout=(tmp_path / "out.log").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def test_killing_dra_harness_run_ends_its_pytest_and_removes_the_runs_objects(small_cluster, tmp_path):
    kube = small_cluster.kube()
    runner = _start(["dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(small_cluster.kubeconfig),
                     "--report-dir", str(tmp_path / "run"), "-k", "allocation"], tmp_path)
    try:
        pytest_pid = _wait_for("the run's pytest", lambda: next(iter(_children(runner.pid)), None), 60)
        _wait_for("a namespace of the run", lambda: _run_objects(kube), 120)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        started = time.monotonic()
        _wait_for("the run's pytest to end", lambda: not Path(f"/proc/{pytest_pid}").exists(), 60)
        ended_after = time.monotonic() - started
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    _wait_for("the run's objects to be deleted", lambda: not _run_objects(kube), 60)
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert not owned.run_lock_dirs(run_id), f"lock directories left: {owned.run_lock_dirs(run_id)}"
    print(f"the run's pytest ended {ended_after:.1f}s after dra-harness run was killed")
    assert ended_after < 30, f"pytest went on for {ended_after:.0f}s after its parent died"


def test_killing_the_runs_pytest_outright_still_sweeps_what_it_made(small_cluster, tmp_path):
    kube = small_cluster.kube()
    run_id = f"it-{uuid.uuid4().hex[:10]}"
    proc = _start(["pytest", str(ROOT / "suites" / "test_allocation.py"), "--cluster=existing", f"--run-id={run_id}",
                   f"--kubeconfig={small_cluster.kubeconfig}", "-p", "no:cacheprovider", "-q"], tmp_path)
    try:
        _wait_for("a namespace of the run", lambda: _run_objects(kube), 120)
        os.kill(proc.pid, signal.SIGKILL)  # no teardown, no unconfigure: only the watchdog is left
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _wait_for("the watchdog to delete the run's objects", lambda: not _run_objects(kube), 90)
    _wait_for("the run's lock directory to go", lambda: not owned.run_lock_dirs(run_id), 30)
    shutil.rmtree(run_watchdog.log_path(run_id, None).parent, ignore_errors=True)  # its log, kept after a kill


#: Longer than the run's own deadline for its cleanup (the sweep waits up to 120 s for namespaces to go).
_CLEANUP_S = 180
#: pytest's live log with times: a run that does not end says what it was doing last.
_LIVE_LOG = ["-o", "log_cli=true", "--log-cli-level=INFO", "-o", "log_cli_format=%(asctime)s %(name)s %(message)s"]


def _wait_exit(proc: subprocess.Popen, tmp_path: Path, signals: float | None = None) -> int:
    """Wait for the run to end; with ``signals``, send it SIGTERM again every that many seconds meanwhile.

    A run still there at the deadline gets SIGABRT first, so pytest's faulthandler writes every
    thread's stack into the log that the failure shows.
    """
    end = time.monotonic() + _CLEANUP_S
    while time.monotonic() < end:
        try:
            return proc.wait(timeout=signals or _CLEANUP_S)
        except subprocess.TimeoutExpired:
            if signals:
                proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGABRT)
    time.sleep(3)
    pytest.fail(f"the run did not end within {_CLEANUP_S}s of SIGTERM:\n{(tmp_path / 'out.log').read_text()[-6000:]}")


def _terminated_suite(cluster, tmp_path: Path, signals: float | None = None) -> tuple[int, str]:
    """Start the allocation suite against ``cluster``, SIGTERM it once its first namespace exists
    (and, with ``signals``, again that often until it ends); its exit status and output."""
    proc = _start(["pytest", str(ROOT / "suites" / "test_allocation.py"), "--cluster=existing",
                   f"--kubeconfig={cluster.kubeconfig}", "-p", "no:cacheprovider", "-q", *_LIVE_LOG], tmp_path)
    try:
        _wait_for("a namespace of the run", lambda: _run_objects(cluster.kube()), 120)
        proc.send_signal(signal.SIGTERM)
        code = _wait_exit(proc, tmp_path, signals)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return code, (tmp_path / "out.log").read_text()


def test_sigterm_to_pytest_runs_teardown_like_ctrl_c(small_cluster, tmp_path):
    code, log = _terminated_suite(small_cluster, tmp_path)
    assert code == 2, f"pytest exited {code}, not as interrupted:\n{log[-2000:]}"
    assert "KeyboardInterrupt" in log
    _wait_for("the run's objects to be deleted", lambda: not _run_objects(small_cluster.kube()), 60)


def test_sigterm_after_sigterm_does_not_cut_the_cleanup_short(small_cluster, tmp_path):
    """CI may signal a job more than once. Only the first SIGTERM interrupts: those that land while the run
    deletes what it made are ignored, so the run still ends as interrupted (not killed by its own
    KeyboardInterrupt, exit -2) and its own cleanup, not the watchdog, leaves the cluster clean."""
    code, log = _terminated_suite(small_cluster, tmp_path, signals=0.1)
    assert code == 2, f"pytest exited {code}, not as interrupted:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    assert "still present after cleanup" not in log and "could not clean up" not in log, log[-3000:]
    # At once, not after a wait: the watchdog (the backstop) is gone with the run, so this was its own cleanup.
    assert not _run_objects(small_cluster.kube()), "the run's own cleanup left objects"


def test_killing_contention_on_an_existing_cluster_outright_leaves_no_node_pod_kwok_or_file(small_cluster, tmp_path):
    """The contention suite on a cluster the run did not create, with its own KWOK and 4 simulated nodes, killed
    with SIGKILL while jobs run: the watchdog removes its nodes and namespaces, its KWOK dies with it, and
    neither the run's directory nor KWOK's log is left."""
    kube = small_cluster.kube()
    # Its own run id: what it leaves is told from what the other test worker's runs make meanwhile.
    run_id = f"it-{uuid.uuid4().hex[:10]}"
    proc = _start(["pytest", str(ROOT / "suites" / "test_contention.py"), "--cluster=existing", f"--run-id={run_id}",
                   f"--kubeconfig={small_cluster.kubeconfig}", "--allow-contention", "--simulated-nodes=4",
                   "-p", "no:cacheprovider", "-q"], tmp_path)

    def nodes() -> list[str]:
        return [n["metadata"]["name"] for n in kube.list(rest.NODES, label_selector=SIMULATED_NODE_LABEL)]

    def running_jobs() -> int:
        return sum(1 for p in kube.list(rest.PODS, label_selector=RUN_LABEL) if p["status"].get("phase") == "Running")

    try:
        _wait_for("jobs running on the run's simulated nodes", lambda: nodes() and running_jobs() >= 2, 240)
        assert owned.kwok_processes(small_cluster), "the run's own KWOK is running"
        # The finder's control: it sees the run's KWOK directory while the run lives, so its absence below counts.
        assert owned.kwok_dirs(run_id), "the run's KWOK directory was not found while it ran"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _wait_for("the run's KWOK to die with it", lambda: not owned.kwok_processes(small_cluster), 30)
    _wait_for("the watchdog to delete the run's nodes and objects", lambda: not nodes() and not _run_objects(kube), 120)
    _wait_for("the run's lock directory to go", lambda: not owned.run_lock_dirs(run_id), 30)
    assert not owned.kwok_dirs(run_id), f"KWOK's log left: {owned.kwok_dirs(run_id)}"
    shutil.rmtree(run_watchdog.log_path(run_id, None).parent, ignore_errors=True)  # its log, kept after a kill
