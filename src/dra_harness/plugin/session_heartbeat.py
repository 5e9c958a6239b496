"""Plain progress lines from a test session whose output is not a terminal (a CI log).

pytest prints a character (a line with ``-v``) as each test ends, so a check that runs for
minutes, or a first test that brings a cluster up, leaves a CI log silent that long and the
run looks hung. The controller process (not an xdist worker: the controller sees every
worker's tests start and finish) prints, at least every 15 s while the session runs,

    tests: 12/40 done, running suites/test_allocation.py::test_x for 40s (3m10s)

through :class:`dra_harness.heartbeat.Heartbeat`. Nothing at the start or end: pytest's header
and summary say both, so a session shorter than the interval prints nothing extra (the
project's tests that run short sessions and read their output see what they did before).
``DRA_HARNESS_PROGRESS=off`` turns it off; ``=plain`` turns it on even on a terminal.

The lines go to a duplicate of the session's stdout taken before any test runs: pytest
captures file descriptor 1 while each test runs, and a line written there would land in the
test's captured output instead of the log.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

import pytest

from dra_harness import heartbeat

_NAME = "dra-harness-session-heartbeat"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # a worker's own stdout goes nowhere a reader sees
        config.pluginmanager.register(SessionHeartbeat(config), _NAME)


class _BesidePytest:
    """The session's stdout (a duplicate), starting a line of its own where pytest left one open."""

    def __init__(self, out: TextIO, config: pytest.Config) -> None:
        self.out = out
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")  # None under -p no:terminal
        self.writer = config.get_terminal_writer() if self.reporter is not None else None
        self._left_at = 0  # the width of pytest's open line when our last line was written

    def write(self, text: str) -> int:
        # pytest's line is open (a file's dots, a -v test's name, xdist's dots) when its writer's current line
        # has a width; unchanged since our last line, we ended it then. (Reading it races pytest: cosmetic.)
        width = self.writer.width_of_current_line if self.writer is not None else 0
        if width and width != self._left_at:
            self.out.write("\n")
        self._left_at = width
        if self.reporter is not None and self.reporter.currentfspath:
            self.reporter.currentfspath = None  # pytest starts its next line afresh, naming the file again
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return False


class SessionHeartbeat:
    """Counts tests started and finished (the controller sees xdist workers' through the same hooks)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total: int | None = None
        self.done = 0
        self.running: dict[str, float] = {}  # node id -> when it started (monotonic)
        self.lock = threading.Lock()
        self.beat: heartbeat.Heartbeat | None = None
        self.out: TextIO | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Here pytest's capture is suspended: sys.stdout and descriptor 1 are the session's real output.
        if not heartbeat.plain(sys.stdout):
            return
        try:
            fd = os.dup(sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # a stdout without a descriptor (an in-process pytester run)
            return
        self.out = os.fdopen(fd, "w")
        self.beat = heartbeat.Heartbeat(_BesidePytest(self.out, self.config), "tests", describe=self.how_far,
                                        bookends=False, enabled=True).start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        with self.lock:
            self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        with self.lock:  # under xdist the controller collects nothing itself; each worker reports the same ids
            self.total = len(ids)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        with self.lock:
            self.running.pop(nodeid, None)
            self.done += 1

    def how_far(self) -> str:
        with self.lock:
            if self.total is None and not self.done and not self.running:
                return "collecting"
            text = f"{self.done}/{'?' if self.total is None else self.total} done"
            if self.running:
                nodeid, since = min(self.running.items(), key=lambda kv: kv[1])
                text += f", running {nodeid} for {heartbeat.duration(time.monotonic() - since)}"
                if len(self.running) > 1:
                    text += f", +{len(self.running) - 1} more"
            return text

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.stop()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stop()  # a session that ended before its finish (an interrupted collection)

    def stop(self) -> None:
        beat, self.beat = self.beat, None
        if beat is not None:
            beat.stop()
        out, self.out = self.out, None
        if out is not None:
            try:
                out.close()
            except OSError:  # the reader went away: nothing left to tell it
                pass
