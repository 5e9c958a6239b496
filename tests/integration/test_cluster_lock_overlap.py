"""The Lease lock under what breaks it on a shared cluster (issue #34, item 3), against a real API server.

Each test has a negative control that puts back one rule the lock had before, as a
subclass written here, and shows the same check failing with it:

- two runs whose wall clocks disagree by a minute: with expiry judged from ``renewTime``
  the second run takes the first one's exclusive lease and runs beside it;
- a lease taken over from outside: with an unguarded renewal and delete the old holder
  never notices, and deletes the new holder's lease when its section ends;
- renewals that fail with an exec plugin's credential error: the old renewer thread dies
  on the first one, so the lease stops moving and another run takes it mid-section.

Leases last 3 s here (``lease_s``), so each test takes seconds.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest
from kubernetes.config.config_exception import ConfigException

from dra_harness.errors import LockLost
from dra_harness.kube import rest
from dra_harness.kube.rest import Obj
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.lock import EXCLUSIVE, KIND_LABEL, LEASES, ClusterLock, _Held

from .test_cluster_lock import run_at_once

pytestmark = pytest.mark.cluster
NS = "default"
LEASE_S = 3.0


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class WallClockExpiry(ClusterLock):
    """Expiry as before #34: a lease is dead once its ``renewTime`` is older than its duration by this machine's clock."""

    def _expired(self, lease: Obj) -> bool:
        spec = lease["spec"]
        at = dt.datetime.strptime((spec.get("renewTime") or spec["acquireTime"]).replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
        return self.wall() - at > dt.timedelta(seconds=spec["leaseDurationSeconds"])


class Unguarded(ClusterLock):
    """Renewal and release as before #34: a merge patch of ``renewTime`` and a delete by name, neither guarded."""

    def _renew_one(self, name: str, held: _Held) -> None:
        sent = self.clock()
        try:
            self.kube.patch(LEASES, name, {"spec": {"renewTime": _micro(self.wall())}}, self.namespace)
        except (rest.ApiError, rest.Unreachable):
            pass
        held.renewed, held.next_at = sent, sent + self.renew_every

    def _delete(self, name: str, held: _Held) -> None:
        self.kube.delete(LEASES, name, self.namespace)


class OldRenewer(ClusterLock):
    """The renewer thread as before #34: it swallowed API errors and ended on any other."""

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every):
            for name in list(self._held):
                try:
                    self.kube.patch(LEASES, name, {"spec": {"renewTime": _micro(self.wall())}}, self.namespace)
                except (rest.ApiError, rest.Unreachable):
                    pass


class FlakyCredentials:
    """The real client, but its renewals (patches) fail while ``failing`` is set, as an exec
    plugin fails to get a token (the python client raises ConfigException from its auth hook)."""

    def __init__(self, kube: rest.Kube) -> None:
        self.kube, self.failing, self.failed = kube, threading.Event(), 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        if self.failing.is_set():
            self.failed += 1
            raise ConfigException("exec: process returned 1. stderr: getting credentials: token expired")
        return self.kube.patch(*args, **kwargs)


def _version(kube: rest.Kube) -> str:
    return kube.get(LEASES, EXCLUSIVE, NS)["metadata"]["resourceVersion"]


# -- clock skew -----------------------------------------------------------------------------
def _skewed_runs(kube: rest.Kube, reader: type[ClusterLock]) -> tuple[list[tuple[str, float, float]], list[BaseException]]:
    """Run b holds the exclusive lease for 4 s with its wall clock a minute behind; run a asks for a
    shared section meanwhile. The sections' (run, start, end), and what each raised."""
    b = ClusterLock(kube, "run-b", lease_s=LEASE_S)
    b.wall = lambda: dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    a = reader(kube, "run-a", wait_s=30, lease_s=LEASE_S)
    spans: list[tuple[str, float, float]] = []
    raised: list[BaseException] = []

    def section(lock: ClusterLock, run: str, kind: str, delay: float, hold: float) -> None:
        time.sleep(delay)
        try:
            with lock.exclusive() if kind == "exclusive" else lock.shared():
                start = time.monotonic()
                time.sleep(hold)
                spans.append((run, start, time.monotonic()))
        except LockLost as e:
            raised.append(e)

    run_at_once([lambda: section(b, "b", "exclusive", 0.0, 4.0), lambda: section(a, "a", "shared", 0.5, 0.3)], a, b, timeout=60)
    return spans, raised


def _overlap(spans: list[tuple[str, float, float]]) -> bool:
    return any(r1 != r2 and s1 < e2 and s2 < e1 for r1, s1, e1 in spans for r2, s2, e2 in spans)


def test_two_runs_whose_clocks_disagree_by_a_minute_never_overlap(small_cluster):
    started = time.monotonic()
    spans, raised = _skewed_runs(small_cluster.kube(), ClusterLock)
    assert len(spans) == 2 and not raised, (spans, raised)
    assert not _overlap(spans), spans
    assert time.monotonic() - started < 15


def test_with_wall_clock_expiry_the_run_a_minute_behind_is_overlapped(small_cluster):
    """Negative control: judged by its renewTime, run b's live lease looks a minute old and is taken."""
    spans, raised = _skewed_runs(small_cluster.kube(), WallClockExpiry)
    assert _overlap(spans), spans
    assert any("run-b" in str(e) for e in raised)  # b's section at least learns of it now, at its end


# -- takeover ---------------------------------------------------------------------------------
def _taken_over_while_held(kube: rest.Kube, holder: ClusterLock) -> tuple[float | None, bool, str | None]:
    """Run a holds the exclusive lease; run b deletes it and creates its own. Seconds until a's section
    (checking ``ensure_held`` every 0.1 s, as the disruptor does) stopped (None: ran on for 5 s), whether
    the section raised LockLost, and who holds the lease after it ended (None: nobody)."""
    stopped_after, raised = None, False
    try:
        with holder.exclusive():
            kube.delete(LEASES, EXCLUSIVE, NS)
            kube.create(LEASES, {"metadata": {"name": EXCLUSIVE, "labels": {RUN_LABEL: "run-b", KIND_LABEL: "exclusive"}},
                                 "spec": {"holderIdentity": "run-b/1", "leaseDurationSeconds": 3}}, NS)
            taken = time.monotonic()
            try:
                while time.monotonic() - taken < 5:
                    holder.ensure_held()
                    time.sleep(0.1)
            finally:
                if time.monotonic() - taken < 5:
                    stopped_after = time.monotonic() - taken
    except LockLost:
        raised = True
    holder.close()
    try:
        return stopped_after, raised, kube.get(LEASES, EXCLUSIVE, NS)["metadata"]["labels"][RUN_LABEL]
    except rest.NotFound:
        return stopped_after, raised, None


def test_a_holder_whose_lease_is_taken_over_stops_within_a_renew_period_and_leaves_the_new_lease(small_cluster):
    kube = small_cluster.kube()
    holder = ClusterLock(kube, "run-a", lease_s=LEASE_S)
    stopped_after, raised, owner = _taken_over_while_held(kube, holder)
    assert stopped_after is not None and stopped_after < holder.renew_every + 0.5, stopped_after
    assert raised and owner == "run-b"


def test_with_unguarded_renewal_and_delete_the_old_holder_runs_on_and_deletes_the_new_lease(small_cluster):
    """Negative control: the merge patch renews run b's lease as if it were a's, and the delete by name removes it."""
    kube = small_cluster.kube()
    stopped_after, raised, owner = _taken_over_while_held(kube, Unguarded(kube, "run-a", lease_s=LEASE_S))
    assert stopped_after is None and not raised and owner is None


# -- renewal errors ---------------------------------------------------------------------------
def _credentials_fail_for_a_second(kube: rest.Kube, holder: ClusterLock, flaky: FlakyCredentials) -> bool:
    """Run a holds the exclusive lease for 5 s; its renewals fail for 1 s, right after one succeeded.
    Whether run b, polling the lease meanwhile, found it expired."""
    b = ClusterLock(kube, "run-b", lease_s=LEASE_S)
    taken = False
    with holder.exclusive():
        first = _version(kube)
        while _version(kube) == first:
            time.sleep(0.02)
        flaky.failing.set()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            if time.monotonic() > end - 4:
                flaky.failing.clear()
            taken = taken or b._exclusive_holder() is None
            time.sleep(0.1)
    holder.close()
    return taken


def test_renewal_errors_of_an_exec_plugin_are_retried_and_the_lease_stays_held(small_cluster):
    kube = small_cluster.kube()
    flaky = FlakyCredentials(kube)
    holder = ClusterLock(flaky, "run-a", lease_s=LEASE_S)  # type: ignore[arg-type]  # the real client, wrapped
    taken = _credentials_fail_for_a_second(kube, holder, flaky)
    assert flaky.failed >= 1 and not taken and not holder.lost.is_set()


def test_renewal_errors_that_last_are_reported_as_a_lost_lease_before_another_run_may_take_it(small_cluster):
    kube = small_cluster.kube()
    flaky = FlakyCredentials(kube)
    holder = ClusterLock(flaky, "run-a", lease_s=LEASE_S)  # type: ignore[arg-type]
    b = ClusterLock(kube, "run-b", lease_s=LEASE_S)
    with pytest.raises(LockLost, match=r"not renewed .*token expired"), holder.exclusive():
        flaky.failing.set()
        while b._exclusive_holder() is not None:
            time.sleep(0.1)
        lost_first = holder.lost.is_set()
    holder.close()
    assert lost_first


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the old renewer's death, shown here
def test_with_the_old_renewer_an_exec_plugin_error_ends_renewal_and_another_run_takes_the_lease(small_cluster):
    """Negative control: the renewer thread dies on the first credential error and never renews again."""
    kube = small_cluster.kube()
    flaky = FlakyCredentials(kube)
    holder = OldRenewer(flaky, "run-a", lease_s=LEASE_S)  # type: ignore[arg-type]
    taken = _credentials_fail_for_a_second(kube, holder, flaky)
    assert flaky.failed == 1 and taken
    assert holder._renewer is not None and not holder._renewer.is_alive()
