"""A stream of partition requests over a layout, and what held at each point it settled.

Two phases: ``fill`` asks for more than the layout holds (mixed profiles, tenants in turn);
``churn`` frees a random share of what runs, then asks for large profiles, so the free
slices are scattered holes. Each request is a ResourceClaim in its tenant's namespace (a
quota refuses it at creation) and a pod that uses it. After each phase the stream waits
until it *settles*: every pod is bound or refused by the scheduler, and no refused pod's
profile has a free placement (else the scheduler still owes it a retry). The state seen
there is checked against the layout file: no memory slice held twice, no tenant over
its quota, fragmentation measured. Nothing is released except by the churn step, which
waits until its claims are gone, so every allocation ever made is alive at one settled
point: checking those points checks every allocation.

The settle wait polls (tenacity, one list of pods and one of claims a second) because its
condition spans pods and claims and the layout; it rides out an API server restart and,
after a minute without progress, reports what was still undecided instead of raising.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import Retrying, retry_if_exception_type, wait_fixed

from dra_harness.kube import rest
from dra_harness.kube.pods import condition
from dra_harness.kube.rest import ApiError, Kube, Unreachable
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import watch_until
from dra_harness.partitions.layout import Held, Request, fragmentation, free_placements, overcommits
from dra_harness.partitions.objects import PROFILE_LABEL, TAG_LABEL, PartitionCluster
from dra_harness.retrying import NotYet

log = logging.getLogger(__name__)


@dataclass
class Observed:
    """One look at the stream's pods and claims."""

    held: Held = field(default_factory=dict)  # (node index, device) -> "namespace/claim"
    bound: dict[str, str] = field(default_factory=dict)  # "namespace/pod" -> node
    waiting: list[Request] = field(default_factory=list)  # refused by the scheduler
    undecided: list[str] = field(default_factory=list)
    waiting_while_free: list[str] = field(default_factory=list)
    claims: Counter = field(default_factory=Counter)  # (tenant, profile) -> claims that exist
    allocated: Counter = field(default_factory=Counter)


def run(kube: Kube, pc: PartitionCluster, say: Callable[[str], None] = log.info, stall_s: float = 60.0) -> dict[str, Any]:
    """Both phases; returns the figures and every violation found (the caller's checks assert on them)."""
    layout = pc.layout
    live: dict[str, Request] = {}  # "namespace/name" -> its request, for every claim that exists
    result: dict[str, Any] = {
        "layout": layout.name, "nodes": layout.nodes, "gpus": layout.nodes * layout.gpus_per_node,
        "partition_devices": len(layout.partitions()), "memory_slices": layout.total_slices,
        "faults": list(pc.faults), "phases": [],
    }
    fill = layout.requests("fill")
    result["phases"].append(_phase(kube, pc, "fill", fill, live, stall_s, say))
    if layout.churn:
        share, _, _ = layout.churn
        released = _release(kube, pc, live, share, stall_s)
        churn = layout.requests("churn", first=len(fill))
        phase = _phase(kube, pc, "churn", churn, live, stall_s, say)
        phase["released"] = released
        result["phases"].append(phase)
    # Distinct claims seen allocated at any settled point (a pod bound in fill and alive after churn counts once).
    result["allocations_checked"] = len({c for p in result["phases"] for c in p.pop("allocated_claims")})
    result["quota_refusals"] = sum(p["refused_by_quota"] for p in result["phases"])
    return result


def _phase(kube: Kube, pc: PartitionCluster, name: str, requests: list[Request], live: dict[str, Request],
           stall_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    started = time.monotonic()
    refused: Counter = Counter()
    for i, r in enumerate(requests):
        if i and i % 500 == 0:
            say(f"partitions {name}: {i} of {len(requests)} requests sent")
        ns, pod = pc.namespace(r.tenant), f"req-{r.index}"
        try:
            kube.create(rest.RESOURCE_CLAIMS, pc.claim(pod, r.profile), ns)
        except ApiError as e:
            if e.status == 403 and "exceeded quota" in e.message:
                refused[r.tenant] += 1
                continue
            raise
        live[f"{ns}/{pod}"] = r
        kube.create(rest.PODS, pc.pod(pod, r.profile), ns)
    submitted = time.monotonic() - started
    say(f"partitions {name}: {len(requests)} requests sent in {submitted:.1f}s ({sum(refused.values())} refused by quota)")
    seen, settled = _settle(kube, pc, live, stall_s)
    wall = time.monotonic() - started
    say(f"partitions {name}: settled={settled} after {wall:.1f}s: {len(seen.bound)} bound, {len(seen.waiting)} waiting")
    layout = pc.layout
    tenants = {t: {"claims": {p: seen.claims[t, p] for p in layout.profiles if seen.claims[t, p]},
                   "allocated": {p: seen.allocated[t, p] for p in layout.profiles if seen.allocated[t, p]},
                   "quota": layout.quotas[t], "refused_by_quota": refused[t]} for t in layout.tenants}
    return {
        "phase": name, "requests": len(requests), "refused_by_quota": sum(refused.values()),
        "scheduled": len(seen.bound), "waiting": len(seen.waiting), "settled": settled,
        "submit_s": round(submitted, 3), "wall_s": round(wall, 3),
        "pods_per_s": round(len(seen.bound) / wall, 2) if wall else None,
        "waiting_by_profile": dict(Counter(r.profile for r in seen.waiting)),
        "undecided": seen.undecided[:10], "waiting_while_free": seen.waiting_while_free[:10],
        "overcommits": overcommits(layout, seen.held)[:20],
        "quota_violations": quota_violations(layout.quotas, seen.claims),
        "fragmentation": fragmentation(layout, seen.held, seen.waiting),
        "tenants": tenants,
        "allocated_claims": sorted(set(seen.held.values())),
    }


def quota_violations(quotas: dict[str, dict[str, int]], claims: Counter) -> list[str]:
    """Tenants holding more claims of a profile than the layout's quota allows."""
    return [f"tenant {t} holds {claims[t, p]} claims of {p}, its quota is {n}"
            for t, quota in sorted(quotas.items()) for p, n in sorted(quota.items()) if claims[t, p] > n]


def observe(kube: Kube, pc: PartitionCluster, live: dict[str, Request]) -> Observed:
    seen = Observed()
    tenant_of = {pc.namespace(t): t for t in pc.layout.tenants}
    sel = f"{TAG_LABEL}={pc.tag}"
    for claim in kube.list(rest.RESOURCE_CLAIMS, label_selector=sel):
        meta = claim["metadata"]
        key, profile = f"{meta['namespace']}/{meta['name']}", meta["labels"][PROFILE_LABEL]
        tenant = tenant_of[meta["namespace"]]
        seen.claims[tenant, profile] += 1
        for res in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            node = pc.node_index(res["pool"])
            seen.held[(-1 if node is None else node, res["device"])] = key
            seen.allocated[tenant, profile] += 1
    holders = set(seen.held.values())
    free: dict[str, list] = {}  # profile -> its free placements, computed once a look
    for pod in kube.list(rest.PODS, label_selector=sel):
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        request = live.get(key)
        if request is None:
            continue  # released, not yet gone
        scheduled = condition(pod, "PodScheduled") or {}
        if pod["spec"].get("nodeName") and key in holders:
            seen.bound[key] = pod["spec"]["nodeName"]
        elif scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            seen.waiting.append(request)
            if request.profile not in free:
                free[request.profile] = free_placements(pc.layout, seen.held, request.profile)
            if places := free[request.profile]:
                p = places[0]
                seen.waiting_while_free.append(f"{key} ({request.profile}) refused while {pc.nodes[p.node]} "
                                               f"{p.name} and {len(places) - 1} more placements are free")
        else:
            seen.undecided.append(key)
    return seen


def _settle(kube: Kube, pc: PartitionCluster, live: dict[str, Request], stall_s: float) -> tuple[Observed, bool]:
    """Wait until settled; give up only after ``stall_s`` without a pod newly bound or refused (a large
    layout keeps the scheduler busy for minutes, and that is progress, not a hang)."""
    last = Observed()
    window = {"deadline": time.monotonic() + stall_s, "decided": -1}

    def attempt() -> None:
        nonlocal last
        last = observe(kube, pc, live)
        decided = len(last.bound) + len(last.waiting)
        if decided > window["decided"]:
            window.update(decided=decided, deadline=time.monotonic() + stall_s)
        if last.undecided:
            raise NotYet(f"{len(last.undecided)} pods neither bound nor refused, e.g. {last.undecided[0]}")
        if last.waiting_while_free:
            raise NotYet(f"{len(last.waiting_while_free)} refused while a placement is free: {last.waiting_while_free[0]}")

    try:
        for tried in Retrying(stop=lambda _: time.monotonic() >= window["deadline"], wait=wait_fixed(1.0),
                              retry=retry_if_exception_type((NotYet, Unreachable)), reraise=True):
            with tried:
                attempt()
    except NotYet as e:
        log.info("the partition stream did not settle: %s", e)
        return last, False
    return last, True


def _release(kube: Kube, pc: PartitionCluster, live: dict[str, Request], share: float, timeout: float) -> int:
    """Delete a random ``share`` of the bound pods and their claims; wait until the claims and the quotas' use show it."""
    bound = sorted(observe(kube, pc, live).bound)
    victims = random.Random(f"{pc.layout.seed}-release").sample(bound, round(share * len(bound)))
    for key in victims:
        ns, name = key.split("/")
        kube.delete(rest.PODS, name, ns, grace_seconds=0)
        kube.delete(rest.RESOURCE_CLAIMS, name, ns)
        live.pop(key)
    gone = set(victims)
    timeout += 0.2 * len(victims)  # the claim controller deallocates them one by one
    watch_until(kube, rest.RESOURCE_CLAIMS, lambda items: not gone & {_key(c) for c in items},
                timeout, f"{len(gone)} released claims to be deallocated and deleted",
                label_selector=f"{TAG_LABEL}={pc.tag}",
                why=lambda items: f"{len(gone & {_key(c) for c in items})} still there")
    want = Counter((pc.namespace(r.tenant), pc.class_name(r.profile)) for r in live.values())

    def quotas_caught_up(items: list[Obj]) -> bool:
        for q in items:
            for key, used in (q.get("status") or {}).get("used", {}).items():
                cls = key.split(".deviceclass.")[0]
                if int(used) != want[q["metadata"]["namespace"], cls]:
                    return False
        return True
    # The quota controller recounts after a delete; until then a new claim would be refused for claims already gone.
    watch_until(kube, rest.RESOURCE_QUOTAS, quotas_caught_up, timeout, "the tenants' quotas to count the released claims out",
                label_selector=f"{TAG_LABEL}={pc.tag}")
    return len(victims)


def _key(obj: Obj) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
