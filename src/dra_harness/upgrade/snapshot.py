"""What must not change while a cluster is upgraded, read at one instant, and how two readings differ.

Why a snapshot of our own workloads and not the cluster's state at large: the invariants of an
upgrade are promises to the workloads that were running through it. A claim keeps the devices it
was allocated (same uid, same devices), a running container keeps running (same container ID, same
restart count), and what the driver prepared for a claim on a node stays prepared exactly once
(the claim's CDI spec file is neither removed nor rewritten with other content). :func:`differences`
is pure, so each promise is unit-tested on plain data as well as checked on a live cluster.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

#: The invariants a snapshot can break, in report order, with the sentence that states each.
INVARIANTS = {
    "allocations": "every claim keeps the same uid and the same allocated devices",
    "containers": "every running container keeps running: same pod, container ID and restart count",
    "prepared": "what the driver prepared for each claim on a real node stays prepared once: its CDI spec unchanged",
}


class ClaimView(TypedDict):
    uid: str
    devices: list[str]
    reserved_for: list[str]


class ContainerView(TypedDict):
    id: str
    restarts: int
    running: bool


class PodView(TypedDict):
    uid: str
    node: str
    phase: str
    containers: dict[str, ContainerView]


@dataclass
class Snapshot:
    """Claims and pods of one namespace, and the CDI spec files of the real nodes (path -> sha256)."""

    claims: dict[str, ClaimView] = field(default_factory=dict)
    pods: dict[str, PodView] = field(default_factory=dict)
    cdi: dict[str, str] = field(default_factory=dict)


def claim_view(claim: Obj) -> ClaimView:
    return {
        "uid": claim["metadata"]["uid"],
        "devices": sorted(str(d) for d in allocated_devices(claim)),
        "reserved_for": sorted(r.get("name", "") for r in claim.get("status", {}).get("reservedFor") or []),
    }


def pod_view(pod: Obj) -> PodView:
    containers: dict[str, ContainerView] = {}
    for c in pod.get("status", {}).get("containerStatuses") or []:
        containers[c["name"]] = {
            "id": c.get("containerID", ""),
            "restarts": int(c.get("restartCount", 0)),
            "running": "running" in (c.get("state") or {}),
        }
    return {
        "uid": pod["metadata"]["uid"],
        "node": pod["spec"].get("nodeName", ""),
        "phase": pod.get("status", {}).get("phase", ""),
        "containers": containers,
    }


def cdi_files(dirs: dict[str, Path]) -> dict[str, str]:
    """``node/file`` -> sha256 of each CDI spec the driver wrote (``dirs``: node -> its CDI dir)."""
    found = {}
    for node, d in sorted(dirs.items()):
        for f in sorted(d.glob("*")) if d.is_dir() else []:
            if f.is_file():
                found[f"{node}/{f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()
    return found


def take(kube: Kube, namespace: str, cdi_dirs: dict[str, Path]) -> Snapshot:
    """The namespace's claims and pods, and the CDI specs of its claims in use (the driver names each
    spec file after its claim's uid; a claim being released is not judged)."""
    claims = {f"{namespace}/{c['metadata']['name']}": claim_view(c) for c in kube.list(rest.RESOURCE_CLAIMS, namespace)}
    in_use = [c["uid"] for c in claims.values() if c["reserved_for"]]
    return Snapshot(
        claims=claims,
        pods={f"{namespace}/{p['metadata']['name']}": pod_view(p) for p in kube.list(rest.PODS, namespace)},
        cdi={path: digest for path, digest in cdi_files(cdi_dirs).items() if any(uid in path for uid in in_use)},
    )


def differences(before: Snapshot, after: Snapshot) -> dict[str, list[str]]:
    """Invariant -> each way ``after`` breaks it, one sentence each; objects new in ``after`` are not judged."""
    found: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    for key, was in before.claims.items():
        now = after.claims.get(key)
        if now is None:
            found["allocations"].append(f"claim {key} is gone (it held {', '.join(was['devices']) or 'nothing'})")
        elif now["uid"] != was["uid"]:
            found["allocations"].append(f"claim {key} was replaced: uid {was['uid']} -> {now['uid']}, "
                                        f"devices {was['devices']} -> {now['devices']}")
        elif now["devices"] != was["devices"]:
            found["allocations"].append(f"claim {key} changed devices: {was['devices']} -> {now['devices']}")
    for key, was_pod in before.pods.items():
        pod = after.pods.get(key)
        if pod is None:
            found["containers"].append(f"pod {key} is gone")
            continue
        if pod["uid"] != was_pod["uid"]:
            found["containers"].append(f"pod {key} was replaced: uid {was_pod['uid']} -> {pod['uid']}")
            continue
        if pod["phase"] != was_pod["phase"]:
            found["containers"].append(f"pod {key} went from {was_pod['phase']} to {pod['phase']}")
        for name, c in was_pod["containers"].items():
            n = pod["containers"].get(name)
            if n is None:
                found["containers"].append(f"container {key}/{name} is no longer reported")
            elif n["id"] != c["id"] or n["restarts"] != c["restarts"]:
                found["containers"].append(f"container {key}/{name} restarted: restarts {c['restarts']} -> {n['restarts']}, "
                                           f"ID {c['id'] or '-'} -> {n['id'] or '-'}")
            elif c["running"] and not n["running"]:
                found["containers"].append(f"container {key}/{name} is no longer running")
    for path, digest in before.cdi.items():
        now_digest = after.cdi.get(path)
        if now_digest is None:
            found["prepared"].append(f"CDI spec {path} was removed (the claim was unprepared)")
        elif now_digest != digest:
            found["prepared"].append(f"CDI spec {path} was rewritten with other content (prepared again)")
    return found
