"""What one run sees of the other runs' Leases (:mod:`dra_harness.providers.lock`): which are live, in every namespace.

Apart from the lock itself because it is the other half of the rule: the lock holds and renews
this run's own leases, this judges everyone else's. Two things make it hard:

- **Expiry is observed, not computed from timestamps** (client-go's rule): a lease is expired only
  once this process has seen it unchanged (same uid and resourceVersion) for its duration on its
  own monotonic clock; another machine's ``renewTime`` says nothing here.
- **Every namespace is looked at.** Runs given different ``--lease-namespace`` create their leases
  apart, so each looks for the others' with one list by label across the cluster. That needs
  ``list`` on leases cluster-wide (the shipped ``dra-harness`` ClusterRole grants it);
  :func:`refuse_blind_runs` refuses, in one line, a run whose identity lacks it, rather than let it
  run blind to those runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL

LEASES = rest.Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
EXCLUSIVE = "dra-harness-exclusive"
KIND_LABEL = "dra-harness.io/lock"
log = logging.getLogger("dra_harness.providers.lock")

_BLIND = ("--lease-namespace {namespace}: this identity may not list Leases in every namespace, so runs that take turns "
          "through another namespace would go unseen; grant list on leases (coordination.k8s.io) cluster-wide, as the "
          "dra-harness ClusterRole in deploy/rbac/dra-harness.yaml does")


def version_of(lease: Obj) -> tuple[str, str]:
    meta = lease["metadata"]
    return meta["uid"], meta["resourceVersion"]


def run_of(lease: Obj) -> str:
    return str(lease["metadata"].get("labels", {}).get(RUN_LABEL, "?"))


def where(lease: Obj, default_namespace: str) -> str:
    """``namespace/name`` of ``lease``."""
    meta = lease["metadata"]
    return f"{meta.get('namespace', default_namespace)}/{meta['name']}"


def section(lease: Obj) -> str:
    """Another run's exclusive section, named by its run, its lease and its holder (for a LockTimeout's line)."""
    return (f"run {run_of(lease)}'s exclusive section (lease {where(lease, '?')}, "
            f"holder {lease['spec'].get('holderIdentity') or '?'})")


def refuse_blind_runs(kube: Kube, namespace: str) -> None:
    """Raise :class:`InputError` when this identity may not list Leases in every namespace: it would not see
    runs that take turns through another lease namespace, and one of their disruptive sections could run
    beside its tests unseen."""
    try:
        kube.list(LEASES, None, label_selector=KIND_LABEL)
    except rest.ApiError as e:
        if e.status == 403:
            raise InputError(_BLIND.format(namespace=namespace)) from None
        raise


class OtherRuns:
    """The other runs' leases as one :class:`~dra_harness.providers.lock.ClusterLock` sees them (a mixin of it)."""

    kube: Kube
    run_id: str
    namespace: str
    lease_s: float
    clock: Callable[[], float]
    #: Leases seen: (namespace/name) -> ((uid, resourceVersion), when this process first saw that version).
    _observed: dict[str, tuple[tuple[str, str], float]]
    _guard: threading.Lock

    def _held_uids(self) -> set[str]:
        """The uids of the leases this lock holds (never another run's)."""
        raise NotImplementedError

    def _expired(self, lease: Obj) -> bool:
        """Whether this process has seen ``lease`` unchanged for its whole duration (client-go's rule)."""
        key, version, now = where(lease, self.namespace), version_of(lease), self.clock()
        with self._guard:
            seen = self._observed.get(key)
            if seen is None or seen[0] != version:
                self._observed[key] = (version, now)
                return False
        return now - seen[1] > (lease["spec"].get("leaseDurationSeconds") or self.lease_s)

    def _live(self, kind: str, others_only: bool = False) -> list[Obj]:
        """Live leases of ``kind`` in every namespace (of other runs only, with ``others_only``), never one this
        lock holds. An exclusive lease in this lock's namespace seen unchanged for its duration is taken away (its
        run was killed), guarded by the version seen; one elsewhere is only passed over (not ours to delete)."""
        selector = f"{KIND_LABEL}={kind}" + (f",{RUN_LABEL}!={self.run_id}" if others_only else "")
        try:
            leases = self.kube.list(LEASES, None, label_selector=selector)
        except rest.ApiError as e:
            if e.status == 403:
                raise InputError(_BLIND.format(namespace=self.namespace)) from None
            raise
        mine = self._held_uids()
        live = []
        for lease in leases:
            if version_of(lease)[0] in mine:
                continue
            if not self._expired(lease):
                live.append(lease)
            elif kind == "exclusive" and lease["metadata"].get("namespace", self.namespace) == self.namespace:
                self._take_away(lease)
        return live

    def _take_away(self, lease: Obj) -> None:
        """Delete a lease seen unchanged for its duration, only as it was seen (uid and resourceVersion)."""
        uid, version = version_of(lease)
        name = lease["metadata"]["name"]
        log.warning("taking over lease %s/%s of run %s: unchanged for %ss", self.namespace, name, run_of(lease),
                    lease["spec"].get("leaseDurationSeconds"))
        try:
            self.kube.request("DELETE", LEASES.path(self.namespace, name), {
                "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid, "resourceVersion": version}})
        except (rest.NotFound, rest.Conflict):
            pass

    def _others(self, kind: str) -> list[Obj]:
        """Live leases of ``kind`` held by other runs, in every namespace."""
        return self._live(kind, others_only=True)

    def _exclusive_holder(self) -> Obj | None:
        """A live exclusive lease, of any run but this lock's own, in any namespace; None when there is none."""
        return next(iter(self._live("exclusive")), None)
