"""Concurrent runs take turns through Leases: an exclusive section never overlaps another run's test.

Two :class:`ClusterLock` objects with different run ids stand for two CI pipelines
against one cluster. Each section records when it starts and ends; overlap of an
exclusive section with any section of the other run is the failure. The negative
control drops the lock and shows the same timeline check does see the overlap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import nullcontext

import pytest

from dra_harness.providers.lock import EXCLUSIVE, LEASES, ClusterLock
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL

pytestmark = pytest.mark.cluster


def _timeline(kube, use_lock: bool) -> list[tuple[str, str, float, float]]:
    """Run a shared-heavy run 'a' and an exclusive-holding run 'b' at once; (run, kind, start, end) per section."""
    spans: list[tuple[str, str, float, float]] = []
    guard = threading.Lock()

    def section(lock: ClusterLock, run: str, kind: str, hold: float) -> None:
        ctx = (lock.exclusive() if kind == "exclusive" else lock.shared()) if use_lock else nullcontext()
        with ctx:
            start = time.monotonic()
            time.sleep(hold)
            end = time.monotonic()
        with guard:
            spans.append((run, kind, start, end))

    a, b = ClusterLock(kube, "run-a"), ClusterLock(kube, "run-b")

    def run_a() -> None:
        for _ in range(4):
            section(a, "a", "shared", 0.6)

    def run_b() -> None:
        time.sleep(0.3)  # arrive while a's first test runs
        section(b, "b", "exclusive", 1.0)
        section(b, "b", "shared", 0.3)

    run_at_once([run_a, run_b], a, b)
    return spans


def run_at_once(runs: list[Callable[[], None]], *locks: ClusterLock, timeout: float = 120) -> None:
    """Each of ``runs`` in a thread of its own (a CI pipeline each); then the runs' locks closed."""
    threads = [threading.Thread(target=run) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    for lock in locks:
        lock.close()


def _overlaps(spans: list[tuple[str, str, float, float]]) -> list[str]:
    return [f"{r1} {k1} overlaps {r2} {k2}" for r1, k1, s1, e1 in spans for r2, k2, s2, e2 in spans
            if r1 != r2 and "exclusive" in (k1, k2) and s1 < e2 and s2 < e1]


def test_an_exclusive_section_never_overlaps_another_runs_tests_and_nothing_is_left(small_cluster):
    kube = small_cluster.kube()
    spans = _timeline(kube, use_lock=True)
    assert len(spans) == 6
    assert not _overlaps(spans), _overlaps(spans)
    assert not kube.list(LEASES, "default", label_selector=RUN_LABEL), "a lease was left behind"


def test_without_the_lock_the_timeline_check_sees_the_overlap(small_cluster):
    """Negative control: the overlap check can fail."""
    assert _overlaps(_timeline(small_cluster.kube(), use_lock=False))


def test_an_exclusive_lease_left_by_a_killed_run_is_taken_over_once_seen_unchanged_for_its_duration(small_cluster):
    kube = small_cluster.kube()
    stale = "2020-01-01T00:00:00.000000Z"
    kube.create(LEASES, {"metadata": {"name": EXCLUSIVE, "labels": {RUN_LABEL: "killed", "dra-harness.io/lock": "exclusive"}},
                         "spec": {"holderIdentity": "killed/1", "leaseDurationSeconds": 2,
                                  "acquireTime": stale, "renewTime": stale}}, "default")
    lock = ClusterLock(kube, "run-c", wait_s=20, lease_s=2)
    started = time.monotonic()
    with lock.exclusive():
        waited = time.monotonic() - started
        held = kube.get(LEASES, EXCLUSIVE, "default")
    lock.close()
    # Not at once (its timestamps mean nothing to this process), but 2 s after first seen unchanged.
    assert held["metadata"]["labels"][RUN_LABEL] == "run-c" and 2 <= waited < 6, waited
    with pytest.raises(rest.NotFound):
        kube.get(LEASES, EXCLUSIVE, "default")
