"""Taking a run off a cluster that outlives it, however the run ended; and refusing a run id already in use there.

Why object by object, retrying: the end-of-run sweep (and the watchdog's, after a kill)
is the last chance to take the run's objects off a shared cluster. An API server under
load answers 429 to deletes too (:meth:`~dra_harness.kube.rest.Kube.request` retries only
reads); one being upgraded answers 5xx, or nothing, for a while. The sweep used to stop
at the first such answer and leave everything after it. Now each list and each delete is
a step of its own: a step turned away for a moment (429, 5xx, unreachable) is tried
again in later passes until the deadline, a step refused for good (403) does not stop
the others, and what is still there at the end is returned, with why where known.
Discovery too: whether DeviceTaintRules or Kueue's kinds are served is asked as such a
step, so a 503 from a control plane restarting behind a load balancer is asked again, and
a kind that could not be looked at by the deadline is returned (``Kind/? (why)``): a
sweep that did not see a kind never says it is clean.

First of all the sweep undoes the run's recorded changes to nodes it does not own (a
cordon, :mod:`.node_changes`): a node left unschedulable hurts other teams most.

Why refuse a reused run id: two runs with one id share a lock identity and sweep each
other's objects; a run whose objects are still there (a run going on, or one killed
whose sweep did not finish) makes its id unusable until they are gone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable

from dra_harness.errors import InputError, KubeApiError, one_line
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube, transient
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.labels import SIMULATED_NODE_LABEL, run_selector
from dra_harness.providers import node_changes
from dra_harness.providers.handle import CLUSTER_SCOPED, OPTIONAL_KINDS, cluster_scoped_kinds
from dra_harness.providers.liveness import RUN_LEASE
from dra_harness.providers.lock import KIND_LABEL, LEASES
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)

#: Where kubelets, and KWOK for simulated nodes, keep each node's lease (named after the node).
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: The longest pause between passes over steps turned away for a moment.
MAX_PAUSE_S = 5.0

Step = tuple[str, Callable[[], object]]  # (what it does, for the report; the call)
Kind = tuple[rest.Resource, str | None, str]  # (kind, namespace or None for all, label selector)


def settle(steps: list[Step], deadline: float, refused: set[str] | None = None) -> dict[str, str]:
    """Run every step once, in order; then, in passes with growing pauses, again those turned away for a moment,
    until none is left or ``deadline`` (``time.monotonic()``). Returns what each step not done last met;
    ``refused`` gets the steps refused for good (not tried again)."""
    pending = list(steps)
    failed: dict[str, str] = {}
    pause = 0.5
    while True:
        for what, step in list(pending):
            try:
                step()
            except (rest.ApiError, rest.Unreachable) as e:
                failed[what] = one_line(e)
                if transient(e):
                    continue
                if refused is not None:
                    refused.add(what)
            else:
                failed.pop(what, None)
            pending.remove((what, step))
        if not pending or time.monotonic() + pause > deadline:
            return failed
        log.info("%d step(s) turned away for a moment (%s: %s); again in %.1fs", len(pending),
                 pending[0][0], failed[pending[0][0]], pause)
        time.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE_S)


def sweep_run(kube: Kube, run_id: str, timeout: float = 120.0, lease_namespace: str = "default") -> list[str]:
    """Undo the run's recorded node changes and delete everything labelled with ``run_id`` (kept namespaces
    aside), then wait until it is gone.

    Called once per run by the process that owns it (never by an xdist worker, whose
    session may end while other workers' tests still run), or by its watchdog. Returns
    what is still there after ``timeout``, each with why where a step failed (normally
    nothing), and each kind it could not look at (``Kind/? (why)``: discovery or its list
    went unanswered until the deadline), since what it did not see may be there; a node an
    operator took over is left to them and logged, not returned.
    """
    deadline = time.monotonic() + timeout
    selector = run_selector(run_id, include_kept=False)
    found: list[Step] = []
    fixed = run_kinds(list(CLUSTER_SCOPED), selector, lease_namespace)
    optional: dict[str, list[Kind]] = {}  # the kinds of OPTIONAL_KINDS discovery answered for

    def listing(kinds: list[Kind]) -> None:
        ours = [(f"{res.kind}/{o['metadata']['name']}", _deleting(kube, res, o["metadata"]["name"], namespace))
                for res, namespace, sel in kinds for o in labelled(kube, res, namespace, sel)]
        found.extend(ours)  # all at once: a list turned away midway is asked again whole

    def discovering(what: str, find: Callable[[Kube], list[rest.Resource]]) -> Step:
        def step() -> None:
            optional[what] = [(res, None, selector) for res in reversed(find(kube))]
            listing(optional[what])
        return f"list {what}", step

    # Taint rules first (they act on devices until deleted): the optional kinds in reverse, as run_kinds orders them.
    lists: list[Step] = [("list Node records", lambda: found.extend(_uncordoning(kube, run_id))),
                         *(discovering(what, find) for what, find in reversed(OPTIONAL_KINDS)),
                         *((f"list {res.kind}", functools.partial(listing, [(res, namespace, sel)])) for res, namespace, sel in fixed)]
    failed = settle(lists, deadline)
    refused: set[str] = set()  # deletes refused for good: those objects will not go, so nothing waits for them
    failed |= settle(found, deadline, refused)
    failed |= settle([("delete Pods on nodes gone", lambda: _orphans_deleted(kube, selector))], deadline)
    try:
        watch_until(kube, rest.NAMESPACES, lambda items: all(f"Namespace/{n['metadata']['name']}" in refused for n in items),
                    max(0.0, deadline - time.monotonic()), f"namespaces of run {run_id} to be deleted",
                    label_selector=selector)
    except (WaitError, KubeApiError):
        pass  # what is left is told below

    unread: dict[str, str] = {}  # kind -> why it could not be listed at the last look
    left: list[str] = []

    def remaining() -> list[str]:
        nonlocal left
        # The kinds found once above: discovery is not asked again every look.
        left = _present(kube, [*fixed, *(k for kinds in optional.values() for k in kinds)], unread)
        if unread or not set(left) <= refused:
            raise NotYet(", ".join(left + [f"{kind}/?" for kind in unread]))
        return left

    # Objects with finalizers (a ClusterQueue until Kueue lets it go) outlive their delete by a moment.
    with contextlib.suppress(NotYet):
        until(deadline, 0.5, log, f"objects of run {run_id} to be deleted")(remaining)
    unseen = [f"{kind}/? (could not list: {why})" for kind, why in unread.items()]
    unseen += [f"{what}/? (could not tell whether it is served: {failed.get(f'list {what}', 'not asked before the deadline')})"
               for what, _ in OPTIONAL_KINDS if what not in optional]
    return ([f"{what} ({failed[what]})" if what in failed else what for what in left] + unseen
            + [f"{what} ({why})" for what, why in failed.items() if what.startswith("uncordon ")])


def _orphans_deleted(kube: Kube, selector: str) -> None:
    """Delete at once the run's pods bound to a node that is gone (its simulated nodes, just deleted).

    Our pods end gracefully (:data:`dra_harness.kube.builders.GRACE_S`), which needs a kubelet or a KWOK to
    confirm; on a node that is gone nothing will, and the namespace would wait for the pod garbage collector.
    A pod without a node holds nothing prepared anywhere, so removing it at once harms nothing."""
    nodes = {n["metadata"]["name"] for n in kube.list(rest.NODES)}
    for pod in kube.list(rest.PODS, label_selector=selector):
        node = pod.get("spec", {}).get("nodeName")
        if node and node not in nodes:
            kube.delete(rest.PODS, pod["metadata"]["name"], pod["metadata"]["namespace"], grace_seconds=0)


def refuse_reused_run_id(kube: Kube, run_id: str, lease_namespace: str = "default") -> None:
    """Raise :class:`InputError` when objects of ``run_id`` (kept namespaces, Leases and node records included)
    are on the cluster already: then a run of that id is going on, or one left them behind."""
    alive = (LEASES, lease_namespace, f"{run_selector(run_id)},{KIND_LABEL}={RUN_LEASE}")  # a run of that id going on
    found = _present(kube, [*run_kinds(cluster_scoped_kinds(kube), run_selector(run_id), lease_namespace), alive])
    found += [f"Node/{n['metadata']['name']} (cordoned)" for n in kube.list(rest.NODES)
              if node_changes.cordoned_by(n) == run_id]
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise InputError(f"--run-id {run_id}: this cluster already holds objects of a run with that id ({shown}); "
                         "give this run another id, or delete them first")


def swept_kinds(cluster_kinds: Iterable[rest.Resource]) -> set[rest.Resource]:
    """The kinds the sweep deletes, given the cluster-scoped kinds a run may create that the server serves
    (:func:`~dra_harness.providers.handle.cluster_scoped_kinds`): what a test of the sweep's reach reads."""
    return {res for res, _, _ in run_kinds(list(cluster_kinds), "", "")}


def run_kinds(cluster_kinds: list[rest.Resource], selector: str, lease_namespace: str) -> list[Kind]:
    """(kind, namespace, selector) the run may have made, in the order they are deleted: taint rules first
    (they act on devices until deleted), the run's Leases (not the one that says it is alive,
    :mod:`.liveness`: deleted last, by whoever ends the run), the simulated nodes it made, and only those (a
    real node may carry the run label too), then its namespaces."""
    return [*((res, None, selector) for res in cluster_kinds[::-1]), (LEASES, lease_namespace, f"{selector},{KIND_LABEL}!={RUN_LEASE}"),
            (rest.NODES, None, f"{selector},{SIMULATED_NODE_LABEL}"), (rest.NAMESPACES, None, selector)]


def _present(kube: Kube, kinds: list[Kind], unread: dict[str, str] | None = None) -> list[str]:
    """What of ``kinds`` (:func:`run_kinds`) is on the cluster, as ``Kind/name``. With ``unread``, a kind whose list
    is turned away for a moment (:func:`~dra_harness.kube.rest.transient`) is recorded there (kind -> why), cleared
    first, instead of raising: the others are still looked at."""
    if unread is not None:
        unread.clear()
    present = []
    for res, namespace, sel in kinds:
        try:
            present += [f"{res.kind}/{o['metadata']['name']}" for o in labelled(kube, res, namespace, sel)]
        except (rest.ApiError, rest.Unreachable) as e:
            if unread is None or not transient(e):
                raise
            unread[res.kind] = one_line(e)
    return present


def _uncordoning(kube: Kube, run_id: str) -> list[Step]:
    """A step per node whose record names ``run_id``: its guarded uncordon."""
    def undo(name: str) -> None:
        why = node_changes.uncordon(kube, name, run_id)
        if why:
            log.warning("left node %s as it is: %s", name, why)
        else:
            log.info("uncordoned node %s, cordoned by run %s", name, run_id)

    names = [n["metadata"]["name"] for n in kube.list(rest.NODES) if node_changes.cordoned_by(n) == run_id]
    return [(f"uncordon Node/{name}", functools.partial(undo, name)) for name in names]


def _deleting(kube: Kube, res: rest.Resource, name: str, namespace: str | None) -> Callable[[], None]:
    def delete() -> None:
        kube.delete(res, name, namespace)
        if res is rest.NODES:  # its KWOK's node lease (unlabelled); the garbage collector only takes one it owns
            try:
                kube.delete(LEASES, name, NODE_LEASE_NAMESPACE)
            except rest.ApiError as e:
                if e.status != 403:  # the lease Role not bound: left to the garbage collector
                    raise
    return delete


def labelled(kube: Kube, res: rest.Resource, namespace: str | None, selector: str) -> list[dict]:
    """Objects of ``res`` carrying the run's label; none where we may not list them (then we
    could not have created any either: the roles grant create only with list)."""
    try:
        return kube.list(res, namespace, label_selector=selector)
    except rest.ApiError as e:
        if e.status in (403, 404):
            return []
        raise

