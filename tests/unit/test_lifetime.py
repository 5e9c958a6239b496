"""Only the first SIGTERM interrupts a run; one during its cleanup changes nothing but the waits' patience."""

from __future__ import annotations

import os
import signal

import pytest

from dra_harness import lifetime


@pytest.fixture(autouse=True)
def _handler():
    previous = signal.getsignal(signal.SIGTERM)
    lifetime.stopping.clear()
    lifetime.terminate_as_interrupt()
    yield
    signal.signal(signal.SIGTERM, previous)
    lifetime.stopping.clear()


def test_the_first_sigterm_interrupts_like_ctrl_c_and_marks_the_run_stopping():
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        os.kill(os.getpid(), signal.SIGTERM)
    assert lifetime.stopping.is_set()


def test_a_second_sigterm_is_absorbed():
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)  # would raise again without the guard
    assert lifetime.stopping.is_set()


def test_a_sigterm_during_cleanup_only_marks_the_run_stopping_and_then_is_ignored_to_the_end():
    with lifetime.cleaning_up():
        os.kill(os.getpid(), signal.SIGTERM)
        assert lifetime.stopping.is_set()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_a_cleanup_nobody_interrupted_leaves_the_handler_in_place():
    with lifetime.cleaning_up():
        pass
    assert signal.getsignal(signal.SIGTERM) is lifetime._interrupt


def test_a_process_descends_from_its_parent_and_not_from_its_child():
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert {os.getpid(), os.getppid()} <= lifetime.lineage()
        assert os.getpid() in lifetime.lineage(child.pid)
        assert child.pid not in lifetime.lineage()
    finally:
        child.kill()
        child.wait()
