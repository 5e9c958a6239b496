"""The process supervisor: groups are stopped, pids are not confused, strays are found."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dra_harness.errors import ClusterError
from dra_harness.host import processes
from dra_harness.host.processes import Supervisor, Tracked, strays


def test_a_started_process_is_tracked_and_stopped_with_its_children(tmp_path):
    sup = Supervisor(tmp_path)
    # A shell whose child ignores SIGTERM: the whole group must still be gone.
    t = sup.start("sh", ["sh", "-c", f"trap '' TERM; sleep 60 & wait; : {tmp_path}/marker"])
    time.sleep(0.3)
    assert t.alive() and sup.get("sh") == t
    children = strays(tmp_path)
    assert t.pid in children
    sup.stop("sh", grace=0.5)
    assert not t.alive()
    assert sup.tracked() == []
    out = subprocess.run(["pgrep", "-f", f"sleep 60 & wait; : {tmp_path}/marker"], capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_a_name_whose_process_runs_is_not_started_twice_and_is_once_it_is_gone(tmp_path):
    sup = Supervisor(tmp_path)
    first = sup.start("webhook", ["sleep", "60"])
    try:
        # Negative control of the old behaviour: the second start overwrote the first's pid file.
        with pytest.raises(ClusterError, match=rf"webhook is already running \(pid {first.pid}"):
            sup.start("webhook", ["sleep", "60"])
        assert sup.get("webhook") == first and first.alive()
    finally:
        sup.stop("webhook", grace=0.5)
    again = sup.start("webhook", ["sleep", "60"])  # stopped: its name is free
    os.kill(again.pid, signal.SIGKILL)
    sup.exited("webhook")
    deadline = time.monotonic() + 5
    while again.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    third = sup.start("webhook", ["sleep", "60"])  # died by itself, pid file left: free too
    sup.stop("webhook", grace=0.5)
    assert third.pid != again.pid and sup.tracked() == []


def test_a_child_gone_before_its_pid_file_is_written_is_still_tracked_as_dead(tmp_path, monkeypatch):
    """Under load a child that fails at once (a bad flag) can be a zombie before start() reads its start time.
    Its pid file then had no start time, tracked() skipped it, and a start-up wait polled out its whole
    deadline instead of ending at once (seen in CI with three workers)."""
    real = subprocess.Popen

    def slow_parent(*args, **kwargs):  # the parent reads /proc only once the child is gone
        proc = real(*args, **kwargs)
        deadline = time.monotonic() + 30
        while processes.process_start_time(proc.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        return proc

    monkeypatch.setattr(processes.subprocess, "Popen", slow_parent)
    sup = Supervisor(tmp_path)
    sup.start("etcd", [sys.executable, "-c", "raise SystemExit(1)"])
    gone = sup.get("etcd")
    assert gone is not None and not gone.alive(), sup.tracked()
    sup.stop("etcd")
    assert sup.tracked() == []


def test_a_reused_pid_is_not_treated_as_ours(tmp_path):
    me = Tracked("impostor", pid=1, start_time="0")
    assert not me.alive()


def test_stop_all_finds_strays_by_command_line(tmp_path):
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path) + "/x"], start_new_session=True)
    try:
        sup = Supervisor(tmp_path)
        deadline = time.monotonic() + 5
        while stray.pid not in strays(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the child has exec'd and shows its own command line
        assert stray.pid in strays(tmp_path)
        sup.stop_all(grace=1)
        assert stray.wait(timeout=5) == -signal.SIGTERM
    finally:
        stray.kill()


def test_a_crashed_process_leaves_its_log_tail(tmp_path):
    sup = Supervisor(tmp_path)
    sup.start("crash", ["sh", "-c", "echo first; echo 'fatal: bad flag'; exit 3"])
    deadline = time.time() + 5
    while sup.exited("crash") is None and time.time() < deadline:
        time.sleep(0.05)
    assert sup.exited("crash") == 3
    assert sup.log_tail("crash").splitlines()[-1] == "fatal: bad flag"
