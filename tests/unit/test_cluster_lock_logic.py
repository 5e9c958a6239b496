"""The Lease lock's rules without a cluster: an in-memory Lease store that enforces uid and
resourceVersion preconditions as the API server does, and a clock the test moves.

The renewer thread is not started here; each test calls one renewer pass (``_renew_due``)
when its fake clock says so, so every step is deterministic. The same rules run against a
real API server in tests/integration/test_cluster_lock*.py.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools

import pytest

from dra_harness.errors import HarnessError, LockLost, LockTimeout, NotEstablished
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.lock import EXCLUSIVE, KIND_LABEL, LEASES, ClusterLock


class FakeLeases:
    """Just enough of :class:`~dra_harness.kube.rest.Kube` for leases in one namespace."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}
        self.fail_renewals: list[BaseException] = []  # raised, one per renewal (patch), before the store is touched
        self.renewals = 0
        self.lose_answers = 0  # creates applied whose answer is lost (Unreachable), one each
        self.on_lost = lambda: None  # what happens meanwhile (the test's clock moves on, say)
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)

    def _stamp(self, lease: dict) -> dict:
        lease["metadata"]["resourceVersion"] = str(next(self._rv))
        return copy.deepcopy(lease)

    def create(self, res, body, namespace=None):
        name = body["metadata"]["name"]
        if name in self.items:
            raise rest.Conflict(409, "AlreadyExists", name)
        lease = copy.deepcopy(body)
        lease["metadata"].update(uid=f"uid-{next(self._uid)}", namespace=namespace or "default")
        self.items[name] = lease
        answer = self._stamp(lease)
        if self.lose_answers:  # applied, and the answer lost on the way back
            self.lose_answers -= 1
            self.on_lost()
            raise rest.Unreachable("API server unreachable: ProtocolError")
        return answer

    def get(self, res, name, namespace=None):
        if name not in self.items:
            raise rest.NotFound(404, "NotFound", name)
        return copy.deepcopy(self.items[name])

    def list(self, res, namespace=None, label_selector=None):
        def match(labels: dict) -> bool:
            for term in (label_selector or "").split(","):
                key, neg, value = term.partition("!=") if "!=" in term else term.partition("=")
                if (labels.get(key) == value) == (neg == "!="):
                    return False
            return True
        return [copy.deepcopy(x) for x in self.items.values() if match(x["metadata"].get("labels", {}))]

    def _check(self, name: str, uid: str | None, version: str | None) -> dict:
        current = self.items.get(name)
        if current is None:
            raise rest.NotFound(404, "NotFound", name)
        if (uid and uid != current["metadata"]["uid"]) or (version and version != current["metadata"]["resourceVersion"]):
            raise rest.Conflict(409, "Conflict", "the object has been modified")
        return current

    def patch(self, res, name, body, namespace=None, timeout=30.0):
        """A merge patch of ``spec``; a resourceVersion in it is a precondition, as on the API server."""
        self.renewals += 1
        if self.fail_renewals:
            raise self.fail_renewals.pop(0)
        current = self._check(name, None, body.get("metadata", {}).get("resourceVersion"))
        current["spec"].update(body["spec"])
        return self._stamp(current)

    def request(self, method, path, body=None, timeout=30.0):
        name = path.rsplit("/", 1)[1]
        if method == "DELETE":
            pre = body.get("preconditions", {})
            self._check(name, pre.get("uid"), pre.get("resourceVersion"))
            return self.items.pop(name)
        raise AssertionError(f"unexpected {method} {path}")

    def replace_from_outside(self, name: str, run: str) -> None:
        """Another run's takeover: the lease deleted and created again as its own."""
        self.items.pop(name, None)
        self.create(LEASES, {"metadata": {"name": name, "labels": {RUN_LABEL: run, KIND_LABEL: "exclusive"}},
                             "spec": {"holderIdentity": f"{run}/1", "leaseDurationSeconds": 3}})


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store() -> FakeLeases:
    return FakeLeases()


def _lock(store: FakeLeases, run: str, clock: Clock) -> ClusterLock:
    lock = ClusterLock(store, run, lease_s=3.0)  # type: ignore[arg-type]  # a fake of Kube's lease verbs
    lock.clock = clock
    lock.poll_s = 0.01  # what rest.answered waits between tries, in real time
    lock._ensure_renewer = lambda: None  # type: ignore[method-assign]  # the test drives each renewer pass
    return lock


def _foreign(store: FakeLeases, renew_time: str = "2020-01-01T00:00:00.000000Z") -> dict:
    return store.create(LEASES, {"metadata": {"name": EXCLUSIVE, "labels": {RUN_LABEL: "b", KIND_LABEL: "exclusive"}},
                                 "spec": {"holderIdentity": "b/1", "leaseDurationSeconds": 3, "renewTime": renew_time}})


def test_a_lease_with_an_ancient_renew_time_is_live_until_seen_unchanged_for_its_duration(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    lease = _foreign(store)  # renewTime in 2020: the old wall-clock rule called it expired at once
    assert not lock._expired(lease)
    clock.t += 2.9
    assert not lock._expired(lease)
    clock.t += 0.2
    assert lock._expired(lease)


def test_a_lease_that_changes_is_never_expired_whatever_its_timestamps_say(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    holder = _lock(store, "b", clock)
    holder.wall = lambda: dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)  # its clock a minute behind
    assert holder._create(EXCLUSIVE, "exclusive")
    for _ in range(10):
        assert not lock._expired(store.get(LEASES, EXCLUSIVE))
        clock.t += holder.renew_every
        holder._renew_due()
    assert not holder.lost.is_set()


def test_renewal_errors_of_any_kind_are_retried_until_one_succeeds(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    assert lock._create(EXCLUSIVE, "exclusive")
    store.fail_renewals = [RuntimeError("exec plugin: credential expired"), rest.Unreachable("no answer"),
                       rest.ApiError(500, "InternalError", "etcd")]
    clock.t += lock.renew_every
    while store.renewals < 4:  # the renewer backs off between tries
        lock._renew_due()
        clock.t += 0.05
    assert clock.t - 1000 < lock.renew_deadline
    assert store.items[EXCLUSIVE]["metadata"]["resourceVersion"] != "100"  # the fourth try renewed it
    lock.ensure_held()  # not lost


def test_a_lease_not_renewed_within_its_deadline_is_lost_and_the_holder_is_told(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    assert lock._create(EXCLUSIVE, "exclusive")
    store.fail_renewals = [RuntimeError("exec plugin: credential expired")] * 100
    while clock.t < 1000 + lock.renew_deadline + 0.5:
        clock.t += 0.25
        lock._renew_due()
    assert lock.lost.is_set()
    with pytest.raises(LockLost, match=r"not renewed for .*credential expired"):
        lock.ensure_held()


def test_a_taken_over_lease_is_lost_at_the_next_renewal_and_its_release_leaves_the_new_holder_alone(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    assert lock._create(EXCLUSIVE, "exclusive")
    store.replace_from_outside(EXCLUSIVE, "b")
    clock.t += lock.renew_every
    lock._renew_due()
    with pytest.raises(LockLost, match="taken over by run b"):
        lock.ensure_held()
    assert "taken over by run b" in (lock._release(EXCLUSIVE) or "")
    assert store.items[EXCLUSIVE]["metadata"]["labels"][RUN_LABEL] == "b"
    assert not lock.lost.is_set()


def test_release_deletes_its_lease_even_after_a_renewal_it_did_not_see_the_answer_of(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    assert lock._create(EXCLUSIVE, "exclusive")
    store.items[EXCLUSIVE]["metadata"]["resourceVersion"] = "999"  # a renewal in flight when the section ended
    assert lock._release(EXCLUSIVE) is None
    assert EXCLUSIVE not in store.items


def test_an_exclusive_section_whose_lease_was_taken_raises_lock_lost_when_it_ends(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    with pytest.raises(LockLost) as raised, lock.exclusive():
        store.replace_from_outside(EXCLUSIVE, "b")
        clock.t += lock.renew_every
        lock._renew_due()
    assert isinstance(raised.value, HarnessError) and "no longer its own" in str(raised.value)
    assert store.items[EXCLUSIVE]["metadata"]["labels"][RUN_LABEL] == "b"


def test_a_shared_section_whose_lease_was_deleted_raises_lock_lost_when_it_ends(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    with pytest.raises(LockLost, match="deleted by someone else"), lock.shared():
        store.items.clear()
        clock.t += lock.renew_every
        lock._renew_due()


def test_a_disruptor_stops_at_its_next_step_once_the_lock_is_lost_and_still_restores_what_it_did():
    from types import SimpleNamespace

    from dra_harness.checks.disruption import Disruptor
    from dra_harness.labels import DISRUPTABLE_LABEL

    from dra_harness.kube import rest
    from tests.unit.fake_cluster import FakeKube

    kube = FakeKube()
    kube.add(rest.NODES, "n1", labels={DISRUPTABLE_LABEL: "true"})
    cluster = SimpleNamespace(provider=SimpleNamespace(harness_operated=True), kube=kube, controls_driver=True, run_id="run-a")
    lost: list[str] = []

    def guard() -> None:  # what ClusterLock.ensure_held does once the lease is gone
        if lost:
            raise LockLost(lost[0])

    disruptor = Disruptor(cluster, allowed=True, guard=guard)  # type: ignore[arg-type]  # a fake of the handle's fields used
    with pytest.raises(LockLost, match="taken over"), disruptor.restoring("n1"):
        disruptor.cordon("n1")
        lost.append("taken over by run b")
        disruptor.drain("n1")  # stops before evicting anything
    assert [c[0] for c in kube.calls if c[0] == "PATCH"] == ["PATCH", "PATCH"]  # cordoned, then restored
    assert not kube.node("n1")["spec"].get("unschedulable")


# -- issue #60 --------------------------------------------------------------------------------
def _shared_leases(store: FakeLeases) -> list[dict]:
    return [x for x in store.items.values() if x["metadata"]["labels"][KIND_LABEL] == "shared"]


def test_a_create_whose_answer_was_lost_is_read_back_as_ours_and_renewed(store):
    """Applied, its answer lost, asked again: 409. Before, the 409 read as another run's lease and the test ran
    under a lease nobody renewed."""
    clock = Clock()
    lock = _lock(store, "a", clock)
    store.lose_answers = 1
    with lock.shared():
        [lease] = _shared_leases(store)
        assert lease["metadata"]["name"] in lock._held, "the test runs under a lease this run does not renew"
        created = lease["metadata"]["resourceVersion"]
        clock.t += lock.renew_every
        lock._renew_due()
        assert lease["metadata"]["resourceVersion"] != created  # renewed
        lock.ensure_held()
    assert not store.items


def test_a_lost_answer_recognised_only_after_the_renew_deadline_is_deleted_and_made_anew(store):
    """Another run may have seen it unchanged for its duration meanwhile: held as it was, it would come back to life."""
    clock = Clock()
    lock = _lock(store, "a", clock)
    store.lose_answers = 1
    store.on_lost = lambda: setattr(clock, "t", clock.t + 10)  # the API server away for 10 s
    with lock.shared():
        [lease] = _shared_leases(store)
        assert lease["metadata"]["uid"] == "uid-2", "the lease created 10 s ago is held as if it were new"
        assert [h.lease["metadata"]["uid"] for h in lock._held.values()] == ["uid-2"]


def test_a_409_on_another_runs_lease_is_waited_for_not_taken_as_ours(store):
    clock = Clock()
    lock = _lock(store, "a", clock)
    _foreign(store)
    assert not lock._create(EXCLUSIVE, "exclusive")
    assert not lock._held and store.items[EXCLUSIVE]["metadata"]["labels"][RUN_LABEL] == "b"


def test_waiting_past_the_deadline_for_another_run_is_not_established_and_names_the_holder(store, request):
    """Before, LockTimeout was a harness error: the test was reported as an error (a FAIL of the run)."""
    from tests.unit.test_fail_fast import _report

    clock = Clock()
    lock = _lock(store, "a", clock)
    lock.wait_s = 1.0  # out before the lease could look expired (3 s unchanged)
    ticking = lambda: setattr(clock, "t", clock.t + 1) or clock.t  # noqa: E731 - a clock that moves as it is read
    lock.clock = ticking
    _foreign(store)
    with pytest.raises(LockTimeout) as waited, lock.shared():
        pass
    assert isinstance(waited.value, NotEstablished)
    assert "run b's exclusive section (lease default/dra-harness-exclusive, holder b/1)" in str(waited.value)
    report = _report(request, waited.value, when="setup")
    assert report.outcome == "skipped", report.outcome
    assert report.longrepr[2].startswith("Skipped: not established: run a waited 1s for run b's exclusive section")
