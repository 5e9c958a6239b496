"""Disruptive provider actions: restart a node's driver, cordon, drain and uncordon.

Safety first: an action touches a node only if the node carries
``dra-harness.io/disruptable=true`` and, on a cluster the harness did not create, only
with ``--allow-disruptive``. With ``dry_run`` every action is recorded and nothing is
done. :meth:`Disruptor.restoring` undoes what the harness itself did, however the test
ends, and nothing else: a node someone cordoned for maintenance stays cordoned (and is
never chosen as a target), a cordon of the harness's that an operator took over meanwhile
is left to them, and only a driver the harness stopped is started again. A cordon is
recorded on the node itself, so a run killed mid-drain has it undone by its sweep or
watchdog (:mod:`dra_harness.providers.node_changes`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise

from dra_harness.providers.handle import ClusterHandle
from dra_harness.kube import rest
from dra_harness.providers import node_changes
from dra_harness.providers.lock import AWAY_SECONDS
from dra_harness.kube.pods import pod_ready
from dra_harness.labels import DISRUPTABLE_LABEL, RUN_LABEL
from dra_harness.errors import ClusterError, NotEstablished, Refused

log = logging.getLogger(__name__)

@dataclass
class RestartRecord:
    """What one driver restart looked like from the API server, in seconds.

    ``down_for`` is what the harness held the driver down; None under a DaemonSet, which
    replaces a deleted pod by itself: then ``replacement_ready_after`` says when its
    replacement was Ready, and ``back_after`` when the node's slices were whole again.
    """

    node: str
    kill: bool
    down_for: float | None
    replacement_ready_after: float | None = None
    back_after: float | None = None  # from start until the node's slices are complete again, driver running
    missing_for: float = 0.0  # time the node had no slice of the driver
    stale_for: float = 0.0  # time slices stayed published while no driver ran
    slice_events: list[tuple[float, str, str]] = field(default_factory=list)
    relists: int = 0  # times the slice watch was too far behind (410 Gone) and listed again
    failure: str = ""


class DisruptionRefused(Refused, NotEstablished):
    """The action is not allowed on this node or cluster; nothing was touched, and the check that
    asked for it is not established (the cluster did not let us test), never failed."""


class RestoreFailed(ClusterError):
    """A node could not be put back as the harness found it; the message says what is left."""


@dataclass
class DrainResult:
    node: str
    evicted: list[str] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)  # pod -> why (e.g. a PDB)
    #: Pods on the node that are not this run's (another team's, a mirror pod): never evicted.
    left_alone: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.blocked


@dataclass
class Disruptor:
    cluster: ClusterHandle
    allowed: bool
    dry_run: bool = False
    actions: list[str] = field(default_factory=list)
    #: Nodes this disruptor cordoned (not those it found cordoned): the only ones it uncordons.
    cordoned: set[str] = field(default_factory=set)
    #: Nodes whose driver this disruptor stopped: the only ones it restarts or waits for.
    stopped: set[str] = field(default_factory=set)
    #: UIDs of driver pods deleted here, so a replacement is told from the pod it replaces.
    deleted_pods: set[str] = field(default_factory=set)
    #: Raises (LockLost) once the run's exclusive hold on the cluster is gone: called before each
    #: disruptive step, never while restoring, so a test stops disrupting and still puts things back.
    guard: Callable[[], None] | None = None

    def check(self, node: str) -> None:
        if not self.cluster.provider.harness_operated and not self.allowed:
            raise DisruptionRefused(f"refusing to disrupt {node}: pass --allow-disruptive to touch an existing cluster")
        labels = self.cluster.kube.get(rest.NODES, node)["metadata"].get("labels", {})
        if labels.get(DISRUPTABLE_LABEL) != "true":
            raise DisruptionRefused(f"refusing to disrupt {node}: it is not labelled {DISRUPTABLE_LABEL}=true")

    def _still_ours(self) -> None:
        if self.guard is not None:
            self.guard()

    def _do(self, node: str, action: str) -> bool:
        """Record the action; True when it should really be carried out."""
        self.check(node)
        self.actions.append(f"{action} {node}")
        log.info("%s %s%s", action, node, " (dry run: nothing done)" if self.dry_run else "")
        return not self.dry_run

    # -- driver -----------------------------------------------------------------------------
    def stop_driver(self, node: str, kill: bool = False) -> None:
        """Embedded cluster: stop the plugin process. Elsewhere: delete the driver's pod on the
        node, found by its owning DaemonSet (grace period 0 for ``kill``); the DaemonSet starts
        a replacement by itself."""
        self._still_ours()
        if not self._do(node, "kill driver on" if kill else "stop driver on"):
            return
        # Recorded as stopped only once it is: a refusal below must stay a refusal (a skip), never
        # turn into restoring()'s wait for the replacement of a driver nobody stopped.
        if self.cluster.controls_driver:
            self.cluster.provider.stop_driver(node, kill)
            self.stopped.add(node)
            return
        pods = self.cluster.driver_pods(node)
        namespace, name = self.cluster.profile.driver_daemonset
        if pods is None:
            raise DisruptionRefused(f"cannot tell the driver's pods: no DaemonSet {namespace}/{name or '?'} "
                                    "(set the profile's driverDaemonSet or --driver-daemonset)")
        if not pods:
            raise DisruptionRefused(f"no pod of DaemonSet {namespace}/{name} runs on {node}")
        for pod in pods:
            self.cluster.kube.delete(rest.PODS, pod["metadata"]["name"], namespace, grace_seconds=0 if kill else None)
            self.deleted_pods.add(pod["metadata"]["uid"])
            self.stopped.add(node)

    def start_driver(self, node: str) -> None:
        """Embedded cluster: start the plugin process. Elsewhere the DaemonSet does it."""
        if self._do(node, "start driver on") and self.cluster.controls_driver:
            self.cluster.provider.start_driver(node)

    def configure_driver(self, node: str, config: str) -> None:
        """Bring the node's plugin into ``config`` (:mod:`dra_harness.providers.driver_configs`): a process
        restarted with its flags, or the harness's own DaemonSet rolled with them; only where the harness
        installed the driver, elsewhere the driver's own installation chose its settings."""
        if not self.cluster.controls_driver:
            raise DisruptionRefused(f"driver configuration {config!r} needs a driver the harness starts (the embedded "
                                    "cluster's); on this cluster the driver's installation (Helm values) chose it")
        if self.cluster.profile.name != "example":
            raise DisruptionRefused(f"driver configuration {config!r} is the example driver's (its flags); this cluster's "
                                    f"driver is {self.cluster.driver}")
        self._still_ours()
        if self._do(node, f"configure driver ({config}) on"):
            self.cluster.provider.configure_driver(node, config)

    def _replacement_ready(self, node: str) -> bool:
        """A driver pod on ``node`` that is not one deleted here is Ready."""
        return any(pod_ready(p) and p["metadata"]["uid"] not in self.deleted_pods
                   for p in self.cluster.driver_pods(node) or [])

    def target_node(self) -> str:
        """The first node that may be disrupted and publishes devices of the profile's driver
        (one running real containers when there is one). A cordoned node is someone's
        maintenance: it is never chosen."""
        published = {v["node"] for v in self.cluster.published().values()}
        labelled = self.cluster.kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true")
        schedulable = set(self.cluster.schedulable_nodes())  # a NoSchedule taint is someone's maintenance too
        cordoned = sorted(n["metadata"]["name"] for n in labelled if n["metadata"]["name"] not in schedulable)
        # Nodes that run real containers first: what happens to running containers is the question.
        real = set(self.cluster.container_nodes())
        nodes = sorted((n["metadata"]["name"] for n in labelled
                        if n["metadata"]["name"] in published and n["metadata"]["name"] not in cordoned),
                       key=lambda name: (name not in real, name))
        if not nodes:
            skipped = f" (skipped, already cordoned or tainted: {', '.join(cordoned)})" if cordoned else ""
            raise DisruptionRefused(
                f"no schedulable node labelled {DISRUPTABLE_LABEL}=true publishes devices of {self.cluster.driver}{skipped}")
        return nodes[0]

    def restart_driver(self, node: str, kill: bool = False, down_for: float = 2.0, deadline: float = 60.0,
                       while_down=None) -> RestartRecord:
        """Stop the node's driver, keep it down ``down_for`` s, start it, and time its return.

        ``while_down`` (a callable) runs while the driver is stopped. Slice events for
        the node are watched throughout, so missing and stale periods are measured, not assumed.
        """
        held = self.cluster.controls_driver
        record = RestartRecord(node, kill, down_for if held else None)
        kube = self.cluster.kube
        selector = f"spec.driver={self.cluster.driver},spec.nodeName={node}"
        items, rv = kube.list_with_version(rest.RESOURCE_SLICES, field_selector=selector)
        expected = len([d for s in items for d in s["spec"].get("devices") or []])
        t0 = time.monotonic()
        stop_watch = threading.Event()

        known = {s["metadata"]["name"] for s in items}
        watcher = threading.Thread(target=follow_slices, args=(kube, selector, rv, known, t0, record, stop_watch), daemon=True)
        watcher.start()
        try:
            self.stop_driver(node, kill=kill)
            stopped = time.monotonic() - t0
            if while_down is not None:
                while_down()
            if held:  # a DaemonSet's replacement is not ours to hold back
                time.sleep(max(0.0, down_for - (time.monotonic() - t0 - stopped)))
            starting = time.monotonic()  # the start may wait for the kubelet's registration: time from its call
            started = starting - t0
            self.start_driver(node)
            record.failure, republished_after, ready_after = self._wait_driver_back(node, selector, expected, deadline,
                                                                                    since=starting)
            if not record.failure:
                record.back_after = round(republished_after, 3)
            if ready_after is not None:
                record.replacement_ready_after = round(ready_after + started - stopped, 3)
        finally:
            time.sleep(0.3)  # let the watch deliver the last events
            stop_watch.set()
            watcher.join(timeout=10)
        record.missing_for, record.stale_for = _slice_periods(record.slice_events, bool(items), stopped, started,
                                                              time.monotonic() - t0)
        return record

    def _wait_driver_back(self, node: str, selector: str, expected: int,
                          deadline: float, since: float) -> tuple[str, float, float | None]:
        """``("", seconds until slices were complete, seconds until a replacement pod was Ready)``,
        both counted from ``since`` (``time.monotonic()`` as the start was asked for), once the driver
        has stayed up 1 s and the node's slices hold ``expected`` devices; ``(why not, 0, ...)``
        otherwise. The pod time is None where the driver is a process."""
        held = self.cluster.controls_driver
        end = time.monotonic() + deadline
        started = since
        complete_at = ready_at = None
        devices = 0
        while time.monotonic() < end:
            if held and not self.cluster.driver_running(node):
                return (f"the driver on {node} did not come back: its process exited; last log lines:\n"
                        f"{self.cluster.provider.driver_log(node, 5)}"), 0.0, None
            if not held and not self._replacement_ready(node):
                complete_at = None  # the DaemonSet's replacement pod is not Ready yet
                time.sleep(0.2)
                continue
            if not held and ready_at is None:
                ready_at = time.monotonic() - started
            slices = self.cluster.kube.list(rest.RESOURCE_SLICES, field_selector=selector)
            devices = len([d for s in slices for d in s["spec"].get("devices") or []])
            complete_at = (complete_at or time.monotonic()) if devices == expected else None
            # The process must also stay up a moment: a crash loop can leave old slices complete.
            if complete_at is not None and time.monotonic() - started >= 1.0:
                return "", complete_at - started, ready_at
            time.sleep(0.05)
        if not held and not self._replacement_ready(node):
            namespace, name = self.cluster.profile.driver_daemonset
            return (f"the driver on {node} did not come back within {deadline:.0f}s: no Ready replacement pod of "
                    f"DaemonSet {namespace}/{name} on the node"), 0.0, ready_at
        return (f"the driver on {node} did not republish its {expected} devices within {deadline:.0f}s "
                f"(last seen {devices})"), 0.0, ready_at

    # -- nodes --------------------------------------------------------------------------------
    def cordon(self, node: str) -> None:
        """Mark the node unschedulable, with the run's record on it (:mod:`~dra_harness.providers.node_changes`:
        the sweep and the watchdog undo it after a kill), remembering it only if it was schedulable before."""
        self._still_ours()
        if not self._do(node, "cordon"):
            return
        if not node_changes.cordon(self.cluster.kube, node, self.cluster.run_id):
            self.actions[-1] += " (already cordoned: left as found)"
            return
        self.cordoned.add(node)

    def uncordon(self, node: str) -> None:
        """Undo a cordon of ours that is still ours: a node cordoned by someone else, or taken over by an
        operator since (uncordoned, or cordoned again), stays as they left it, and the actions say so."""
        if node not in self.cordoned:
            return
        # Not through _do's label check: undoing our own recorded cordon needs no permission, and that read would
        # fail while the API server is away.
        self.actions.append(f"uncordon {node}")
        log.info("uncordon %s%s", node, " (dry run: nothing done)" if self.dry_run else "")
        if not self.dry_run:
            # Through an API server away or busy for a while (the run's own cordon would keep hurting every team, and
            # the run's later tests, until the end-of-run sweep); past that, the record on the node is the sweep's.
            why = rest.answered(lambda: node_changes.uncordon(self.cluster.kube, node, self.cluster.run_id),
                                AWAY_SECONDS)
            if why:
                self.actions[-1] += f" (not done: {why})"
                log.warning("uncordon %s not done: %s", node, why)
        self.cordoned.discard(node)

    def drain(self, node: str, timeout: float = 60.0, keep: tuple[str, ...] = ()) -> DrainResult:
        """Cordon, then evict the run's pods on the node through the Eviction API (PDBs apply).

        Pods of others stay (``left_alone``): on a shared cluster the harness drains only what it
        put there. Pods owned by a DaemonSet (the driver) and pods named in ``keep`` stay: the
        driver is drained last, by the caller. A pod a PDB protects past ``timeout`` is
        reported in ``blocked`` instead of hanging.
        """
        result = DrainResult(node)
        self.cordon(node)
        if self.dry_run:
            return result
        kube = self.cluster.kube
        started = time.monotonic()
        ours = {n["metadata"]["name"] for n in kube.list(rest.NAMESPACES, label_selector=f"{RUN_LABEL}={self.cluster.run_id}")}
        candidates = [
            p for p in kube.list(rest.PODS, field_selector=f"spec.nodeName={node}")
            if not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
            and p["metadata"]["name"] not in keep
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        # Only the run's own pods are evicted: another team's workload (or a mirror pod, which kubectl drain
        # refuses without --force) stays where it runs; the node is cordoned, so nothing new joins it.
        result.left_alone = sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in candidates
                                   if p["metadata"]["namespace"] not in ours)
        pending = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in candidates if p["metadata"]["namespace"] in ours}
        while pending and time.monotonic() - started < timeout:
            for ns, name in sorted(pending):
                self._still_ours()
                try:
                    kube.request("POST", rest.PODS.path(ns, name, "eviction"), {
                        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
                    })
                except rest.NotFound:
                    pass
                except rest.ApiError as e:
                    if e.status == 429:  # a PodDisruptionBudget says not now
                        result.blocked[f"{ns}/{name}"] = e.message
                        continue
                    raise
                pending.discard((ns, name))
                result.blocked.pop(f"{ns}/{name}", None)
                result.evicted.append(f"{ns}/{name}")
            if pending:
                time.sleep(1)
        result.seconds = time.monotonic() - started
        log.info("drain %s: %d evicted, %d blocked, %d not the run's left alone in %.1fs", node, len(result.evicted),
                 len(result.blocked), len(result.left_alone), result.seconds)
        return result

    @contextmanager
    def restoring(self, *nodes: str, deadline: float = 90.0) -> Iterator[Disruptor]:
        """Undo on the way out what this disruptor did to ``nodes``: uncordon what it cordoned,
        start a driver it stopped (embedded cluster), or wait for the DaemonSet's replacement,
        so the next test finds the node whole."""
        try:
            yield self
        finally:
            if not self.dry_run:
                for node in nodes:
                    self.uncordon(node)
                    if node in self.stopped:
                        self._bring_driver_back(node, deadline)

    def _bring_driver_back(self, node: str, deadline: float) -> None:
        log.info("restoring the driver on %s, stopped by this test", node)
        if self.cluster.controls_driver:
            if not self.cluster.driver_running(node):
                self.cluster.provider.start_driver(node)
        else:
            end = time.monotonic() + deadline
            while not self._replacement_ready(node):
                if time.monotonic() > end:
                    raise RestoreFailed(f"the driver of {node} was not replaced within {deadline:.0f}s: "
                                        "its DaemonSet has no Ready pod there")
                time.sleep(0.2)
        self.stopped.discard(node)


def follow_slices(kube, selector: str, version: str, known: set[str], t0: float, record: RestartRecord,
                  stop: threading.Event) -> None:
    """Append every slice event for ``selector`` to ``record.slice_events`` until ``stop``.

    A watch that falls too far behind gets 410 Gone: then the slices are listed again and what
    changed while the watch was blind is recorded as of the re-list (``record.relists`` counts them),
    so restart timings never come from a truncated event list that looks complete.
    """
    while not stop.is_set():
        try:
            for kind, obj in kube.watch(rest.RESOURCE_SLICES, resource_version=version,
                                        field_selector=selector, timeout_seconds=5):
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if kind != "BOOKMARK":
                    name = obj["metadata"]["name"]
                    record.slice_events.append((round(time.monotonic() - t0, 3), kind, name))
                    (known.discard if kind == "DELETED" else known.add)(name)
                if stop.is_set():
                    return
        except rest.Gone:
            try:
                items, version = kube.list_with_version(rest.RESOURCE_SLICES, field_selector=selector)
            except (rest.ApiError, rest.Unreachable):
                time.sleep(0.2)
                continue
            now, at = {s["metadata"]["name"] for s in items}, round(time.monotonic() - t0, 3)
            record.slice_events += [(at, "DELETED", n) for n in sorted(known - now)] + [(at, "ADDED", n) for n in sorted(now - known)]
            known.clear()
            known.update(now)
            record.relists += 1
        except (rest.ApiError, rest.Unreachable):
            time.sleep(0.2)


def _slice_periods(events: list[tuple[float, str, str]], present_at_start: bool, stopped: float,
                   started: float, end: float) -> tuple[float, float]:
    """(seconds with no slice, seconds slices stayed published while the driver was down)."""
    names: set[str] = {"<initial>"} if present_at_start else set()
    timeline = [(0.0, bool(names))]
    for t, kind, name in events:
        if kind == "DELETED":
            names.discard(name)
            names.discard("<initial>")
        else:
            names.add(name)
        timeline.append((t, bool(names)))
    timeline.append((end, timeline[-1][1]))
    missing = stale = 0.0
    for (t1, present), (t2, _) in pairwise(timeline):
        if not present:
            missing += t2 - t1
        else:
            overlap = min(t2, started) - max(t1, stopped)
            stale += max(0.0, overlap)
    return round(missing, 3), round(stale, 3)

