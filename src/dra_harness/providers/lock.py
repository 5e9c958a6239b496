"""Runs that share a cluster take turns for what must run alone, through Leases.

Within one run, pytest-xdist workers share a file lock (see the plugin). Across runs
(two CI pipelines against one staging cluster) the lock must live in the cluster:
a readers–writer lock made of ``coordination.k8s.io`` Leases (each run's in its ``--lease-namespace``).

- A test that only shares devices holds a *shared* lease of its own
  (``dra-harness-s-<run>-<n>``) for its duration.
- An exclusive or disruptive test creates the one *exclusive* lease
  (``dra-harness-exclusive``; creation is atomic, so one run wins) and then waits until
  no other run holds a shared lease.
- A shared taker creates its lease first and then looks for an exclusive one held by
  another run; if there is one it steps back and waits. So the two never both proceed.

Why it cannot overlap, as far as Leases allow:

- **Expiry is observed, not computed from timestamps** (:mod:`.lock_others`): a reader judges
  a lease expired only once *it* has seen it unchanged for its duration on its own monotonic
  clock; a killed run's lease is taken over one duration after a waiter first looks at it.
- **The holder gives up before a reader can take over.** It renews every quarter of the
  duration, retrying errors of any kind (an exec plugin's credential error included) with
  backoff, and counts its lease lost once no renewal has succeeded for two thirds of the
  duration, since the last successful renewal was *sent* — earlier than any reader can have
  seen it, so before any reader can call it expired (clocks that tick at the same rate).
- **Every write is guarded.** Renewals are merge patches carrying the resourceVersion
  last written (the API server applies them to that version only); releases and takeovers delete with ``preconditions: {uid, resourceVersion}``.
  A run whose lease was taken over gets a conflict, counts the lease lost, and never
  renews or deletes the new holder's lease.
- **Loss is reported.** :attr:`ClusterLock.lost` is set, :meth:`ClusterLock.ensure_held`
  raises :class:`~dra_harness.errors.LockLost`, and a section whose lease was lost raises
  it when it ends. What this cannot do: stop a step already under way. A caller stops at
  its next ``ensure_held()`` (the plugin's disruptor calls it before each disruptive
  action); a section that never asks learns of the loss only when it ends.
- **A create whose answer was lost is ours.** Applied, its answer lost, asked again, a create
  meets 409. Each take writes a token of its own (:data:`ATTEMPT_ANNOTATION`), so a 409 is read
  back: our token -> we hold the lease and renew it; another's -> we wait as for any held lease.
  Recognised only after the renew deadline (another run may have counted it expired), it is
  deleted and made anew: no section runs under a lease nobody renews.
- **Other runs are found in every namespace, by label** (:mod:`.lock_others`), so runs given
  different ``--lease-namespace`` still exclude each other. Two namespaces' exclusive leases are
  not one object: an exclusive taker that finds another run's after creating its own steps back
  (a random pause), as a shared taker does; two that each look after creating cannot both miss
  the other.

Every lease carries the run label (the sweep removes what a killed run left).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from dra_harness.errors import LockLost, LockTimeout
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL
from dra_harness.options import LEASE_SECONDS
from dra_harness.providers.lock_others import EXCLUSIVE as EXCLUSIVE
from dra_harness.providers.lock_others import KIND_LABEL as KIND_LABEL
from dra_harness.providers.lock_others import LEASES as LEASES
from dra_harness.providers.lock_others import OtherRuns, run_of, section, version_of, where
from dra_harness.providers.lock_others import refuse_blind_runs as refuse_blind_runs

#: The token of one take of a lease: a create whose answer was lost is recognised as ours by it.
ATTEMPT_ANNOTATION = "dra-harness.io/lock-attempt"
#: How long taking the lock rides out an API server that does not answer or turns requests away (429, 5xx): a
#: control-plane upgrade or restart. Longer, and the test that waits for it is told (not established).
AWAY_SECONDS = 120.0
_counter = itertools.count()
T = TypeVar("T")
log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _attempt_of(lease: Obj) -> str | None:
    return (lease["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION)


@dataclass
class _Held:
    """A lease this process created: the version it last wrote, and when its last renewal was sent."""

    lease: Obj
    renewed: float  # monotonic time the last successful write was sent
    next_at: float  # when the renewer tries next
    failures: int = 0
    last_error: str = ""


class ClusterLock(OtherRuns):
    """The lock of one run on one cluster; ``shared()`` and ``exclusive()`` are context managers.

    ``lease_s`` is the lease duration it writes (tests use seconds). ``clock`` (monotonic)
    judges every duration; ``wall`` only stamps ``acquireTime``/``renewTime`` for people
    reading the Lease, and is never compared with another machine's.
    """

    def __init__(self, kube: Kube, run_id: str, namespace: str = "default", wait_s: float = 1800.0,
                 lease_s: float = LEASE_SECONDS) -> None:
        self.kube, self.run_id, self.namespace, self.wait_s = kube, run_id, namespace, wait_s
        self.lease_s = lease_s
        self.renew_every = lease_s / 4
        self.renew_deadline = lease_s * 2 / 3
        self.poll_s = min(1.0, lease_s / 4)
        self.away_s = AWAY_SECONDS
        self.clock: Callable[[], float] = time.monotonic
        self.wall: Callable[[], dt.datetime] = _now
        #: Set once any lease of this lock was lost; :meth:`ensure_held` says which and why.
        self.lost = threading.Event()
        self._held: dict[str, _Held] = {}
        self._lost: dict[str, tuple[_Held, str]] = {}
        self._observed = {}
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- leases of this run ---------------------------------------------------------------
    def _body(self, name: str, kind: str, attempt: str) -> Obj:
        now = _micro(self.wall())
        return {"metadata": {"name": name, "labels": {RUN_LABEL: self.run_id, KIND_LABEL: kind},
                             "annotations": {ATTEMPT_ANNOTATION: attempt}},
                "spec": {"holderIdentity": f"{self.run_id}/{os.getpid()}", "leaseDurationSeconds": math.ceil(self.lease_s),
                         "acquireTime": now, "renewTime": now}}

    def _create(self, name: str, kind: str) -> bool:
        """Create lease ``name`` and renew it from then on: True once it is ours, False while another holds it.

        Asked again through an API server away or busy (:meth:`_answered`); a 409 is read back, and a lease
        carrying this take's token is ours (the first create was applied, its answer lost). Its renewals are
        counted from the first create *sent*, the earliest it can have been applied."""
        while True:
            attempt, sent = uuid.uuid4().hex, self.clock()
            body = self._body(name, kind, attempt)
            try:
                lease = self._answered(lambda: self.kube.create(LEASES, body, self.namespace))  # noqa: B023 - at once
            except rest.Conflict:
                current = self._answered(lambda: self._get(name))
                if current is None:
                    continue  # deleted since: create it again
                if _attempt_of(current) != attempt:
                    return False  # another's (or an earlier take's, left unrenewed): wait as for any held lease
                if self.clock() - sent > self.renew_deadline:
                    # Ours, but unrenewed for longer than another run needs to count it expired: made anew.
                    log.warning("lease %s/%s: created %.1fs ago, its answer lost; made again", self.namespace, name,
                                self.clock() - sent)
                    self._delete(name, _Held(current, sent, sent))
                    continue
                log.info("lease %s/%s: its create's answer was lost; read back, it is ours", self.namespace, name)
                lease = current
            with self._guard:
                self._held[name] = _Held(lease, sent, sent + self.renew_every)
            self._ensure_renewer()
            return True

    def _get(self, name: str) -> Obj | None:
        try:
            return self.kube.get(LEASES, name, self.namespace)
        except rest.NotFound:
            return None

    def _release(self, name: str) -> str | None:
        """Stop renewing ``name`` and delete it if it is still ours; the reason it was lost, if it was."""
        with self._guard:
            held = self._held.pop(name, None)
            held, reason = self._lost.pop(name, (held, None))
            if not self._lost:
                self.lost.clear()
        if held is not None:
            self._delete(name, held)
        return reason

    def _delete(self, name: str, held: _Held) -> None:
        """Delete the lease only while it is still ours: the same object, with our holder identity."""
        lease = held.lease
        try:
            for _ in range(3):
                try:
                    self.kube.request("DELETE", LEASES.path(self.namespace, name), {
                        "kind": "DeleteOptions", "apiVersion": "v1",
                        "preconditions": dict(zip(("uid", "resourceVersion"), version_of(lease), strict=True))})
                    return
                except rest.NotFound:
                    return
                except rest.Conflict:
                    pass  # changed since: a renewal still in flight, or someone else's lease now
                try:
                    lease = self.kube.get(LEASES, name, self.namespace)
                except rest.NotFound:
                    return
                if not self._same_holder(lease, held.lease):
                    log.warning("lease %s/%s left alone: it is run %s's now", self.namespace, name, run_of(lease))
                    return
        except (rest.ApiError, rest.Unreachable) as e:
            if not rest.transient(e):
                raise
            # Throttled or the API server away: no longer renewed, so other runs may take it over once they have seen
            # it unchanged for its duration, and it carries the run label, so the end-of-run sweep deletes it.
            log.warning("lease %s/%s left to the end-of-run sweep: %s", self.namespace, name, e)

    @staticmethod
    def _same_holder(now: Obj, ours: Obj) -> bool:
        return version_of(now)[0] == version_of(ours)[0] and now["spec"].get("holderIdentity") == ours["spec"]["holderIdentity"]

    def _ensure_renewer(self) -> None:
        self._wake.set()
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew_loop, daemon=True, name="dra-harness-lease-renewer")
            self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew_due()
            except Exception:  # logged with its traceback (a bug); a lease it left unrenewed still counts as lost
                log.exception("lease renewer of run %s", self.run_id)
            with self._guard:
                wait = min((h.next_at for h in self._held.values()), default=self.clock() + self.renew_every) - self.clock()
            self._wake.wait(max(0.02, wait))
            self._wake.clear()

    def _renew_due(self) -> None:
        """One pass of the renewer: renew every held lease whose time has come."""
        now = self.clock()
        with self._guard:
            due = [(name, held) for name, held in self._held.items() if held.next_at <= now]
        for name, held in due:
            self._renew_one(name, held)

    def _renew_one(self, name: str, held: _Held) -> None:
        """One renewal, guarded by the resourceVersion last written. Never raises: every
        error is retried with backoff until the lease counts as lost."""
        sent = self.clock()
        if sent - held.renewed > self.renew_deadline:
            self._lose(name, f"not renewed for {sent - held.renewed:.1f}s (last error: {held.last_error or 'none'})")
            return
        # A merge patch that names the resourceVersion is applied to that version only (409 otherwise):
        # an update guarded as a PUT would be, within the Role's `patch` verb.
        guarded = {"metadata": {"resourceVersion": held.lease["metadata"]["resourceVersion"]},
                   "spec": {"renewTime": _micro(self.wall())}}
        try:
            lease = self.kube.patch(LEASES, name, guarded, self.namespace, timeout=max(1.0, self.renew_every))
        except rest.NotFound:
            self._lose(name, "deleted by someone else")
            return
        except rest.Conflict:
            self._after_conflict(name, held)
            return
        except Exception as e:  # noqa: BLE001 - any error (an exec plugin's included) is retried until the deadline
            held.failures += 1
            held.last_error = f"{e.__class__.__name__}: {e}"
            held.next_at = self.clock() + min(self.renew_every / 2, 0.1 * 2 ** held.failures)
            log.warning("renewing lease %s/%s failed (%d in a row): %s", self.namespace, name, held.failures, held.last_error)
            return
        with self._guard:
            if self._held.get(name) is held:
                held.lease, held.renewed, held.failures, held.last_error = lease, sent, 0, ""
                held.next_at = sent + self.renew_every

    def _after_conflict(self, name: str, held: _Held) -> None:
        """The lease changed under us: lost unless it is still our object with our holder (a label added, say)."""
        try:
            current = self.kube.get(LEASES, name, self.namespace)
        except rest.NotFound:
            self._lose(name, "deleted by someone else")
            return
        except Exception as e:  # noqa: BLE001 - as in _renew_one: retried until the deadline
            held.last_error, held.next_at = f"{e.__class__.__name__}: {e}", self.clock() + self.renew_every / 4
            return
        if not self._same_holder(current, held.lease):
            self._lose(name, f"taken over by run {run_of(current)} (holder {current['spec'].get('holderIdentity')})")
            return
        with self._guard:
            if self._held.get(name) is held:
                held.lease, held.next_at = current, self.clock()  # still ours: renew from the new version at once

    def _lose(self, name: str, reason: str) -> None:
        with self._guard:
            held = self._held.pop(name, None)
            if held is None:
                return  # released meanwhile
            message = f"run {self.run_id}'s lease {self.namespace}/{name} is no longer its own: {reason}"
            self._lost[name] = (held, message)
            self.lost.set()
        log.error("%s", message)

    def ensure_held(self) -> None:
        """Raise :class:`LockLost` if a lease this lock holds was lost (or is overdue for renewal)."""
        now = self.clock()
        with self._guard:
            overdue = [(n, h) for n, h in self._held.items() if now - h.renewed > self.renew_deadline]
        for name, held in overdue:
            self._lose(name, f"not renewed for {now - held.renewed:.1f}s (last error: {held.last_error or 'none'})")
        with self._guard:
            reasons = [reason for _, reason in self._lost.values()]
        if reasons:
            raise LockLost("; ".join(reasons))

    def _held_uids(self) -> set[str]:
        with self._guard:
            return {version_of(h.lease)[0] for h in self._held.values()}

    def _waited_too_long(self, started: float, waiting_for: str) -> None:
        if self.clock() - started > self.wait_s:
            raise LockTimeout(f"run {self.run_id} waited {self.wait_s:.0f}s for {waiting_for}")

    def _answered(self, call: Callable[[], T]) -> T:
        """``call()`` through an API server away or busy for up to :attr:`away_s`; then its last error (the test
        waiting on the lock is not established, see the plugin)."""
        return rest.answered(call, self.away_s, self.poll_s)

    # -- the lock -----------------------------------------------------------------------
    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold a shared lease for the block; raises :class:`LockLost` at its end if the lease was lost."""
        started = self.clock()
        while True:
            name = f"dra-harness-s-{self.run_id}-{os.getpid()}-{next(_counter)}"[:63]
            if not self._create(name, "shared"):
                continue  # one left by a take of that name whose delete failed: a name of its own then
            holder = next(iter(self._answered(lambda: self._others("exclusive"))), None)
            if holder is None:
                break
            self._release(name)  # step back: another run's exclusive section goes first
            self._waited_too_long(started, section(holder))
            time.sleep(self.poll_s)
        try:
            yield
        finally:
            lost = self._release(name)
        if lost:
            raise LockLost(lost)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the exclusive lease for the block, once no other run's test runs; raises
        :class:`LockLost` at its end (or at the start) if the lease was lost."""
        started = self.clock()
        while True:
            if holder := next(iter(self._answered(lambda: self._others("exclusive"))), None):
                self._waited_too_long(started, section(holder))
                time.sleep(self.poll_s)
                continue
            if not self._create(EXCLUSIVE, "exclusive"):
                if holder := self._answered(self._exclusive_holder):  # None: taken away, or gone since
                    self._waited_too_long(started, section(holder))
                    time.sleep(self.poll_s)
                continue
            if not (rivals := self._answered(lambda: self._others("exclusive"))):
                break
            # Another run's exclusive lease in another namespace, made as ours was: both step back, for a while
            # of their own, and the first to come back alone goes first.
            self._release(EXCLUSIVE)
            self._waited_too_long(started, section(rivals[0]))
            time.sleep(self.poll_s * random.uniform(0.5, 1.5))  # not a secret: only apart in time
        try:
            while readers := self._answered(lambda: self._others("shared")):
                runs = sorted({run_of(r) for r in readers})
                self._waited_too_long(started, f"tests of run(s) {', '.join(runs)} to finish (leases "
                                      f"{', '.join(where(r, self.namespace) for r in readers[:3])})")
                time.sleep(min(0.5, self.poll_s))
            self.ensure_held()
            yield
        finally:
            lost = self._release(EXCLUSIVE)
        if lost:
            raise LockLost(lost)

    def close(self) -> None:
        """Stop renewing; release whatever is still held (an interrupted test)."""
        self._stop.set()
        self._wake.set()
        with self._guard:
            names = sorted(self._held) + sorted(self._lost)
        for name in names:
            try:
                self._release(name)
            except (rest.ApiError, rest.Unreachable):
                pass
