"""A scheduling refusal that is the cluster's rules, not DRA's: read from what the scheduler said.

Why: on a managed GPU offering every GPU node carries the provider's taint
(``nvidia.com/gpu=present:NoSchedule``); a check's pod that does not tolerate it waits out its
whole deadline and, judged as a timeout, FAILs the product for the cluster's rules (11 false
FAILs in one run). kube-scheduler says why on the pod (``0/5 nodes are available: 4 node(s) had
untolerated taint {nvidia.com/gpu: present}, 1 cannot allocate all claims``): each node is counted
under the first filter that refused it. A refusal is the *environment's* when every node that
could take the pod was refused for a reason of the environment (a taint, a cordon, a node selector
or affinity, cpu/memory/pods, volumes, ports, pod affinity or spread) and what DRA refused can be
put down to nodes that publish no device of the driver (a system pool). DRA's own reasons (no
device matches, cannot allocate all claims, device taints, binding conditions) stay the check's.

Taints, cordons and selectors are also judged here against the nodes themselves
(:mod:`.placement`), which names the taint and the option that would let the pod through.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from dra_harness.kube.placement import SELECTOR_MISMATCH, keeps_off
from dra_harness.kube.types import Obj
from dra_harness.labels import CORDONED_BY_ANNOTATION

#: ``0/5 nodes are available: 1 X, 4 Y. preemption: ...``: the counted part, before the preemption's own.
_AVAILABLE = re.compile(r"\d+/(\d+) nodes are available: (.*?)(?:\.\s+(?:still not schedulable, )?preemption:|\.?\s*$)",
                        re.S)
#: One ``K reason``; a reason may hold ``{key: value}`` and commas only inside those braces.
_COUNTED = re.compile(r"(\d+) ((?:[^,{]|\{[^}]*\})+)")

#: Reasons of kube-scheduler's filters that are the cluster's rules or its other workloads, never DRA's.
ENVIRONMENT = tuple(re.compile(p) for p in (
    r"untolerated taint",
    r"didn't match Pod's node affinity",
    r"didn't match the requested node name",
    r"were unschedulable",
    r"^Insufficient (cpu|memory|pods|ephemeral-storage|hugepages-\S+)$",
    r"^Too many pods$",
    r"didn't have free ports",
    r"volume|PersistentVolume",
    r"didn't match pod (anti-)?affinity rules|didn't satisfy existing pods anti-affinity|pod topology spread",
))
#: Said without counts when a pod's volumes cannot bind at all.
_WHOLE = re.compile(r"pod has unbound immediate PersistentVolumeClaims")

#: Refusals that lift by themselves or that a run makes itself (the node controller's condition taints, a cordon,
#: the harness's own taints): a wait is not ended for them at once, only judged by them when it runs out.
_PASSING = re.compile(r"^cordoned$|^untolerated taint (node\.kubernetes\.io/|dra-harness\.io/)")


@dataclass(frozen=True)
class Refusal:
    """Why no node that could take a pod may: one line, whether it may pass by itself, what option would help."""

    reason: str
    passing: bool = False
    option: str | None = None
    #: ``untolerated-taint``, ``node-selector-mismatch``, ``cordoned`` (judged on the nodes) or ``environment``.
    cause: str = "environment"


def counted(message: str) -> list[tuple[int, str]]:
    """``(nodes, reason)`` of the scheduler's ``0/N nodes are available: ...`` message; [] for any other."""
    m = _AVAILABLE.search(message or "")
    if not m:
        return []
    return [(int(k), reason.strip()) for k, reason in _COUNTED.findall(m.group(2))]


def environmental(reason: str) -> bool:
    return any(p.search(reason) for p in ENVIRONMENT)


def device_nodes(nodes: list[Obj], slices: list[Obj], drivers: frozenset[str]) -> set[str] | None:
    """Nodes that publish devices of ``drivers`` (any driver when empty); None when a slice serves nodes by selector
    or all nodes (network-attached devices: any node may be one)."""
    names: set[str] = set()
    for s in slices:
        spec = s.get("spec") or {}
        if drivers and spec.get("driver") not in drivers:
            continue
        if not spec.get("devices"):
            continue
        if spec.get("nodeName"):
            names.add(spec["nodeName"])
        elif spec.get("allNodes") or spec.get("nodeSelector"):
            return None
    return names


def unschedulable_message(pod: Obj) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c.get("message") or ""
    return None


def environment_refusal(pod: Obj, nodes: list[Obj], slices: list[Obj], drivers: frozenset[str] = frozenset(),
                        cordoned_before: frozenset[str] = frozenset()) -> Refusal | None:
    """The environment's refusal of an unschedulable ``pod`` (see the module's docstring), or None when DRA (or a
    reason not known here) refused it on a node that could take it, or the scheduler has not refused it.
    ``drivers``: whose devices the pod is taken to want; a pod that selects none of their nodes may want another's
    (the run's own simulated drivers), so it is judged again against every driver's nodes. ``cordoned_before``: nodes
    cordoned before the run began (:data:`MAINTENANCE`, not a cordon that passes)."""
    refused = _judged(pod, nodes, slices, drivers, cordoned_before)
    if drivers and refused is not None and refused.cause == "node-selector-mismatch":
        return _judged(pod, nodes, slices, frozenset(), cordoned_before)
    return refused


def _judged(pod: Obj, nodes: list[Obj], slices: list[Obj], drivers: frozenset[str], cordoned_before: frozenset[str]
            ) -> Refusal | None:
    message = unschedulable_message(pod)
    if message is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    counts = counted(message)
    if not counts:
        return Refusal(f"the scheduler says: {message[:300]}") if _WHOLE.search(message) else None
    spec = pod.get("spec") or {}
    kept = {n["metadata"]["name"]: _settled(n, keeps_off(spec, n), cordoned_before) for n in nodes}
    devices = device_nodes(nodes, slices, drivers)
    landable = {name for name, why in kept.items() if why is None}
    without_devices = landable - devices if devices is not None else set()
    others = sum(k for k, reason in counts if not environmental(reason))
    if others > len(without_devices):
        return None  # a node that could take the pod was refused by DRA, or for a reason not known here
    said = ", ".join(f"{k} {reason}" for k, reason in counts if environmental(reason))
    candidates = set(kept) if devices is None else devices & set(kept)
    blocked = {name: why for name, why in kept.items() if why and name in candidates}
    if candidates and len(blocked) == len(candidates):
        if all(why == SELECTOR_MISMATCH for why in blocked.values()):
            # The pod selects only nodes without devices now: one it may land on is DRA's to judge (its driver
            # publishes nothing there: a kubelet restarted wipes its node's slices, a stale slice leaves pods
            # Pending); one kept off by a taint or cordon is judged by that; none at all is a selector for good.
            selected = {name: why for name, why in kept.items() if name not in candidates and why != SELECTOR_MISMATCH}
            if any(why is None for why in selected.values()):
                return None
            if selected:
                return _kept_off({n: str(w) for n, w in selected.items()}, said)
        return _kept_off(blocked, said)
    if all(_NODE_JUDGED.search(r) for _, r in counts if environmental(r)):
        return None  # the scheduler's reasons are all judged on nodes, which now let the pod on one: it will retry
    return Refusal(f"no node that could take the pod may: {said}")


#: What a cordon in place before the run began, and not a harness run's, is: maintenance, which does not lift within
#: a check's wait (a cordon that appears during the run may be a drain that gives its node back).
MAINTENANCE = "cordoned for maintenance"


def _settled(node: Obj, why: str | None, before: frozenset[str]) -> str | None:
    """``why`` (a node's :func:`keeps_off`), a cordon made :data:`MAINTENANCE` where the node was cordoned before the
    run began (``before``) and no run of the harness recorded the cordon."""
    if why == "cordoned" and node["metadata"]["name"] in before \
            and CORDONED_BY_ANNOTATION not in (node["metadata"].get("annotations") or {}):
        return MAINTENANCE
    return why


#: Environment reasons :func:`.placement.keeps_off` judges on the node itself.
_NODE_JUDGED = re.compile(r"untolerated taint|were unschedulable|node affinity|requested node name")


def _kept_off(blocked: dict[str, str], said: str) -> Refusal:
    """Every device node keeps the pod off for a reason judged on the node: name it, and the option for a taint.
    The nodes the pod selects are what matter (a pod pinned to one node is not kept off by the others' labels):
    a taint or cordon there is the reason, and where one of them passes by itself, so may the refusal."""
    selected = {n: why for n, why in blocked.items() if why != SELECTOR_MISMATCH}
    reasons = selected or blocked
    why, count = Counter(reasons.values()).most_common(1)[0]
    whole = count == len(reasons)
    where = "nodes with devices" + (" the pod selects" if selected and len(selected) < len(blocked) else "")
    reason = (f"{why} on {'all ' if whole else ''}{count} of the {len(reasons)} {where}"
              f"{'' if whole else ' (the others: ' + ', '.join(sorted(set(reasons.values()) - {why})) + ')'}; "
              f"the scheduler says: {said}")
    option = None
    if whole and why.startswith("untolerated taint "):
        taint = why.removeprefix("untolerated taint ")
        key, _, effect = taint.rpartition(":")
        option = f"--toleration {key.partition('=')[0]}:{effect}"
        reason += f" (pass {option})"
    passing = any(_PASSING.search(w) for w in reasons.values())
    cause = ("untolerated-taint" if why.startswith("untolerated taint") else "cordoned" if why.startswith("cordoned")
             else "node-selector-mismatch")
    return Refusal(reason, passing=passing, option=option, cause=cause)
