"""A managed GPU offering's rules on the staging twin: the provider's taint on every GPU node, a namespace-label policy.

Why: the twins drawn so far were clusters a platform team runs by hand. Managed GPU offerings add rules of their own
that every run meets: the GPU node pool carries the provider's taint (GKE ``nvidia.com/gpu=present:NoSchedule``,
AKS ``sku=gpu:NoSchedule``, operators' own keys), which the driver's DaemonSet tolerates and the harness's pods do
not unless told; and a policy engine (Kyverno, Gatekeeper, or a ValidatingAdmissionPolicy as here) refuses a
namespace without a team label. A run must not FAIL there (the rules are not DRA's), must say which option lets it
comply, and with those options must establish what it establishes elsewhere.
"""

from __future__ import annotations

import logging
import time

from dra_harness.kube import rest
from dra_harness.kube.placement import taint_text
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)

#: Providers' GPU-pool taints (all NoSchedule: a NoExecute one would evict the pods a pool already runs).
PROVIDER_TAINTS: tuple[Obj, ...] = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # GKE's GPU node pools
    {"key": "sku", "value": "gpu", "effect": "NoSchedule"},  # AKS's documented GPU pool taint
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},  # a cluster operator's, without a value
)
POLICY = "require-team-label"


def tolerating(docs: list[Obj], taint: Obj) -> None:
    """The driver's DaemonSet as a GPU pool's installation has it: tolerating the pool's taint."""
    for doc in docs:
        if doc.get("kind") == "DaemonSet":
            spec = doc["spec"]["template"]["spec"]
            spec["tolerations"] = [*(spec.get("tolerations") or []),
                                   {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}]


def taint_pool(kube: Kube, nodes: list[str], taint: Obj) -> None:
    """Every node of ``nodes`` (those with devices) carries the pool's taint, beside any it has."""
    for name in nodes:
        node = kube.get(rest.NODES, name)
        kube.patch(rest.NODES, name, {"spec": {"taints": [*(node["spec"].get("taints") or []), taint]}})


def require_namespace_label(kube: Kube, key: str) -> None:
    """A ValidatingAdmissionPolicy that refuses any new namespace without label ``key``, as a policy engine would."""
    kube.create(rest.VALIDATING_ADMISSION_POLICIES, {"metadata": {"name": POLICY}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["namespaces"]}]},
        "validations": [{"expression": f"has(object.metadata.labels) && '{key}' in object.metadata.labels",
                         "message": f"namespaces must carry a {key} label (platform policy)"}]}})
    kube.create(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, {"metadata": {"name": POLICY}, "spec": {
        "policyName": POLICY, "validationActions": ["Deny"]}})
    # The policy is in force once the API server refuses an unlabelled namespace (its policy cache fills lazily).
    def refused() -> None:
        try:
            kube.create(rest.NAMESPACES, {"metadata": {"name": "policy-probe"}}, dry_run=True)
        except rest.ApiError as e:
            if POLICY in e.message:
                return
            raise
        raise NotYet("an unlabelled namespace is still admitted")

    until(time.monotonic() + 30, 0.5, log, f"the {POLICY} policy to refuse an unlabelled namespace")(refused)


def describe(taint: Obj | None, label: str) -> str:
    return ", ".join(filter(None, [f"GPU pool tainted {taint_text(taint)}" if taint else "",
                                   f"namespaces need label {label}" if label else ""])) or "none"


def lift(kube: Kube, nodes: list[str], taint: Obj | None, label: str) -> None:
    """The same twin without its managed rules: what a run establishes there is what the rules' options must give."""
    if taint:
        for name in nodes:
            node = kube.get(rest.NODES, name)
            kube.patch(rest.NODES, name, {"spec": {"taints": [t for t in node["spec"].get("taints") or [] if t != taint]}})
    if label:
        kube.delete(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, POLICY)
        kube.delete(rest.VALIDATING_ADMISSION_POLICIES, POLICY)

        def admitted() -> None:
            try:
                kube.create(rest.NAMESPACES, {"metadata": {"name": "policy-probe"}}, dry_run=True)
            except rest.ApiError as e:
                if POLICY in e.message:
                    raise NotYet("an unlabelled namespace is still refused") from e
                raise

        until(time.monotonic() + 30, 0.5, log, f"the {POLICY} policy to be gone")(admitted)
