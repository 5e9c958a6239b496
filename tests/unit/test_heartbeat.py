"""Without a terminal, long work prints a plain line at least every interval; on a terminal rich draws as before.

rich draws bars and spinners only on a terminal, so a CI log showed nothing for the twelve minutes of a
cold build. These tests run the heartbeat with a tiny interval: lines at start, while it runs and at
stop into a file-like stream; none on a terminal (the negative control: rich's display is used there);
the build's and a contention design's lines say how far they are; and a pytest session in a subprocess
prints its count of tests done while a slow test runs, outside that test's captured output.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.status import Status

from dra_harness import heartbeat
from dra_harness.components import build as builder
from dra_harness.components.catalog import Component

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def auto_mode(monkeypatch):
    """Whatever the environment running these tests says, the choice is the stream's (or a test's)."""
    for name in (heartbeat.MODE_ENV, heartbeat.INTERVAL_ENV, "TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


class Timed(io.StringIO):
    """A stream that remembers when each line was written."""

    def __init__(self, tty: bool = False) -> None:
        super().__init__()
        self.tty = tty
        self.times: list[float] = []
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            self.times.append(time.monotonic())
            return super().write(text)

    def isatty(self) -> bool:
        return self.tty


def test_without_a_terminal_a_heartbeat_prints_at_start_at_least_every_interval_and_at_stop():
    out = Timed()
    started = time.monotonic()
    with heartbeat.Heartbeat(out, "building", interval=0.05) as beat:
        beat.set(812, 1903, "packages")
        time.sleep(0.4)
    lines = out.getvalue().splitlines()
    assert lines[0] == "building (0s)", lines
    assert lines[-1] == "building: 812/1903 packages (done, 0s)", lines
    assert len(lines) >= 5 and all(line == "building: 812/1903 packages (0s)" for line in lines[1:-1]), lines
    gaps = [b - a for a, b in zip([started, *out.times], out.times, strict=False)]
    assert max(gaps) < 0.05 + 0.5, gaps  # the interval, and slack for a loaded machine's thread wake-ups


def test_on_a_terminal_a_heartbeat_prints_nothing_because_rich_draws_there():
    out = Timed(tty=True)
    with heartbeat.Heartbeat(out, "building", interval=0.01) as beat:
        beat.update("1/2 packages", now=True)
        time.sleep(0.1)
    assert out.getvalue() == ""


def test_progress_off_silences_the_lines_and_plain_forces_them_on_a_terminal(monkeypatch):
    monkeypatch.setenv(heartbeat.MODE_ENV, "off")
    off = Timed()
    with heartbeat.Heartbeat(off, "building", interval=0.01):
        time.sleep(0.05)
    monkeypatch.setenv(heartbeat.MODE_ENV, "plain")
    forced = Timed(tty=True)
    with heartbeat.Heartbeat(forced, "building", interval=10):
        pass
    assert off.getvalue() == ""
    assert forced.getvalue().splitlines() == ["building (0s)", "building (done, 0s)"]


def test_a_line_says_elapsed_time_in_seconds_minutes_and_hours():
    now = [100.0]
    beat = heartbeat.Heartbeat(io.StringIO(), "suites", clock=lambda: now[0])
    beat.update("3/40 done")
    now[0] += 250
    assert beat.line() == "suites: 3/40 done (4m10s)"
    assert [heartbeat.duration(s) for s in (0.4, 59, 60, 3599, 3600 * 3 + 5 * 60 + 59)] == ["0s", "59s", "1m00s", "59m59s", "3h05m"]


def test_status_is_riches_spinner_on_a_terminal_and_plain_lines_of_each_step_elsewhere(monkeypatch):
    monkeypatch.setattr(heartbeat, "STATUS_GRACE", 0.0)
    terminal = Console(file=io.StringIO(), force_terminal=True)
    with heartbeat.status(terminal, "bringing up the embedded cluster") as spinner:
        assert isinstance(spinner, Status)
    log = Console(file=io.StringIO(), force_terminal=False)
    with heartbeat.status(log, "bringing up the embedded cluster") as steps:
        steps.update("starting etcd and kube-apiserver")
        steps.update("starting etcd and kube-apiserver")  # the same step again: no new line
    assert log.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "bringing up the embedded cluster (0s)",
        "bringing up the embedded cluster: starting etcd and kube-apiserver (0s)",
        "bringing up the embedded cluster: starting etcd and kube-apiserver (done, 0s)",
    ]


def test_a_status_that_fails_within_its_grace_prints_nothing_so_an_error_stays_one_line(monkeypatch):
    monkeypatch.setattr(heartbeat, "STATUS_GRACE", 0.3)
    log = Console(file=io.StringIO(), force_terminal=False)
    with pytest.raises(RuntimeError), heartbeat.status(log, "kind") as steps:
        steps.update("checking the engine")
        raise RuntimeError("no engine")
    assert log.file.getvalue() == ""  # type: ignore[attr-defined]
    # Past the grace, the step shows; an error then still has the last word (no "stopped" line).
    with pytest.raises(RuntimeError), heartbeat.status(log, "kind") as steps:
        steps.update("checking the engine")
        time.sleep(0.5)
        raise RuntimeError("no engine")
    assert log.file.getvalue().splitlines() == ["kind: checking the engine (0s)"]  # type: ignore[attr-defined]


def test_build_all_without_a_terminal_prints_packages_built_of_total(monkeypatch, capsys):
    monkeypatch.setenv(heartbeat.INTERVAL_ENV, "0.05")
    fake = Component(name="fake", version="1", module="example.test/fake", binaries={"fake": "example.test/fake"})
    monkeypatch.setattr(builder, "is_cached", lambda c, gover=None: False)

    def build(component, progress=None, module_dir=None):
        task = progress.add_task(component.dirname, total=None)  # as _build: resolving packages first
        time.sleep(0.1)
        progress.update(task, total=10)
        for _ in range(10):
            progress.advance(task)
            time.sleep(0.02)
        return builder.Built(component, Path("/nonexistent"), 0.3, cached=False)

    monkeypatch.setattr(builder, "build", build)
    builder.build_all([fake])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("building: ")]
    assert lines[0] == "building (0s)" or lines[0].startswith("building: fake-v1 0/? packages"), lines
    assert any(line.startswith("building: fake-v1 0/? packages (") for line in lines), lines
    assert any(line.startswith("building: fake-v1 ") and "/10 packages (" in line for line in lines), lines
    assert lines[-1] == "building: fake-v1 10/10 packages (done, 0s)", lines


def test_a_contention_design_without_a_terminal_says_jobs_settled_and_the_scenario_time(monkeypatch, capsys):
    from dra_harness.cli import contention as cli
    from dra_harness.contention import runner

    monkeypatch.setenv(heartbeat.INTERVAL_ENV, "0.05")

    def run_design(kube, topo, design, where, version, probe, floor=None, progress=None, scheduler=None, admission=None):
        time.sleep(0.1)
        progress(runner.Reached(design, 0, 4, time.time() - 60, 60.0))  # an hour of scenario time in
        time.sleep(0.1)
        progress(runner.Reached(design, 3, 4, time.time() - 60, 60.0))
        time.sleep(0.1)
        return {}

    monkeypatch.setattr(runner, "run_design", run_design)
    topo = SimpleNamespace(scenario=SimpleNamespace(name="small", time_compression=60.0, jobs_total=4))
    cli._run_design(None, topo, "reserved", Path("/nonexistent"), "1.36.3", None, {})  # type: ignore[arg-type]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("small / design reserved at 60x")]
    assert lines[0].startswith("small / design reserved at 60x: setting up"), lines
    assert any(line.startswith("small / design reserved at 60x: 3/4 jobs settled, scenario t=1h0") for line in lines), lines


def test_a_test_session_without_a_terminal_prints_tests_done_of_total_outside_the_tests_captured_output(tmp_path):
    (tmp_path / "test_slow.py").write_text(
        "import time\n"
        "def test_quick():\n    pass\n"
        "def test_slow_and_failing():\n    print('the test said this')\n    time.sleep(1.0)\n    assert False\n"
        "def test_after():\n    pass\n"
    )
    env = {**os.environ, heartbeat.INTERVAL_ENV: "0.2", "PYTHONPATH": str(ROOT / "src")}
    env.pop(heartbeat.MODE_ENV, None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:locust", "test_slow.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    beats = [line for line in out.stdout.splitlines() if line.startswith("tests: ")]
    assert len(beats) >= 3, out.stdout
    # A beat may also fall between the last test's end and the session's (a loaded machine: "3/3 done").
    running = [line for line in beats if line.startswith("tests: 1/3 done, running test_slow.py::test_slow_and_failing for ")]
    assert len(running) >= 3, out.stdout
    assert all(line in running or re.fullmatch(r"tests: [0-3]/3 done(, running test_slow\.py::\w+ for \S+)? \(\S+\)", line)
               for line in beats), out.stdout
    captured = out.stdout.split("Captured stdout call", 1)[1].split("short test summary", 1)[0]
    assert "the test said this" in captured and "tests: " not in captured, out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("="), out.stdout  # pytest's summary stays the last line
