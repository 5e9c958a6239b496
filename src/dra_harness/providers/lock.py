"""Runs that share a cluster take turns for what must run alone, through Leases.

Within one run, pytest-xdist workers share a file lock (see the plugin). Across runs
(two CI pipelines against one staging cluster) the lock must live in the cluster:
a readers–writer lock made of ``coordination.k8s.io`` Leases in one namespace.

- A test that only shares devices holds a *shared* lease of its own
  (``dra-harness-s-<run>-<n>``) for its duration.
- An exclusive or disruptive test creates the one *exclusive* lease
  (``dra-harness-exclusive``; creation is atomic, so one run wins) and then waits until
  no other run holds a shared lease.
- A shared taker creates its lease first and then looks for an exclusive one held by
  another run; if there is one it steps back and waits. So the two never both proceed.

Every lease carries the run label (the sweep removes what a killed run left), is
renewed while held, and is ignored once its holder stops renewing it, so a run killed
with SIGKILL blocks the others for at most :data:`LEASE_SECONDS`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from dra_harness.errors import LockTimeout
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube, Obj
from dra_harness.labels import RUN_LABEL

LEASES = rest.Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
EXCLUSIVE = "dra-harness-exclusive"
KIND_LABEL = "dra-harness.io/lock"
#: A holder that stops renewing (killed) is ignored after this long.
LEASE_SECONDS = 45
RENEW_EVERY_S = 10.0
_counter = itertools.count()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expired(lease: Obj, now: dt.datetime | None = None) -> bool:
    spec = lease.get("spec", {})
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not renewed:
        return True
    at = dt.datetime.strptime(renewed.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return (now or _now()) - at > dt.timedelta(seconds=spec.get("leaseDurationSeconds") or LEASE_SECONDS)


class ClusterLock:
    """The lock of one run on one cluster; ``shared()`` and ``exclusive()`` are context managers."""

    def __init__(self, kube: Kube, run_id: str, namespace: str = "default", wait_s: float = 1800.0) -> None:
        self.kube, self.run_id, self.namespace, self.wait_s = kube, run_id, namespace, wait_s
        self._held: set[str] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- leases -------------------------------------------------------------------------
    def _body(self, name: str, kind: str) -> Obj:
        now = _micro(_now())
        return {"metadata": {"name": name, "labels": {RUN_LABEL: self.run_id, KIND_LABEL: kind}},
                "spec": {"holderIdentity": f"{self.run_id}/{os.getpid()}", "leaseDurationSeconds": LEASE_SECONDS,
                         "acquireTime": now, "renewTime": now}}

    def _create(self, name: str, kind: str) -> bool:
        try:
            self.kube.create(LEASES, self._body(name, kind), self.namespace)
        except rest.Conflict:
            return False
        with self._guard:
            self._held.add(name)
        self._ensure_renewer()
        return True

    def _release(self, name: str) -> None:
        with self._guard:
            self._held.discard(name)
        self.kube.delete(LEASES, name, self.namespace)

    def _ensure_renewer(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew, daemon=True, name="dra-harness-lease-renewer")
            self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            with self._guard:
                held = sorted(self._held)
            for name in held:
                try:
                    self.kube.patch(LEASES, name, {"spec": {"renewTime": _micro(_now())}}, self.namespace)
                except (rest.ApiError, rest.Unreachable):
                    pass  # the next round tries again; the holder's deadline is generous

    def _others(self, kind: str) -> list[Obj]:
        """Live leases of ``kind`` held by other runs."""
        leases = self.kube.list(LEASES, self.namespace, label_selector=f"{KIND_LABEL}={kind},{RUN_LABEL}!={self.run_id}")
        return [lease for lease in leases if not expired(lease)]

    def _exclusive_holder(self) -> Obj | None:
        try:
            lease = self.kube.get(LEASES, EXCLUSIVE, self.namespace)
        except rest.NotFound:
            return None
        if expired(lease):  # its run was killed: take it away, guarded by its version
            try:
                self.kube.request("DELETE", LEASES.path(self.namespace, EXCLUSIVE), {
                    "kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"resourceVersion": lease["metadata"]["resourceVersion"]}})
            except (rest.NotFound, rest.Conflict):
                pass
            return None
        return lease

    def _waited_too_long(self, started: float, waiting_for: str) -> None:
        if time.monotonic() - started > self.wait_s:
            raise LockTimeout(f"run {self.run_id} waited {self.wait_s:.0f}s for {waiting_for} "
                              f"(leases in namespace {self.namespace})")

    # -- the lock -----------------------------------------------------------------------
    @contextmanager
    def shared(self) -> Iterator[None]:
        name = f"dra-harness-s-{self.run_id}-{os.getpid()}-{next(_counter)}"[:63]
        started = time.monotonic()
        while True:
            self._create(name, "shared")
            holder = self._exclusive_holder()
            if holder is None or holder["metadata"]["labels"].get(RUN_LABEL) == self.run_id:
                break
            self._release(name)  # step back: another run's exclusive section goes first
            self._waited_too_long(started, f"run {holder['metadata']['labels'].get(RUN_LABEL)}'s exclusive section")
            time.sleep(1.0)
        try:
            yield
        finally:
            self._release(name)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        started = time.monotonic()
        while not self._create(EXCLUSIVE, "exclusive"):
            holder = self._exclusive_holder()
            if holder is not None:
                self._waited_too_long(started, f"run {holder['metadata']['labels'].get(RUN_LABEL)}'s exclusive section")
                time.sleep(1.0)
        try:
            while readers := self._others("shared"):
                runs = sorted({r["metadata"]["labels"].get(RUN_LABEL, "?") for r in readers})
                self._waited_too_long(started, f"tests of run(s) {', '.join(runs)} to finish")
                time.sleep(0.5)
            yield
        finally:
            self._release(EXCLUSIVE)

    def close(self) -> None:
        """Stop renewing; release whatever is still held (an interrupted test)."""
        self._stop.set()
        with self._guard:
            held = sorted(self._held)
        for name in held:
            try:
                self._release(name)
            except (rest.ApiError, rest.Unreachable):
                pass
