"""A run's processes end with the run, whatever ends it.

CI cancels a job with SIGTERM, or with SIGKILL when the job ignores it. ``dra-harness
run`` starts pytest, and pytest starts locust; if the parent dies the children must
not go on acting on a cluster that is being removed. Each child is started with the
Linux parent-death signal set to SIGTERM, and a process that gets SIGTERM behaves as
on Ctrl-C: teardown runs, the INCOMPLETE report stays, and waits stop retrying (the
cluster may be the thing going away) so teardown is quick.

The interrupt is an exception raised wherever the main thread is. Raised between a lock's
acquire and the ``with`` block that releases it (inside a ``Condition.__enter__``, say, which
urllib3's connection pool passes through on every request), it leaves that lock held for good
and the cleanup that follows hangs on it. So the handler holds the interrupt back to the next
point outside such a seam, and takes no lock itself.
"""

from __future__ import annotations

import _thread
import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_PR_SET_PDEATHSIG = 1


class _Flag:
    """A flag a signal handler may set: ``threading.Event.set`` takes a lock the interrupted thread may hold."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set


#: Set once the process is shutting down: waits then give up on an unreachable cluster at once.
stopping = _Flag()
#: Set while the run cleans up: a SIGTERM then must not cut the cleanup short.
_cleaning = _Flag()


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get ``sig`` when the process that started it dies."""
    parent = os.getpid()

    def preexec() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except (OSError, AttributeError):  # not Linux: the watchdog still ends the run
            return
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return preexec


def alive(pid: int) -> bool:
    """Whether a process of that pid exists (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lineage(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and every process it descends from but init, read from /proc."""
    out, current = set(), pid or os.getpid()
    while current > 1 and current not in out:
        out.add(current)
        try:
            with open(f"/proc/{current}/stat") as f:
                # The command name may hold spaces and parentheses: the parent pid follows the last ")".
                current = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return out


def _in_a_lock_seam(frame: FrameType | None) -> bool:
    """Whether an exception raised in ``frame`` could skip the release of a lock just taken.

    A context manager's ``__enter__`` after its acquire, or its ``__exit__`` before the release;
    logging, which takes its handlers' locks with ``acquire()`` outside the ``try`` that releases them.
    """
    while frame is not None and frame.f_code in _HANDLER_CODE:  # a handler run inside the handler
        frame = frame.f_back
    if frame is None:
        return False
    return frame.f_code.co_name in ("__enter__", "__exit__") or frame.f_code.co_filename == logging.__file__


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # Only the first SIGTERM interrupts: a second one, or one during the cleanup, would abandon
    # the deletes that leave the cluster as we found it (CI follows up with SIGKILL if it must).
    global _held_since
    if _cleaning.is_set() or (stopping.is_set() and _held_since is None):  # not the held-back one coming again
        stopping.set()
        _held_since = None
        return
    stopping.set()
    if _hold_back(signum, frame):
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _ctrl_c(signum: int, frame: FrameType | None) -> None:
    # Python's own SIGINT handler but for its one flaw: every Ctrl-C interrupts, never inside a lock's seam.
    if not _hold_back(signum, frame):
        raise KeyboardInterrupt


#: A seam the main thread has not left for this long is an acquire that blocks (a deadlock, say): a
#: signal then interrupts it as Python would, so a second Ctrl-C still ends a hung run.
_HOLD_AT_MOST_S = 2.0
#: When the interrupt now held back was first held back (set before the re-armer is asked); None: none is.
_held_since: float | None = None


def _hold_back(signum: int, frame: FrameType | None) -> bool:
    """Whether ``frame`` is in a lock's seam, and the signal will come again once the handler returns."""
    global _held_since
    now = time.monotonic()
    if (not _in_a_lock_seam(frame) or _rearm is None or _rearm[0] != os.getpid()  # a forked child has no re-armer
            or (_held_since is not None and now - _held_since > _HOLD_AT_MOST_S)):
        _held_since = None
        return False
    if _held_since is None:
        _held_since = now
    os.write(_rearm[1], bytes([signum]))
    return True


_HANDLER_CODE = {f.__code__ for f in (_interrupt, _ctrl_c, _hold_back, _in_a_lock_seam)}


#: The process that started the re-armer thread, and the pipe's write end that asks it to deliver a
#: held-back interrupt again.
_rearm: tuple[int, int] | None = None


def _rearmer(read_fd: int) -> None:
    # Re-tripping the signal from the handler itself would run the handler again at once, inside
    # itself. From here, a millisecond later, it finds the main thread past the handler and the seam.
    while data := os.read(read_fd, 1):
        time.sleep(0.001)
        _thread.interrupt_main(signal.Signals(data[0]))


@contextmanager
def cleaning_up() -> Iterator[None]:
    """A block that SIGTERM does not interrupt (it only makes the block's waits give up sooner)."""
    _cleaning.set()
    try:
        yield
    finally:
        _cleaning.clear()
        if stopping.is_set() and threading.current_thread() is threading.main_thread():
            # Told to stop and done: the interpreter restores SIGTERM's default while it exits, and a
            # repeated SIGTERM would then turn an interrupted run's exit status into a kill.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


def terminate_as_interrupt() -> None:
    """From now on SIGTERM (CI cancelling the job) is handled like Ctrl-C, and neither interrupts in a lock's seam."""
    global _rearm, _held_since
    if threading.current_thread() is threading.main_thread():
        _held_since = None
        if _rearm is None or _rearm[0] != os.getpid():
            read_fd, write_fd = os.pipe()
            _rearm = (os.getpid(), write_fd)
            threading.Thread(target=_rearmer, args=(read_fd,), name="interrupt-rearm", daemon=True).start()
        signal.signal(signal.SIGTERM, _interrupt)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not one somebody else installed
            signal.signal(signal.SIGINT, _ctrl_c)
