"""Builders for DRA objects, in the spirit of Kubernetes' test/e2e/dra builders.

Each returns a plain dict as the API server takes it, already carrying the run
label, so nothing a test creates can escape the end-of-run sweep.
"""

from __future__ import annotations

import copy
from typing import Any

from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL

RUN_DURATION_ANNOTATION = "dra-harness.io/run-duration"
#: Our pods' termination grace. Not 0: a pod deleted with 0 leaves the API at once, its claims are released
#: and their devices handed to the next pod while the node has not yet unprepared them (the kubelet unprepares
#: before it reports a pod terminated); NVIDIA's plugin then refuses the next claim on that device ("already
#: allocated to different claim"), and the kubelet retries only at its next resync, a minute on.
GRACE_S = 1


def meta(name: str, run_id: str, labels: dict[str, str] | None = None, **extra: Any) -> Obj:
    return {"name": name, "labels": {RUN_LABEL: run_id, **(labels or {})}, **extra}


def cel(expression: str) -> Obj:
    return {"cel": {"expression": expression}}


def exactly(
    name: str,
    device_class: str,
    count: int = 1,
    selectors: list[str] | None = None,
    all_devices: bool = False,
    tolerations: list[Obj] | None = None,
    capacity: dict[str, str] | None = None,
    admin_access: bool = False,
) -> Obj:
    """A request for ``count`` devices of one class (or all matching ones); ``capacity``: what it
    consumes of a device that takes several allocations (e.g. ``{"memory": "16Gi"}``)."""
    spec: Obj = {"deviceClassName": device_class}
    if all_devices:
        spec["allocationMode"] = "All"
    else:
        spec["allocationMode"] = "ExactCount"
        spec["count"] = count
    if selectors:
        spec["selectors"] = [cel(s) for s in selectors]
    if tolerations:
        spec["tolerations"] = tolerations
    if capacity:
        spec["capacity"] = {"requests": capacity}
    if admin_access:
        spec["adminAccess"] = True
    return {"name": name, "exactly": spec}


def first_available(name: str, alternatives: list[Obj]) -> Obj:
    """A request satisfied by the first alternative that fits (``exactly`` bodies with names)."""
    return {"name": name, "firstAvailable": [{"name": a["name"], **a["exactly"]} for a in alternatives]}


def claim_spec(requests: list[Obj], constraints: list[Obj] | None = None, config: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {"devices": devices}


def claim(name: str, run_id: str, requests: list[Obj], **kw: Any) -> Obj:
    return {"metadata": meta(name, run_id), "spec": claim_spec(requests, **kw)}


def claim_template(name: str, run_id: str, requests: list[Obj], **kw: Any) -> Obj:
    return {
        "metadata": meta(name, run_id),
        "spec": {"metadata": {"labels": {RUN_LABEL: run_id}}, "spec": claim_spec(requests, **kw)},
    }


#: What PodSecurity's ``restricted`` level asks of a pod and of each container: hardened clusters enforce it
#: on every new namespace, and nothing a probe does needs root, a capability or a privilege escalation.
RESTRICTED_POD: Obj = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                       "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER: Obj = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod(
    name: str,
    run_id: str,
    claims: dict[str, dict[str, str]] | None = None,
    containers: int = 1,
    run_duration: str | None = None,
    labels: dict[str, str] | None = None,
    priority_class: str | None = None,
    node_name: str | None = None,
    image: str = PAUSE_IMAGE,
    nodes: list[str] | None = None,
) -> Obj:
    """A pod whose containers all use every claim in ``claims``.

    ``claims`` maps the pod-level claim name to ``{"template": name}`` or
    ``{"claim": name}``. ``run_duration`` (e.g. ``"30s"``) makes a simulated pod
    complete after that time. ``nodes`` admits only those nodes, by name (a node's hostname label
    need not be its name).
    """
    pod_claims = []
    for claim_name, ref in (claims or {}).items():
        entry = {"name": claim_name}
        if "template" in ref:
            entry["resourceClaimTemplateName"] = ref["template"]
        else:
            entry["resourceClaimName"] = ref["claim"]
        pod_claims.append(entry)
    spec: Obj = {
        "terminationGracePeriodSeconds": GRACE_S,
        "restartPolicy": "Never" if run_duration else "Always",
        "securityContext": copy.deepcopy(RESTRICTED_POD),
        "containers": [
            {
                "name": f"ctr{i}",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
                "resources": {"claims": [{"name": c["name"]} for c in pod_claims]},
            }
            for i in range(containers)
        ],
    }
    if pod_claims:
        spec["resourceClaims"] = pod_claims
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    if nodes:  # a node field selector takes one value: one term per node (terms are ORed)
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes]}}}
    annotations = {RUN_DURATION_ANNOTATION: run_duration} if run_duration else {}
    return {"metadata": meta(name, run_id, labels, annotations=annotations), "spec": spec}


def simulated_node(name: str, labels: dict[str, str], taint: Obj, kwok: tuple[str, str]) -> Obj:
    """A simulated (KWOK) node a run adds, tainted ``taint`` and handed to the KWOK annotated ``kwok``.

    Its labels are the run's and ``type=kwok``, deliberately without a kubelet's ``kubernetes.io/hostname``
    and ``kubernetes.io/os``: a tenant's topology spread on the hostname then does not count the node as an
    empty domain, and the many DaemonSets that select ``kubernetes.io/os=linux`` (kube-proxy, CNI agents,
    node exporters) put no pod on it. Nothing the harness schedules there selects on either label."""
    return {"metadata": {"name": name, "annotations": {kwok[0]: kwok[1]}, "labels": {**labels, "type": "kwok"}},
            "spec": {"taints": [taint]}}
