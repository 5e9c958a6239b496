"""Pods and their claims: waits that explain themselves, and reading allocations.

When a pod does not start, the reason is in its PodScheduled condition (written by
kube-scheduler) or in events (claim creation by kube-controller-manager). A timeout
here always quotes both, so a failed test says *why* the pod is still Pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dra_harness.kube import podstates, refusals, rest
from dra_harness.kube.placement import blocking_taints
from dra_harness.kube.events import warnings
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj, Pod, PodCondition, ResourceClaim
from dra_harness.kube.waits import WaitBlocked, WaitError, wait_for_object, watch_until


def condition(obj: Pod | Obj, kind: str) -> PodCondition | Obj | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == kind), None)


def pod_ready(pod: Pod | Obj) -> bool:
    """Running, Ready and not being deleted."""
    return (pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and (condition(pod, "Ready") or {}).get("status") == "True")


def node_ready(node: Obj) -> bool:
    """The node's Ready condition is True (KWOK sets it on the nodes it manages)."""
    return (condition(node, "Ready") or {}).get("status") == "True"


def node_schedulable(node: Obj) -> bool:
    """Ready, and the node controller has lifted the ``node.kubernetes.io/*`` taints it puts on a new node
    (not-ready and the like): until then the scheduler refuses the node for that taint, whatever else."""
    return node_ready(node) and not any(t.get("key", "").startswith("node.kubernetes.io/")
                                        for t in node.get("spec", {}).get("taints") or [])


def only_conditions_block(node: Obj) -> bool:
    """Not Ready, or refused only for the node controller's condition taints (``node.kubernetes.io/*``),
    and not cordoned: a state the node leaves by itself (a kubelet that missed a status report under
    load), unlike a cordon or an owner's taint, which stay until someone lifts them."""
    if node.get("spec", {}).get("unschedulable"):
        return False
    blocking = [t.get("key", "") for t in blocking_taints(node)]
    return bool(blocking or not node_ready(node)) and all(k.startswith("node.kubernetes.io/") for k in blocking)


def wait_nodes_ready(kube: Kube, names: set[str], label_selector: str | None, timeout: float, what: str) -> None:
    """Until every node of ``names`` (among those ``label_selector`` selects) is Ready and schedulable."""
    watch_until(kube, rest.NODES, lambda items: names <= {n["metadata"]["name"] for n in items if node_schedulable(n)},
                timeout, f"{len(names)} {what} Ready", label_selector=label_selector,
                why=lambda items: f"{sum(node_ready(n) for n in items)} of {len(names)} Ready, "
                                  f"{sum(node_schedulable(n) for n in items)} without the node controller's taints")


def scheduling_message(pod: Pod | Obj | None) -> str:
    """The scheduler's verdict on a pod, e.g. ``0/4 nodes are available: ...``."""
    if pod is None:
        return "pod does not exist"
    cond = condition(pod, "PodScheduled")
    if cond is None:
        return f"phase {pod.get('status', {}).get('phase', '?')}, not yet seen by the scheduler"
    if cond.get("status") == "True":
        return f"scheduled to {pod['spec'].get('nodeName')}, phase {pod['status'].get('phase')}"
    return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")


def pending_reason(kube: Kube, namespace: str, name: str):
    def why(pod: Obj | None) -> str:
        said = warnings(kube, namespace, name)
        text = f"last state: {scheduling_message(pod)}"
        if said:
            text += f"; warnings: {' | '.join(said)}"
        return text

    return why


def placement(pod: Obj) -> str:
    """``running``, ``unschedulable`` (the scheduler said so) or ``pending``: where a pod stands in a wait for both."""
    if pod.get("status", {}).get("phase") == "Running":
        return "running"
    if (condition(pod, "PodScheduled") or {}).get("reason") == "Unschedulable":
        return "unschedulable"
    return "pending"


def wait_running(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> Obj:
    return wait_for_object(
        kube,
        rest.PODS,
        name,
        lambda p: p.get("status", {}).get("phase") == "Running",
        timeout,
        f"pod {namespace}/{name} to be Running",
        namespace=namespace,
        fail=lambda p: "pod failed" if p.get("status", {}).get("phase") == "Failed" else podstates.product_failure(p),
        why=pending_reason(kube, namespace, name),
    )


def wait_unschedulable(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> Obj:
    """Wait until the scheduler has marked the pod Unschedulable; fail if it is scheduled."""

    def unschedulable(p: Obj) -> bool:
        cond = condition(p, "PodScheduled")
        return bool(cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable")

    what = f"pod {namespace}/{name} to be reported Unschedulable"
    pod = wait_for_object(
        kube,
        rest.PODS,
        name,
        unschedulable,
        timeout,
        what,
        namespace=namespace,
        fail=lambda p: f"it was scheduled to {p['spec']['nodeName']}" if p["spec"].get("nodeName") else None,
        why=pending_reason(kube, namespace, name),
    )
    # Unschedulable for the cluster's reason (a taint, a cordon, a selector on every node with devices): the reason a
    # check reads is the environment's, not DRA's, so what it would judge is not there to judge.
    refused = refusals.environment_refusal(pod, kube.list(rest.NODES), kube.list(rest.RESOURCE_SLICES),
                                           kube.device_drivers, kube.cordoned_before)
    if refused is not None:
        raise WaitBlocked(what, f"the cluster keeps pod {namespace}/{name} off every node that could take it: "
                                f"{refused.reason}", pod)
    return pod


def claim_names(pod: Pod | Obj) -> dict[str, str]:
    """Pod-level claim name -> ResourceClaim name, as the pod's status records it."""
    out = {c["name"]: c["resourceClaimName"] for c in pod["spec"].get("resourceClaims") or [] if c.get("resourceClaimName")}
    for status in pod.get("status", {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName"):
            out[status["name"]] = status["resourceClaimName"]
    return out


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    device: str
    request: str = ""

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


def allocated_devices(claim: ResourceClaim | Obj) -> list[Device]:
    allocation = claim.get("status", {}).get("allocation") or {}
    return [
        Device(r["driver"], r["pool"], r["device"], r.get("request", ""))
        for r in allocation.get("devices", {}).get("results") or []
    ]


def allocated_node(claim: ResourceClaim | Obj) -> str | None:
    """The node a node-local allocation is pinned to (from ``allocation.nodeSelector``)."""
    selector = (claim.get("status", {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return None


def reserved_for(claim: ResourceClaim | Obj) -> list[str]:
    return [r["name"] for r in claim.get("status", {}).get("reservedFor") or []]


def pod_claims(kube: Kube, pod: Pod | Obj) -> dict[str, Obj]:
    """Pod-level claim name -> the ResourceClaim object."""
    ns = pod["metadata"]["namespace"]
    return {name: kube.get(rest.RESOURCE_CLAIMS, claim, ns) for name, claim in claim_names(pod).items()}


def wait_evicted(kube: Kube, namespace: str, name: str, timeout: float,
                 cause: Callable[[], object] | None = None) -> tuple[float | None, Obj | None]:
    """Seconds until pod ``name`` is deleted, and the DisruptionTarget condition it carried (who evicted it, why);
    at the timeout, None and whatever condition was seen. ``cause`` (what evicts it) runs once the watch is in
    place, and the time counts from it: a pod a KWOK node removes at once would otherwise be gone, with its
    condition, before the wait saw it."""
    seen: dict[str, Obj] = {}
    started = time.monotonic()

    def gone(pods: list[Obj]) -> bool:
        for p in pods:
            if cond := condition(p, "DisruptionTarget"):
                seen["condition"] = dict(cond)
        return not pods

    def act() -> None:
        nonlocal started  # the time counts from the cause, once the watch is in place
        started = time.monotonic()
        if cause is not None:
            cause()

    try:
        watch_until(kube, rest.PODS, gone, timeout, f"pod {namespace}/{name} to be evicted",
                    namespace=namespace, field_selector=f"metadata.name={name}", then=act)
    except WaitError:
        return None, seen.get("condition")
    return time.monotonic() - started, seen.get("condition")
