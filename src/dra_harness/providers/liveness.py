"""Whether a run of the harness is alive on a cluster that outlives it: the run's Lease, held by its watchdog.

Why: a run killed outright is swept by its watchdog, once; what that sweep could not remove (an API server away
longer than its deadline, the watchdog killed too with its machine) stayed for good, and nothing told it apart
from a live run's objects. So the watchdog of every run on such a cluster holds a Lease,
``dra-harness-run-<run>`` (``dra-harness.io/lock=run``), from the run's start until its own sweep is done,
and a later run, ``dra-harness preflight`` and ``dra-harness cluster down --all`` sweep the runs whose Lease
is gone or was not renewed for its duration (:mod:`dra_harness.providers.dead_runs`).

Judged on the API server's clock, never this machine's against another's: the last sign of life is the latest of
the Lease's creation and the server's stamp on its last write (``managedFields``), both the server's clock, and
its ``renewTime`` (the holder's: a holder whose clock runs ahead looks alive longer, never shorter); it is
compared with the server's ``Date``. The end-of-run sweep leaves this Lease (its selector excludes the kind):
the watchdog, or the run that ended clean, deletes it last.
"""

from __future__ import annotations

import datetime as dt

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.lock import KIND_LABEL, LEASES

#: The value of :data:`~dra_harness.providers.lock.KIND_LABEL` on a run's own Lease.
RUN_LEASE = "run"
#: A run's Lease lasts this many times the run's ``--lease-seconds`` (135 s by default): longer than the cluster
#: lock's, since a run judged dead too early loses its objects, not only its turn; renewed six times as often.
DURATION_FACTOR = 3


def lease_name(run_id: str) -> str:
    return f"dra-harness-run-{run_id}"


def duration(lease_seconds: float) -> int:
    return int(lease_seconds * DURATION_FACTOR)


def hold(kube: Kube, run_id: str, namespace: str, holder: str, seconds: int) -> None:
    """Renew the run's Lease, or create it (the first call, or after someone deleted it)."""
    now = _micro(dt.datetime.now(dt.UTC))
    try:
        kube.patch(LEASES, lease_name(run_id), {"spec": {"renewTime": now, "holderIdentity": holder}}, namespace)
        return
    except rest.NotFound:
        pass
    try:
        kube.create(LEASES, {"metadata": {"name": lease_name(run_id), "labels": {RUN_LABEL: run_id, KIND_LABEL: RUN_LEASE}},
                             "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                                      "acquireTime": now, "renewTime": now}}, namespace)
    except rest.Conflict:
        pass  # created meanwhile (a renewal of ours that was slow to answer): renewed at the next call


def release(kube: Kube, run_id: str, namespace: str) -> None:
    """Delete the run's Lease (gone already is fine): the run and its sweep are over."""
    kube.delete(LEASES, lease_name(run_id), namespace)


def last_sign(lease: Obj) -> dt.datetime:
    """The latest sign of life of ``lease``: its creation, the server's stamp on its last write, its renewTime."""
    meta = lease["metadata"]
    stamps = [meta.get("creationTimestamp"), lease.get("spec", {}).get("renewTime"),
              *(m.get("time") for m in meta.get("managedFields") or [])]
    return max(_parsed(s) for s in stamps if s) if any(stamps) else dt.datetime.min.replace(tzinfo=dt.UTC)


def run_leases(kube: Kube, namespace: str) -> list[Obj]:
    return kube.list(LEASES, namespace, label_selector=f"{KIND_LABEL}={RUN_LEASE}")


def alive(lease: Obj, now: dt.datetime) -> bool:
    """Whether ``lease`` was renewed within its duration before ``now`` (the API server's clock)."""
    seconds = lease.get("spec", {}).get("leaseDurationSeconds") or 0
    return now - last_sign(lease) <= dt.timedelta(seconds=seconds + 1)  # + 1: the server's stamps are to the second


def run_of(lease: Obj) -> str:
    return str((lease["metadata"].get("labels") or {}).get(RUN_LABEL, ""))


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parsed(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(dt.UTC)
