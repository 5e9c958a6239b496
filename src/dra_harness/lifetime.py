"""A run's processes end with the run, whatever ends it.

CI cancels a job with SIGTERM, or with SIGKILL when the job ignores it. ``dra-harness
run`` starts pytest, and pytest starts locust; if the parent dies the children must
not go on acting on a cluster that is being removed. Each child is started with the
Linux parent-death signal set to SIGTERM, and a process that gets SIGTERM behaves as
on Ctrl-C: teardown runs, the INCOMPLETE report stays, and waits stop retrying (the
cluster may be the thing going away) so teardown is quick.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_PR_SET_PDEATHSIG = 1
#: Set once the process is shutting down: waits then give up on an unreachable cluster at once.
stopping = threading.Event()
#: Set while the run cleans up: a SIGTERM then must not cut the cleanup short.
_cleaning = threading.Event()


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


def _interrupt(signum: int, frame: object) -> None:
    # Only the first SIGTERM interrupts: a second one, or one during the cleanup, would abandon
    # the deletes that leave the cluster as we found it (CI follows up with SIGKILL if it must).
    if stopping.is_set() or _cleaning.is_set():
        stopping.set()
        return
    stopping.set()
    raise KeyboardInterrupt(f"signal {signum}")


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
    """From now on SIGTERM (CI cancelling the job) is handled exactly like Ctrl-C."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
