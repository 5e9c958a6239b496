"""selftest's background build: it knows every component it is asked for, builds nothing cached, stops whole."""

from __future__ import annotations

import subprocess
import sys
import time

from dra_harness.components import background
from dra_harness.components import build as builder


def test_every_component_the_tests_need_later_is_one_the_background_process_can_name():
    table = background.known()
    assert not [c.dirname for c in background.for_tests() if c.dirname not in table]
    assert "kueue-v0.17.0" in table and "kind-node-v1.37.2" in table and "kubelet-v1.36.3" in table


def test_an_unknown_component_is_refused_with_one_line(capsys):
    assert background.main(["no-such-v1"]) == 2
    assert capsys.readouterr().out.strip() == "background build: unknown components no-such-v1"


def test_nothing_is_started_when_every_component_is_cached(monkeypatch, tmp_path):
    monkeypatch.setattr(builder, "is_cached", lambda c, gover=None: True)
    pending = background.Background(background.for_tests(), tmp_path / "log")
    assert pending.proc is None
    pending.stop()  # a no-op


def test_stop_ends_the_process_group_children_included(tmp_path):
    """Its go builds are the group's other members: a stand-in group (a shell and its sleep) must all go."""
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    pending = background.Background([], tmp_path / "log")
    pending.proc = proc
    time.sleep(0.3)
    children = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) == 2, children
    pending.stop()
    deadline = time.monotonic() + 5  # the orphaned sleep is reaped by init a moment later
    while (left := subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"left running: {left}"


def test_the_process_builds_at_the_lowest_priority():
    out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True,
                         preexec_fn=background._nice_and_die_with_parent())
    assert int(out.stdout) == 19
