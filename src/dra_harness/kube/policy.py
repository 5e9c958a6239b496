"""Refusals by the cluster's own policy: the environment's answer, not the product's.

A hardened cluster refuses what a check creates for reasons that have nothing to do with DRA:
PodSecurity enforced on new namespaces, a LimitRange's bounds, a ResourceQuota that is used
up, another team's ValidatingAdmissionPolicy. A check that meets one cannot reach its verdict,
so the plugin reports it "not established" with the API server's words instead of a FAIL; so too
a wait that ran out because the quota kept a pod's claim from being created (the backstop of a
check that did not declare how many devices it asks for: :func:`..checks.needs.namespace_devices`).
A webhook's refusal is not among them: the driver's own webhook is part of the product.
"""

from __future__ import annotations

import re

from dra_harness.kube import rest
from dra_harness.kube.rest import ApiError, Kube
from dra_harness.kube.waits import WaitTimeout

#: What the API server says when each kind of policy refuses (its messages, matched as written).
_REFUSALS = (
    ("PodSecurity", re.compile(r'violates PodSecurity "')),
    ("ResourceQuota", re.compile(r"exceeded quota: ")),
    ("LimitRange", re.compile(r"(maximum|minimum) \S+ usage per (Container|Pod)|max limit to request ratio per")),
    ("LimitRange", re.compile(r"must be less than or equal to \S+ limit")),
    ("ValidatingAdmissionPolicy", re.compile(r"ValidatingAdmissionPolicy '(?!dra-harness|device-class-limits-)[^']*' with binding")),
    # A RuntimeClass the pod names that the cluster lacks (--runtime-class), and the policy engines' webhooks by name:
    # unlike a driver's own webhook, neither is the product's.
    ("RuntimeClass admission", re.compile(r'RuntimeClass "[^"]*" not found|pod rejected: RuntimeClass')),
    ("policy engine", re.compile(r'admission webhook "[^"]*(gatekeeper|kyverno)[^"]*" denied')),
)


#: A wait whose pod never got the claim its template asks for, because the namespace's quota is used up.
_CLAIM_OVER_QUOTA = re.compile(r"FailedResourceClaimCreation: [^|]*exceeded quota: [^|;]*")


def policy_refusal(error: BaseException) -> str | None:
    """``error`` said in one line when it is the cluster's policy refusing a request; None otherwise."""
    if isinstance(error, WaitTimeout) and (m := _CLAIM_OVER_QUOTA.search(str(error))):
        return f"the cluster's ResourceQuota refused a claim the check's pod needs: {m.group(0)[:400]}"
    if not isinstance(error, ApiError) or error.status not in (403, 422):
        return None
    for kind, pattern in _REFUSALS:
        if pattern.search(error.message):
            return f"the cluster's {kind} refused it: {error.message[:400]}"
    return None


def replica_refusal(kube: Kube, namespace: str) -> str | None:
    """Why the cluster's policy refuses the pods a Deployment of ``namespace`` tries to create (its ``ReplicaFailure``
    condition), in one line; None when none is refused so. A workload's pods that admission refuses never exist, so
    a wait for them sees nothing: this says why."""
    try:  # the Deployment carries its ReplicaSet's condition; the run may list Deployments, not ReplicaSets
        workloads = kube.list(rest.DEPLOYMENTS, namespace)
    except ApiError:
        return None
    for rs in workloads:
        for cond in (rs.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "ReplicaFailure" and cond.get("reason") == "FailedCreate":
                for kind, pattern in _REFUSALS:
                    if pattern.search(cond.get("message", "")):
                        return f"the cluster's {kind} refused the workload's pods: {cond['message'][:400]}"
    return None
