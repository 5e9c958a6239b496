"""Which claim was allocated to which pod, on which devices of which model — and workloads whose replicas differ.

A claim template with ``firstAvailable`` over two models lets replicas of one Deployment get
different hardware: the scheduler picks the first alternative that fits *on the node it tries*.
Nothing in the workload's status shows it. So before a test's namespace is deleted the harness
writes its pods' allocations to ``<report-dir>/allocations.jsonl`` (one line per pod: workload,
pod, node, claims with their devices and each device's model, as the slices published it), and
the report lists them with a finding for every workload whose replicas got more than one model.
Appending is safe from several xdist workers (one short line per write, ``O_APPEND``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from dra_harness.kube import rest
from dra_harness.kube.pods import allocated_devices
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.report import provenance
from dra_harness.report.files import RunDirError, redact
from dra_harness.report.reading import present, read_text

FILE = "allocations.jsonl"
#: Rows kept per test: a contention-sized namespace would otherwise swamp the report.
MAX_PODS = 64


def _workload(kube: Kube, pod: Obj) -> str:
    """``Deployment/web`` for a Deployment's replica, ``Job/x``, ``StatefulSet/y``; ``Pod/name`` when it has no owner."""
    meta = pod["metadata"]
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is None:
        return f"Pod/{meta['name']}"
    if owner["kind"] == "ReplicaSet":
        try:
            rs = kube.get(rest.REPLICA_SETS, owner["name"], meta["namespace"])
        except rest.ApiError:  # gone, or the run may not read ReplicaSets: name the one the pod names
            return f"ReplicaSet/{owner['name']}"
        top = next((o for o in rs["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        if top is not None:
            return f"{top['kind']}/{top['name']}"
    return f"{owner['kind']}/{owner['name']}"


def _models(kube: Kube, drivers: set[str]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the device's ``model`` attribute as published, for the drivers named."""
    out = {}
    for driver in drivers:
        for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={driver}"):
            for d in s["spec"].get("devices") or []:
                attrs = d.get("attributes") or {}
                value = attrs.get("model") or attrs.get(f"{driver}/model") or attrs.get("productName") or {}
                model = next(iter(value.values()), None) if isinstance(value, dict) else None
                if model is not None:
                    out[(driver, s["spec"]["pool"]["name"], d["name"])] = str(model)
    return out


def collect(kube: Kube, namespace: str) -> list[Obj]:
    """One row per pod of ``namespace`` that holds allocated claims (at most :data:`MAX_PODS`)."""
    claims = {c["metadata"]["name"]: c for c in kube.list(rest.RESOURCE_CLAIMS, namespace)}
    pods = []
    for pod in kube.list(rest.PODS, namespace):
        names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
        names += [r["resourceClaimName"] for r in pod["spec"].get("resourceClaims") or [] if r.get("resourceClaimName")]
        held = [claims[n] for n in dict.fromkeys(n for n in names if n) if n in claims and allocated_devices(claims[n])]
        if held:
            pods.append((pod, held))
        if len(pods) >= MAX_PODS:
            break
    if not pods:
        return []
    models = _models(kube, {d.driver for _, held in pods for c in held for d in allocated_devices(c)})
    kinds = _node_kinds(kube, {pod["spec"].get("nodeName") or "" for pod, _ in pods} - {""})
    rows = []
    for pod, held in pods:
        health = _health(pod)
        node = pod["spec"].get("nodeName") or ""
        rows.append({
            "namespace": namespace, "workload": _workload(kube, pod), "pod": pod["metadata"]["name"],
            "node": node, "node_kind": kinds.get(node, ""),
            "claims": [{"claim": c["metadata"]["name"], "health": health.get(c["metadata"]["name"], {}), "devices": [
                {"device": str(d), "model": models.get(d.key, "")} for d in allocated_devices(c)]} for c in held],
        })
    return rows


def _node_kinds(kube: Kube, names: set[str]) -> dict[str, str]:
    """Node -> simulated / real / kind, read now: nodes a test made itself may be gone from the fingerprint's list."""
    out = {}
    for name in names:
        try:
            out[name] = provenance.node_kind(kube.get(rest.NODES, name))
        except rest.ApiError:  # deleted with its test, or not readable: the report says "unknown kind"
            continue
    return out


def _health(pod: Obj) -> dict[str, dict[str, str]]:
    """Claim name -> {resourceID: health} as the kubelet reports it (``allocatedResourcesStatus``, real nodes)."""
    by_pod_claim = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    by_pod_claim |= {r["name"]: r["resourceClaimName"] for r in pod["spec"].get("resourceClaims") or [] if r.get("resourceClaimName")}
    out: dict[str, dict[str, str]] = {}
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        for s in c.get("allocatedResourcesStatus") or []:
            claim = by_pod_claim.get(s["name"].removeprefix("claim:"))
            if claim:
                out.setdefault(claim, {}).update({r["resourceID"]: r.get("health", "") for r in s.get("resources") or []})
    return out


def append(report_dir: Path, test: str, rows: list[Obj]) -> None:
    if not rows:
        return
    report_dir.mkdir(parents=True, exist_ok=True)
    with open(report_dir / FILE, "a") as f:
        for row in rows:
            f.write(redact(json.dumps({"test": test, **row})) + "\n")


def load(run_dir: Path) -> list[Obj]:
    path = run_dir / FILE
    if not present(path):
        return []
    out = []
    for line in read_text(path, "allocation log").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a killed run: the others still count
        if not isinstance(out[-1], dict) or not isinstance(out[-1].get("claims"), list):
            raise RunDirError(f"{path}: not an allocation record: {line[:80]}")
    return out


def pod_models(row: Obj) -> list[str]:
    return sorted({d["model"] for c in row["claims"] for d in c["devices"] if d["model"]})


def mixed(rows: Iterable[Obj]) -> list[Obj]:
    """One finding (``test``, ``message``) per workload, not a bare pod, whose replicas hold devices of more
    than one model."""
    by_workload: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for row in rows:
        if row["workload"].startswith("Pod/"):
            continue
        key = (row.get("test", ""), row["namespace"], row["workload"])
        for model in pod_models(row):
            by_workload.setdefault(key, {}).setdefault(model, []).append(row["pod"])
    return [{"test": test, "message": f"{workload} in {ns}: replicas got different device models: "
             + "; ".join(f"{m} ({len(p)}: {', '.join(sorted(p))})" for m, p in sorted(models.items()))}
            for (test, ns, workload), models in sorted(by_workload.items()) if len(models) > 1]
