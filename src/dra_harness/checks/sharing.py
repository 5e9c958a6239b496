"""Sharing audits over all claims in a cluster: who holds which device, and with whom.

Sharing a device is not isolation. These audits read every ResourceClaim at once and
report (a) devices held by more than one claim, which must never happen for devices
that do not allow multiple allocations, and (b) claims reserved for pods of different
tenants, a tenant boundary crossed by design or by mistake. Pure logic over dicts.

A tenant audit can only judge claims reserved for pods that exist; an audit over none of
them found nothing because it looked at nothing, and says so (:data:`NOTHING_AUDITED`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from dra_harness.kube.pods import allocated_devices
from dra_harness.kube.types import Obj, Pod, ResourceClaim


@dataclass(frozen=True)
class SharingFinding:
    kind: str
    message: str


def _name(obj: ResourceClaim | Pod | Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def double_allocations(claims: Sequence[ResourceClaim | Obj], shareable: AbstractSet[tuple[str, str, str]] = frozenset()) -> list[SharingFinding]:
    """Devices that two different claims hold (admin-access results and shareable devices excepted)."""
    holders: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for claim in claims:
        results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
        admin = {r["device"] for r in results if r.get("adminAccess")}
        for dev in allocated_devices(claim):
            if dev.device not in admin and dev.key not in shareable:
                holders[dev.key].append(_name(claim))
    return [
        SharingFinding("double-allocation", f"device {'/'.join(key)} is allocated to {len(set(h))} claims: {', '.join(sorted(set(h)))}")
        for key, h in sorted(holders.items())
        if len(set(h)) > 1
    ]


NOTHING_AUDITED = ("no claim outside the harness's namespaces is reserved for a pod that exists, "
                   "so no tenant boundary was audited")


def audited_claims(claims: Sequence[ResourceClaim | Obj], pods: Sequence[Pod | Obj]) -> list[ResourceClaim | Obj]:
    """The claims a tenant audit can judge: those reserved for at least one pod in ``pods``."""
    uids = {p["metadata"]["uid"] for p in pods}
    return [c for c in claims
            if any(r.get("resource") == "pods" and r.get("uid") in uids for r in c.get("status", {}).get("reservedFor") or [])]


def tenant_crossings(claims: Sequence[ResourceClaim | Obj], pods: Sequence[Pod | Obj], tenant_label: str) -> list[SharingFinding]:
    """Claims reserved for pods whose ``tenant_label`` values differ (a missing label counts as a value)."""
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    findings = []
    for claim in claims:
        tenants: dict[str, list[str]] = defaultdict(list)
        for ref in claim.get("status", {}).get("reservedFor") or []:
            pod = by_uid.get(ref.get("uid"))
            if pod is None or ref.get("resource") != "pods":
                continue
            tenant = pod["metadata"].get("labels", {}).get(tenant_label, "<no tenant label>")
            tenants[tenant].append(pod["metadata"]["name"])
        if len(tenants) > 1:
            who = "; ".join(f"{t}: {', '.join(sorted(p))}" for t, p in sorted(tenants.items()))
            findings.append(SharingFinding(
                "tenant-crossing",
                f"claim {_name(claim)} ({', '.join(str(d) for d in allocated_devices(claim))}) is shared across tenants ({who})",
            ))
    return findings


def group_sharing_problems(claims: dict[str, AbstractSet[str]], devices: dict[str, AbstractSet[str]]) -> list[str]:
    """Pod groups whose pods do not share one claim and one device, or two groups given the same device.

    ``claims`` and ``devices``: group -> the claim names / devices its pods use.
    """
    out = [f"{g}: its pods use claims {sorted(c)}, not the group's one claim" for g, c in sorted(claims.items()) if len(c) != 1]
    out += [f"{g}: its pods hold {sorted(d)}, not one shared device" for g, d in sorted(devices.items()) if len(d) != 1]
    holders: dict[str, list[str]] = defaultdict(list)
    for g, ds in sorted(devices.items()):
        for d in ds:
            holders[d].append(g)
    out += [f"groups {' and '.join(gs)} were both given {d}" for d, gs in sorted(holders.items()) if len(gs) > 1]
    return out
