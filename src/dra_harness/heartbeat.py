"""A heartbeat: plain progress lines where rich cannot draw its bars and spinners.

rich draws progress bars and status spinners only on a terminal. In a CI log (stdout a file
or a pipe) it draws nothing, so a cold build of the cluster's binaries showed nothing for
about twelve minutes and looked hung. A :class:`Heartbeat` prints one plain line, flushed,
when it starts, at least every ``interval`` seconds while it runs, and once when it stops:
what is being done, how far it is (packages built of total, tests done of total, scenario
time reached) and the time it has taken so far.

On a terminal nothing here prints: rich's own display is used, as before. The choice can be
forced with ``DRA_HARNESS_PROGRESS``: ``plain`` prints lines even on a terminal (instead of
rich's display), ``off`` never prints them (rich alone, as before this module existed).
``DRA_HARNESS_PROGRESS_INTERVAL`` changes the default interval (seconds; for tests).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import Progress

#: 15 s, so that two lines are less than 30 s apart even when a loaded machine delays the thread.
INTERVAL = 15.0
#: How long a status waits before its first line.
STATUS_GRACE = 1.0
MODE_ENV = "DRA_HARNESS_PROGRESS"
INTERVAL_ENV = "DRA_HARNESS_PROGRESS_INTERVAL"


class Stream(Protocol):
    """Where lines go: a text file (stdout, stderr, a console's file) or anything that writes like one."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def _mode() -> str:
    return os.environ.get(MODE_ENV, "").strip().lower()


def plain(stream: Stream) -> bool:
    """Whether plain lines go to ``stream``: not a terminal, or forced by ``DRA_HARNESS_PROGRESS``."""
    mode = _mode()
    if mode in ("plain", "off"):
        return mode == "plain"
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def plain_console(console: Console) -> bool:
    """:func:`plain` for a rich console: rich's own idea of a terminal decides (``TTY_COMPATIBLE`` and the like)."""
    mode = _mode()
    if mode in ("plain", "off"):
        return mode == "plain"
    return not console.is_terminal


def default_interval() -> float:
    try:
        return max(0.05, float(os.environ.get(INTERVAL_ENV) or INTERVAL))
    except ValueError:  # a malformed override is not worth failing a run over
        return INTERVAL


def duration(seconds: float) -> str:
    """``12s``, ``4m10s``, ``3h05m``: short enough for a progress line."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Heartbeat:
    """Plain lines ``<what>: <how far> (<elapsed>)`` from a daemon thread while a block of work runs.

    ``describe``, when given, is asked for the "how far" at each line (a progress's tasks);
    otherwise the last :meth:`update` or :meth:`set` says it. ``bookends=False`` leaves out the
    lines at start and stop, for a caller whose own output already marks both (pytest's).
    ``enabled`` defaults to :func:`plain` of the stream; a disabled heartbeat prints nothing.
    ``grace``: nothing is printed before that many seconds (work that ends or fails sooner adds no line
    to its one-line answer or error); a heartbeat that printed nothing prints no stop line either, and
    one stopped by an error leaves the last word to the error.
    """

    def __init__(self, stream: Stream, what: str, interval: float | None = None, *,
                 clock: Callable[[], float] = time.monotonic, describe: Callable[[], str] | None = None,
                 bookends: bool = True, enabled: bool | None = None, grace: float = 0.0) -> None:
        self.stream = stream
        self.what = what
        self.interval = default_interval() if interval is None else interval
        self.clock = clock
        self.describe = describe
        self.bookends = bookends
        self.enabled = plain(stream) if enabled is None else enabled
        self.grace = grace
        self._printed = False
        self._text = ""
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._last = clock()

    # -- what the next line says -------------------------------------------------
    def update(self, text: str, now: bool = False) -> None:
        """Say ``text`` from now on; ``now``: print it at once (a new step, not a count)."""
        changed = text != self._text
        self._text = text
        if now and changed and self._thread is not None and self.clock() - self._started >= self.grace:
            self._line()

    def set(self, done: float, total: float | None, unit: str = "") -> None:
        """Say ``done/total unit``."""
        self.update(f"{done:.0f}/{'?' if total is None else f'{total:.0f}'}" + (f" {unit}" if unit else ""))

    # -- lifetime ------------------------------------------------------------------
    def start(self) -> Heartbeat:
        if not self.enabled or self._thread is not None:
            return self
        self._started = self._last = self.clock()
        self._stopped.clear()
        if self.bookends and self.grace <= 0:
            self._line()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat: {self.what}", daemon=True)
        self._thread.start()
        return self

    def stop(self, outcome: str = "done") -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopped.set()
        thread.join(timeout=5)
        if self.bookends and self._printed and outcome == "done":
            self._line(f"{outcome}, ")

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop("done" if kind is None else "stopped")

    # -- the thread ----------------------------------------------------------------
    def _beat(self) -> None:
        if self.grace > 0:
            if self._stopped.wait(self.grace):
                return
            if self.bookends:
                self._line()
        while not self._stopped.wait(max(0.01, self.interval - (self.clock() - self._last))):
            if self.clock() - self._last >= self.interval:
                self._line()

    def line(self, outcome: str = "") -> str:
        """The line as it would be printed now (without its newline)."""
        text = self.describe() if self.describe is not None else self._text
        elapsed = f"({outcome}{duration(self.clock() - self._started)})"
        return f"{self.what}: {text} {elapsed}" if text else f"{self.what} {elapsed}"

    def _line(self, outcome: str = "") -> None:
        with self._lock:
            self._last = self.clock()
            self._printed = True
            try:
                self.stream.write(self.line(outcome) + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # the reader went away (a closed pipe or file): progress is not worth failing for
                self._stopped.set()


class Updates(Protocol):
    """What :func:`status` yields: rich's status or a heartbeat, either told the current step."""

    def update(self, text: str, /) -> None: ...


class _Steps:
    """A heartbeat told of steps: each new step is a line at once."""

    def __init__(self, beat: Heartbeat) -> None:
        self._beat = beat

    def update(self, text: str, /) -> None:
        self._beat.update(text, now=True)


@contextmanager
def status(console: Console, text: str) -> Iterator[Updates]:
    """rich's ``console.status(text)`` on a terminal; elsewhere a heartbeat on the console's file."""
    if not plain_console(console):
        with console.status(text) as spinner:
            yield spinner
        return
    # A second's grace: a step that ends (or fails, and says why in one line) sooner prints nothing.
    with Heartbeat(console.file, text, enabled=True, grace=STATUS_GRACE) as beat:
        yield _Steps(beat)


def tasks_text(progress: Progress, unit: str = "") -> str:
    """The unfinished tasks of a rich progress as ``description done/total unit``, joined by ``; ``
    (the last task when every one has finished, so a line between tasks still says something)."""
    tasks = progress.tasks
    running = [t for t in tasks if not t.finished] or tasks[-1:]
    suffix = f" {unit}" if unit else ""
    return "; ".join(f"{t.description} {t.completed:.0f}/{'?' if t.total is None else f'{t.total:.0f}'}{suffix}"
                     for t in running)


@contextmanager
def follow(progress: Progress, what: str, unit: str = "") -> Iterator[None]:
    """Where ``progress``'s bars cannot be drawn, a heartbeat saying its tasks (``building: etcd 40/310 packages``)."""
    with Heartbeat(progress.console.file, what, describe=lambda: tasks_text(progress, unit),
                   enabled=plain_console(progress.console)):
        yield
