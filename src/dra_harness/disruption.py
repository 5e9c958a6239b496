"""Disruptive provider actions: restart a node's driver, cordon, drain and uncordon.

Safety first: an action touches a node only if the node carries
``dra-harness.io/disruptable=true`` and, on a cluster the harness did not create, only
with ``--allow-disruptive``. With ``dry_run`` every action is recorded and nothing is
done. :meth:`Disruptor.restoring` puts each touched node back (uncordoned, driver
running) however the test ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise

from .cluster_handle import ClusterHandle
from .kube import rest
from .labels import DISRUPTABLE_LABEL


@dataclass
class RestartRecord:
    """What one driver restart looked like from the API server, in seconds."""

    node: str
    kill: bool
    down_for: float
    back_after: float | None = None  # from start until the node's slices are complete again, driver running
    missing_for: float = 0.0  # time the node had no slice of the driver
    stale_for: float = 0.0  # time slices stayed published while no driver ran
    slice_events: list[tuple[float, str, str]] = field(default_factory=list)
    failure: str = ""


class DisruptionRefused(RuntimeError):
    """The action is not allowed on this node or cluster; nothing was touched."""


@dataclass
class DrainResult:
    node: str
    evicted: list[str] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)  # pod -> why (e.g. a PDB)
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

    def check(self, node: str) -> None:
        if self.cluster.provider != "local" and not self.allowed:
            raise DisruptionRefused(f"refusing to disrupt {node}: pass --allow-disruptive to touch an existing cluster")
        labels = self.cluster.kube.get(rest.NODES, node)["metadata"].get("labels", {})
        if labels.get(DISRUPTABLE_LABEL) != "true":
            raise DisruptionRefused(f"refusing to disrupt {node}: it is not labelled {DISRUPTABLE_LABEL}=true")

    def _do(self, node: str, action: str) -> bool:
        """Record the action; True when it should really be carried out."""
        self.check(node)
        self.actions.append(f"{action} {node}")
        return not self.dry_run

    # -- driver -----------------------------------------------------------------------------
    def stop_driver(self, node: str, kill: bool = False) -> None:
        """Embedded cluster: stop the plugin process. Elsewhere: delete the driver's pod on
        the node (grace period 0 for ``kill``); its DaemonSet starts a replacement."""
        if not self._do(node, "kill driver on" if kill else "stop driver on"):
            return
        if self.cluster.local is not None:
            self.cluster.local.stop_driver(node, kill=kill)
            return
        pods = self._driver_pods(node)
        if not pods:
            raise DisruptionRefused(f"no pod matching '{self.cluster.profile.driver_pod_selector}' runs on {node}")
        for pod in pods:
            self.cluster.kube.delete(rest.PODS, pod["metadata"]["name"], pod["metadata"]["namespace"],
                                     grace_seconds=0 if kill else None)

    def start_driver(self, node: str) -> None:
        """Embedded cluster: start the plugin process. Elsewhere the DaemonSet does it."""
        if self._do(node, "start driver on") and self.cluster.local is not None:
            self.cluster.local.start_driver(node)

    def _driver_pods(self, node: str) -> list[dict]:
        selector = self.cluster.profile.driver_pod_selector
        if not selector:
            raise DisruptionRefused(f"profile {self.cluster.profile.name} names no driver pod selector")
        return self.cluster.kube.list(rest.PODS, label_selector=selector, field_selector=f"spec.nodeName={node}")

    def target_node(self) -> str:
        """The first node that may be disrupted and publishes devices of the profile's driver
        (one running real containers when there is one)."""
        published = {v["node"] for v in self.cluster.published().values()}
        labelled = self.cluster.kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true")
        # Nodes that run real containers first: what happens to running containers is the question.
        real = set(self.cluster.container_nodes())
        nodes = sorted((n["metadata"]["name"] for n in labelled if n["metadata"]["name"] in published),
                       key=lambda name: (name not in real, name))
        if not nodes:
            raise DisruptionRefused(f"no node labelled {DISRUPTABLE_LABEL}=true publishes devices of {self.cluster.driver}")
        return nodes[0]

    def restart_driver(self, node: str, kill: bool = False, down_for: float = 2.0, deadline: float = 60.0,
                       while_down=None) -> RestartRecord:
        """Stop the node's driver, keep it down ``down_for`` s, start it, and time its return.

        ``while_down`` (a callable) runs while the driver is stopped. Slice events for
        the node are watched throughout, so missing and stale periods are measured, not assumed.
        """
        record = RestartRecord(node, kill, down_for)
        kube = self.cluster.kube
        selector = f"spec.driver={self.cluster.driver},spec.nodeName={node}"
        items, rv = kube.list_with_version(rest.RESOURCE_SLICES, field_selector=selector)
        expected = len([d for s in items for d in s["spec"].get("devices") or []])
        t0 = time.monotonic()
        stop_watch = threading.Event()

        def follow() -> None:
            version = rv
            while not stop_watch.is_set():
                try:
                    for kind, obj in kube.watch(rest.RESOURCE_SLICES, resource_version=version,
                                                field_selector=selector, timeout_seconds=5):
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if kind != "BOOKMARK":
                            record.slice_events.append((round(time.monotonic() - t0, 3), kind, obj["metadata"]["name"]))
                        if stop_watch.is_set():
                            return
                except (rest.ApiError, rest.Unreachable):
                    time.sleep(0.2)

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
        try:
            self.stop_driver(node, kill=kill)
            stopped = time.monotonic() - t0
            if while_down is not None:
                while_down()
            time.sleep(max(0.0, down_for - (time.monotonic() - t0 - stopped)))
            self.start_driver(node)
            started = time.monotonic() - t0
            record.failure, republished_after = self._wait_driver_back(node, selector, expected, deadline)
            if not record.failure:
                record.back_after = round(republished_after, 3)
        finally:
            time.sleep(0.3)  # let the watch deliver the last events
            stop_watch.set()
            watcher.join(timeout=10)
        record.missing_for, record.stale_for = _slice_periods(record.slice_events, bool(items), stopped, started,
                                                              time.monotonic() - t0)
        return record

    def _wait_driver_back(self, node: str, selector: str, expected: int, deadline: float) -> tuple[str, float]:
        """``("", seconds until slices were complete)`` once the driver has stayed up 1 s and the
        node's slices hold ``expected`` devices; ``(why not, 0)`` otherwise."""
        local = self.cluster.local
        end = time.monotonic() + deadline
        started = time.monotonic()
        complete_at = None
        devices = 0
        while time.monotonic() < end:
            if not self.cluster.driver_running(node):
                if local is not None:
                    return (f"the driver on {node} did not come back: its process exited; last log lines:\n"
                            f"{local.supervisor.log_tail(f'driver-{node}', 5)}"), 0.0
                complete_at = None  # the DaemonSet's replacement pod is not Ready yet
                time.sleep(0.2)
                continue
            slices = self.cluster.kube.list(rest.RESOURCE_SLICES, field_selector=selector)
            devices = len([d for s in slices for d in s["spec"].get("devices") or []])
            complete_at = (complete_at or time.monotonic()) if devices == expected else None
            # The process must also stay up a moment: a crash loop can leave old slices complete.
            if complete_at is not None and time.monotonic() - started >= 1.0:
                return "", complete_at - started
            time.sleep(0.05)
        if not self.cluster.driver_running(node):
            return f"the driver on {node} did not come back within {deadline:.0f}s: no Ready plugin pod on the node", 0.0
        return f"the driver on {node} did not republish its {expected} devices within {deadline:.0f}s (last seen {devices})", 0.0

    # -- nodes --------------------------------------------------------------------------------
    def cordon(self, node: str, unschedulable: bool = True) -> None:
        if self._do(node, "cordon" if unschedulable else "uncordon"):
            self.cluster.kube.patch(rest.NODES, node, {"spec": {"unschedulable": unschedulable}})

    def uncordon(self, node: str) -> None:
        self.cordon(node, unschedulable=False)

    def drain(self, node: str, timeout: float = 60.0, keep: tuple[str, ...] = ()) -> DrainResult:
        """Cordon, then evict every pod on the node through the Eviction API (PDBs apply).

        Pods owned by a DaemonSet (the driver) and pods named in ``keep`` stay: the
        driver is drained last, by the caller. A pod a PDB protects past ``timeout`` is
        reported in ``blocked`` instead of hanging.
        """
        result = DrainResult(node)
        self.cordon(node)
        if self.dry_run:
            return result
        kube = self.cluster.kube
        started = time.monotonic()
        pending = {
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in kube.list(rest.PODS, field_selector=f"spec.nodeName={node}")
            if not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
            and p["metadata"]["name"] not in keep
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        }
        while pending and time.monotonic() - started < timeout:
            for ns, name in sorted(pending):
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
        return result

    @contextmanager
    def restoring(self, *nodes: str) -> Iterator["Disruptor"]:
        """Undo disruptions of ``nodes`` on the way out: uncordon, and start a stopped driver
        (on other clusters the DaemonSet restarts it by itself)."""
        try:
            yield self
        finally:
            if not self.dry_run:
                for node in nodes:
                    self.uncordon(node)
                    if self.cluster.local is not None and not self.cluster.driver_running(node):
                        self.cluster.local.start_driver(node)


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

