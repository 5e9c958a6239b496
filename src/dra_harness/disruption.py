"""Disruptive provider actions: restart a node's driver, cordon, drain and uncordon.

Safety first: an action touches a node only if the node carries
``dra-harness.io/disruptable=true`` and, on a cluster the harness did not create, only
with ``--allow-disruptive``. With ``dry_run`` every action is recorded and nothing is
done. :meth:`Disruptor.restoring` puts each touched node back (uncordoned, driver
running) however the test ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .cluster_handle import ClusterHandle
from .kube import rest
from .labels import DISRUPTABLE_LABEL


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
        if self._do(node, "kill driver on" if kill else "stop driver on"):
            self._local("stopping a driver process").stop_driver(node, kill=kill)

    def start_driver(self, node: str) -> None:
        if self._do(node, "start driver on"):
            self._local("starting a driver process").start_driver(node)

    def _local(self, what: str):
        if self.cluster.local is None:
            raise DisruptionRefused(f"{what} needs the embedded cluster; on other clusters the driver runs as a DaemonSet")
        return self.cluster.local

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
        """Undo disruptions of ``nodes`` on the way out: uncordon, and start a stopped driver."""
        try:
            yield self
        finally:
            if not self.dry_run:
                for node in nodes:
                    self.cluster.kube.patch(rest.NODES, node, {"spec": {"unschedulable": False}})
                    local = self.cluster.local
                    if local is not None and not _driver_running(local, node):
                        local.start_driver(node)


def _driver_running(local, node: str) -> bool:
    tracked = local.supervisor.get(f"driver-{node}")
    return tracked is not None and tracked.alive()
