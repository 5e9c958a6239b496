"""Sweeping what dead runs left on a cluster that outlives them: at the start of every run there, of
``dra-harness preflight``, and in ``dra-harness cluster down --all``.

Why: a run killed outright is swept by its watchdog, within its deadline; an API server away longer than that,
or the watchdog killed with its machine (a lost CI runner), left the run's objects for good, silently (a kill -9
while the front end answered 503 for 150 s left the run's namespace; nothing would sweep that run again). Now
any later harness command on the cluster finds them and removes them, saying so in one line.

Which runs are dead (:mod:`.liveness`): those whose Lease is gone or was not renewed for its duration, judged on
the API server's clock. A run with no Lease at all (one whose watchdog had not created it yet, a harness from
before the Lease) is taken for dead only once nothing of it is younger than :data:`LEASELESS_AFTER_S`. Never
swept: this run, a canary held across an upgrade on purpose (:data:`~dra_harness.labels.CANARY_LABEL`), and
kept namespaces (``--keep-on-failure``), which the run's own sweep spares too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from dra_harness.errors import KubeApiError, one_line
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.labels import CANARY_LABEL, KEPT_LABEL, RUN_LABEL
from dra_harness.providers import liveness, node_changes
from dra_harness.providers.handle import cluster_scoped_kinds
from dra_harness.providers.sweep import labelled, run_kinds, sweep_run

#: A run without a Lease is dead once its newest object is this old (the API server's clock): far longer than a
#: watchdog takes to create the Lease, and than any test of an older harness without one takes to create its next.
LEASELESS_AFTER_S = 3600.0
#: How long one dead run's sweep may take (its namespaces' deletion included), so a run's start is not held long.
SWEEP_S = 60.0


@dataclass
class DeadRun:
    run_id: str
    objects: list[str] = field(default_factory=list)  # Kind/name, as found
    why: str = ""  # why it counts as dead


def find(kube: Kube, lease_namespace: str, spare: frozenset[str] = frozenset(),
         leaseless_after_s: float = LEASELESS_AFTER_S) -> list[DeadRun]:
    """Runs with objects (or a Lease) on the cluster whose Lease says they are dead, but those in ``spare``."""
    now = kube.server_date()
    leases = {liveness.run_of(lease): lease for lease in liveness.run_leases(kube, lease_namespace)}
    objects: dict[str, list[str]] = {}
    newest: dict[str, dt.datetime] = {}
    canaries = set()
    # Every run's objects, as each run's sweep finds its own (run Leases aside: read above).
    for res, namespace, sel in run_kinds(cluster_scoped_kinds(kube), f"{RUN_LABEL},{KEPT_LABEL}!=true", lease_namespace):
        for o in labelled(kube, res, namespace, sel):
            meta = o["metadata"]
            run = meta["labels"][RUN_LABEL]
            if res is rest.NAMESPACES and meta["labels"].get(CANARY_LABEL) == "true":
                canaries.add(run)
            objects.setdefault(run, []).append(f"{res.kind}/{meta['name']}")
            created = liveness.last_sign({"metadata": {"creationTimestamp": meta.get("creationTimestamp")}})
            newest[run] = max(newest.get(run, created), created)
    for node in kube.list(rest.NODES):  # a node a dead run cordoned mid-drain: the worst leftover for others
        run = node_changes.cordoned_by(node)
        if run:
            objects.setdefault(run, []).append(f"Node/{node['metadata']['name']} (cordoned)")
    dead = []
    for run in sorted(set(objects) | set(leases)):
        if run in spare or run in canaries or not run:
            continue
        lease = leases.get(run)
        if lease is not None:
            if liveness.alive(lease, now):
                continue
            why = f"its Lease not renewed for {(now - liveness.last_sign(lease)).total_seconds():.0f} s"
        else:
            age = (now - newest[run]).total_seconds() if run in newest else float("inf")
            if age <= leaseless_after_s:
                continue
            why = "no Lease, nothing of it created in the last " + (f"{age:.0f} s" if age != float("inf") else "while")
        dead.append(DeadRun(run, objects.get(run, []), why))
    return dead


def sweep(kube: Kube, lease_namespace: str, say: Callable[[str], None], spare: frozenset[str] = frozenset(),
          leaseless_after_s: float = LEASELESS_AFTER_S, sweep_s: float = SWEEP_S) -> list[DeadRun]:
    """Remove what dead runs left (:func:`find`), saying one line per run; never raises for the cluster's answers
    (a sweep of others' leftovers must not stop the command that does it): says so in one line instead."""
    try:
        dead = find(kube, lease_namespace, spare, leaseless_after_s)
    except KubeApiError as e:
        say(f"dra-harness: could not look for what dead runs left: {one_line(e)}")
        return []
    for run in dead:
        try:
            left = sweep_run(kube, run.run_id, sweep_s, lease_namespace)
            if not left:
                liveness.release(kube, run.run_id, lease_namespace)
        except KubeApiError as e:
            left = [f"? ({one_line(e)})"]
        shown = ", ".join(run.objects[:5]) + (f" and {len(run.objects) - 5} more" if len(run.objects) > 5 else "")
        say(f"dra-harness: removed what dead run {run.run_id} left ({run.why}): {shown or 'its Lease'}"
            + (f"; still there: {', '.join(left)}" if left else ""))
    return dead

