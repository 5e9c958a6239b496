"""What a DRA driver's ServiceAccount may do beyond publishing its own node's slices and reading claims.

Drivers "may report device status and influence scheduling decisions", so their identity matters:
a kubelet plugin that may write any node's ResourceSlices can make the scheduler place pods on
devices that do not exist; one that may read Secrets or write pods is a foothold on every node
it runs on. RBAC cannot scope slice writes to a node; the example driver's chart adds a
ValidatingAdmissionPolicy that ties its ServiceAccount's writes to the node of the pod the
token was issued for. So the audit asks two things:

- SubjectAccessReviews for the ServiceAccount (with its groups) over a fixed list of grants
  beyond what a node-local driver needs (:data:`BEYOND`); each one allowed is a finding.
- A server-side dry-run create of a ResourceSlice for *another* node, impersonating the
  ServiceAccount with the node name its token would carry; accepted is a finding. The same
  dry-run for the driver's own node must be accepted, or the probe proves nothing.

Needs the harness identity to create SubjectAccessReviews and to impersonate; without either,
the audit says so instead of guessing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from dra_harness.errors import KubeApiError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
#: (verb, group, resource, subresource, what a grant means); a node-local driver needs none of these.
BEYOND: tuple[tuple[str, str, str, str, str], ...] = (
    ("get", "", "secrets", "", "read Secrets"),
    ("list", "", "secrets", "", "list Secrets"),
    ("create", "", "pods", "", "create pods"),
    ("update", "", "pods", "", "update pods"),
    ("delete", "", "pods", "", "delete pods"),
    ("create", "", "pods", "exec", "exec into pods"),
    ("update", "", "nodes", "", "update nodes"),
    ("update", "resource.k8s.io", "resourceclaims", "", "rewrite ResourceClaims beyond their status"),
    ("delete", "resource.k8s.io", "resourceclaims", "", "delete ResourceClaims"),
    ("create", "resource.k8s.io", "deviceclasses", "", "create DeviceClasses"),
    ("create", "resource.k8s.io", "devicetaintrules", "", "create DeviceTaintRules"),
    ("impersonate", "", "users", "", "impersonate users"),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", "", "bind ClusterRoles"),
)
#: What it must be allowed, or it cannot work at all (the audit's own sanity check).
NEEDED: tuple[tuple[str, str, str, str], ...] = (
    ("create", "resource.k8s.io", "resourceslices", ""),
    ("get", "resource.k8s.io", "resourceclaims", ""),
)


@dataclass
class Audit:
    service_account: str
    findings: list[str] = field(default_factory=list)
    granted_beyond: list[str] = field(default_factory=list)
    missing_needed: list[str] = field(default_factory=list)
    #: What the slice probe saw: {"own_node": "accepted" | refusal, "other_node": ...}.
    slice_probe: dict[str, str] = field(default_factory=dict)
    not_established: str | None = None


class AuditImpossible(KubeApiError):
    """The harness's identity may not ask (no SubjectAccessReview or impersonation rights)."""


def allowed(kube: Kube, user: str, groups: list[str], verb: str, group: str, resource: str, subresource: str = "") -> bool:
    try:
        review = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {
                "verb": verb, "group": group, "resource": resource, "subresource": subresource}}})
    except rest.ApiError as e:
        if e.status in (401, 403):
            raise AuditImpossible(f"this identity may not create SubjectAccessReviews: {e.message}") from None
        raise
    return bool(review.get("status", {}).get("allowed"))


def _dry_run_slice(kube: Kube, driver: str, node: str) -> str:
    name = f"dra-harness-audit-{uuid.uuid4().hex[:8]}"
    body: Obj = {"metadata": {"name": name}, "spec": {
        "driver": driver, "nodeName": node, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}, "devices": []}}
    try:
        kube.create(rest.RESOURCE_SLICES, body, dry_run=True)
    except rest.ApiError as e:
        return f"refused: {e.status} {e.message[:300]}"
    return "accepted"


def audit(kube: Kube, namespace: str, service_account: str, driver: str, own_node: str, other_node: str) -> Audit:
    """Audit ``namespace/service_account``, whose pod runs on ``own_node``; ``other_node`` is any other node name."""
    user = f"system:serviceaccount:{namespace}:{service_account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    out = Audit(f"{namespace}/{service_account}")
    for verb, group, resource, sub, meaning in BEYOND:  # AuditImpossible ends the audit: nothing to say
        if allowed(kube, user, groups, verb, group, resource, sub):
            out.granted_beyond.append(f"{verb} {resource}{'/' + sub if sub else ''}")
            out.findings.append(f"driver ServiceAccount {out.service_account} may {meaning} (RBAC allows {verb} "
                                f"{resource}{'/' + sub if sub else ''} cluster-wide)")
    out.missing_needed = [f"{v} {r}" for v, g, r, s in NEEDED if not allowed(kube, user, groups, v, g, r, s)]
    acting = kube.impersonating(user, {NODE_NAME_EXTRA: own_node})
    out.slice_probe = {"own_node": _dry_run_slice(acting, driver, own_node),
                       "other_node": _dry_run_slice(acting, driver, other_node)}
    if out.slice_probe["own_node"].startswith("refused: 403") and "impersonate" in out.slice_probe["own_node"]:
        # Our identity may not act as the driver: the RBAC answers stand, the slice rule is left unchecked.
        out.slice_probe = {"not_checked": f"this identity may not impersonate {user}: {out.slice_probe['own_node'][9:]}"}
    elif out.slice_probe["own_node"] != "accepted":
        out.not_established = (f"a slice for the driver's own node {own_node} was refused too, so the probe shows "
                               f"nothing about other nodes: {out.slice_probe['own_node']}")
    elif out.slice_probe["other_node"] == "accepted":
        out.findings.append(f"driver ServiceAccount {out.service_account}, running on {own_node}, may write ResourceSlices "
                            f"of other nodes ({other_node}): no admission policy ties its writes to its own node")
    return out
