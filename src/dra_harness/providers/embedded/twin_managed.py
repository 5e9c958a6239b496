"""A managed GPU offering's rules on the staging twin: the provider's taint on every GPU node, a namespace-label
policy, a RuntimeClass GPU pods must name, an image policy admitting one registry.

Why: the twins drawn so far were clusters a platform team runs by hand. Managed GPU offerings add rules of their own
that every run meets: the GPU node pool carries the provider's taint (GKE ``nvidia.com/gpu=present:NoSchedule``,
AKS ``sku=gpu:NoSchedule``, operators' own keys), which the driver's DaemonSet tolerates and the harness's pods do
not unless told; and a policy engine (Kyverno, Gatekeeper, or a ValidatingAdmissionPolicy as here) refuses a
namespace without a team label, a GPU pod without the pool's RuntimeClass, an image from anywhere but the mirror.
A run must not FAIL there (the rules are not DRA's), must say which option lets it
comply, and with those options must establish what it establishes elsewhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.placement import taint_text
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.retrying import NotYet, until

if TYPE_CHECKING:
    from dra_harness.providers.embedded.cluster import LocalCluster

log = logging.getLogger(__name__)

#: Providers' GPU-pool taints (all NoSchedule: a NoExecute one would evict the pods a pool already runs).
PROVIDER_TAINTS: tuple[Obj, ...] = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # GKE's GPU node pools
    {"key": "sku", "value": "gpu", "effect": "NoSchedule"},  # AKS's documented GPU pool taint
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},  # a cluster operator's, without a value
)
POLICY = "require-team-label"
RUNTIME_POLICY = "gpu-pods-need-runtime-class"
REGISTRY_POLICY = "images-from-the-mirror"
#: The RuntimeClass a GPU pool's pods must name (the GPU operator's name for its container runtime).
GPU_RUNTIME_CLASS = "nvidia"
#: The one registry prefix the image policy admits: the name under which the twin's images are loaded.
MIRROR = "dra-harness.local/"
MIRRORED_PAUSE = f"{MIRROR}pause:3.10"


#: The label a GPU pool's nodes carry (NVIDIA's GPU operator sets it through node feature discovery); the driver's
#: DaemonSet selects it, so a system pool beside the GPU pool runs no driver and publishes no device.
GPU_POOL_LABEL = ("nvidia.com/gpu.present", "true")


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


def _policy(kube: Kube, name: str, resource: str, expression: str, message: str, exempt: Sequence[str] = ()) -> None:
    """A ValidatingAdmissionPolicy refusing what fails ``expression`` on CREATE of ``resource`` outside ``exempt``
    namespaces (the platform's own, which predate it), as a policy engine would."""
    constraints: Obj = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                           "resources": [resource]}]}
    if exempt:
        constraints["namespaceSelector"] = {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted(exempt)}]}
    kube.create(rest.VALIDATING_ADMISSION_POLICIES, {"metadata": {"name": name}, "spec": {
        "failurePolicy": "Fail", "matchConstraints": constraints,
        "validations": [{"expression": expression, "message": message}]}})
    kube.create(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, {"metadata": {"name": name}, "spec": {
        "policyName": name, "validationActions": ["Deny"]}})


def _in_force(kube: Kube, name: str, res: rest.Resource, body: Obj, namespace: str | None, refused: bool = True) -> None:
    """Until the API server refuses (or, ``refused=False``, admits) ``body`` by policy ``name`` (a dry run): its
    policy cache fills lazily."""
    def check() -> None:
        try:
            kube.create(res, body, namespace, dry_run=True)
        except rest.ApiError as e:
            if name not in e.message:
                raise
            if not refused:
                raise NotYet(f"still refused by {name}") from e
            return
        if refused:
            raise NotYet(f"still admitted despite {name}")

    until(time.monotonic() + 30, 0.5, log, f"policy {name} to be {'in force' if refused else 'gone'}")(check)


_NAMESPACE_PROBE: Obj = {"metadata": {"name": "policy-probe"}}
#: PodSecurity ``restricted`` admits it (a shape may enforce that by default): only the policy under test refuses.
_RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
               "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
#: A GPU pod from the mirror without the runtime class: only the runtime-class policy refuses it.
_RUNTIME_PROBE: Obj = {"metadata": {"name": "policy-probe"}, "spec": {
    "containers": [{"name": "c", "image": f"{MIRROR}pause:3.10", "resources": {"claims": [{"name": "gpu"}]},
                    "securityContext": _RESTRICTED}],
    "resourceClaims": [{"name": "gpu", "resourceClaimName": "policy-probe"}]}}
#: A pod without claims from outside the mirror: only the image policy refuses it.
_REGISTRY_PROBE: Obj = {"metadata": {"name": "policy-probe"}, "spec": {
    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "securityContext": _RESTRICTED}]}}
#: Where the pod probes are made: a namespace no policy exempts.
PROBE_NAMESPACE = "default"


def require_namespace_label(kube: Kube, key: str) -> None:
    """A policy that refuses any new namespace without label ``key``."""
    _policy(kube, POLICY, "namespaces", f"has(object.metadata.labels) && '{key}' in object.metadata.labels",
            f"namespaces must carry a {key} label (platform policy)")
    _in_force(kube, POLICY, rest.NAMESPACES, _NAMESPACE_PROBE, None)


def require_runtime_class(kube: Kube, exempt: Sequence[str]) -> None:
    """A GPU pool's rule: a pod with resource claims must name the pool's RuntimeClass (:data:`GPU_RUNTIME_CLASS`,
    which exists, with runc's handler: the real node's containerd has it)."""
    kube.create(rest.RUNTIME_CLASSES, {"metadata": {"name": GPU_RUNTIME_CLASS}, "handler": "runc"})
    _policy(kube, RUNTIME_POLICY, "pods",
            f"!has(object.spec.resourceClaims) || size(object.spec.resourceClaims) == 0 || "
            f"(has(object.spec.runtimeClassName) && object.spec.runtimeClassName == '{GPU_RUNTIME_CLASS}')",
            f"pods with resource claims must set runtimeClassName {GPU_RUNTIME_CLASS} (platform policy)", exempt)
    _in_force(kube, RUNTIME_POLICY, rest.PODS, _RUNTIME_PROBE, PROBE_NAMESPACE)


def mirror_images(cluster: LocalCluster, node: str) -> None:
    """Real node ``node`` holds the pause image under the mirror's name too, as a node behind a mirror pulls it."""
    from dra_harness.providers.embedded import realcluster

    state = cluster.state()
    assert state is not None
    out = realcluster.node(cluster, node).ctr(state.binaries["ctr"], "images", "tag", "--force", PAUSE_IMAGE, MIRRORED_PAUSE)
    if out.returncode != 0:
        raise ClusterError(f"{node}: ctr images tag {PAUSE_IMAGE} {MIRRORED_PAUSE}: {out.stderr.strip()[-300:]}")


def admit_registry(kube: Kube, exempt: Sequence[str]) -> None:
    """An image policy: every container's image from :data:`MIRROR` (the pause image a run pulls must come from the
    mirror too, ``--pause-image``)."""
    _policy(kube, REGISTRY_POLICY, "pods",
            f"object.spec.containers.all(c, c.image.startsWith('{MIRROR}')) && (!has(object.spec.initContainers) || "
            f"object.spec.initContainers.all(c, c.image.startsWith('{MIRROR}')))",
            f"images must come from {MIRROR} (platform image policy)", exempt)
    _in_force(kube, REGISTRY_POLICY, rest.PODS, _REGISTRY_PROBE, PROBE_NAMESPACE)


def system_pool(cluster: LocalCluster, kube: Kube, gpu_nodes: Sequence[str], system_nodes: Sequence[str],
                driver_namespace: str | None) -> None:
    """A GPU pool selected by label beside a system pool without devices: the GPU nodes labelled, the driver's
    DaemonSet selecting the label, and the system nodes' plugins stopped with their slices gone."""
    key, value = GPU_POOL_LABEL
    for name in gpu_nodes:
        kube.patch(rest.NODES, name, {"metadata": {"labels": {key: value}}})
    for ds in kube.list(rest.DAEMON_SETS, driver_namespace) if driver_namespace else []:
        kube.patch(rest.DAEMON_SETS, ds["metadata"]["name"],
                   {"spec": {"template": {"spec": {"nodeSelector": {key: value}}}}}, driver_namespace)
    for name in system_nodes:
        cluster.stop_driver(name)
        for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.nodeName={name}"):
            kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])

    def settled() -> None:
        left = [s["spec"]["nodeName"] for s in kube.list(rest.RESOURCE_SLICES) if s["spec"].get("nodeName") in system_nodes]
        left += [p["spec"].get("nodeName") for p in (kube.list(rest.PODS, driver_namespace) if driver_namespace else [])
                 if p["spec"].get("nodeName") in system_nodes]
        if left:
            raise NotYet(f"the system pool's nodes still have slices or driver pods: {sorted(set(left))}")

    until(time.monotonic() + 60, 0.5, log, "the system pool to publish no device")(settled)


def describe(taint: Obj | None, label: str, runtime_class: bool = False, registry: bool = False,
             gpu_pool: int = 0) -> str:
    return ", ".join(filter(None, [f"GPU pool tainted {taint_text(taint)}" if taint else "",
                                   f"GPU pool of {gpu_pool} node(s) labelled {'='.join(GPU_POOL_LABEL)} beside a "
                                   "system pool without devices" if gpu_pool else "",
                                   f"namespaces need label {label}" if label else "",
                                   f"GPU pods need RuntimeClass {GPU_RUNTIME_CLASS}" if runtime_class else "",
                                   f"images only from {MIRROR}" if registry else ""])) or "none"


def lift(kube: Kube, nodes: list[str], taint: Obj | None, label: str, runtime_class: bool = False,
         registry: bool = False) -> None:
    """The same twin without its managed rules: what a run establishes there is what the rules' options must give."""
    if taint:
        for name in nodes:
            node = kube.get(rest.NODES, name)
            kube.patch(rest.NODES, name, {"spec": {"taints": [t for t in node["spec"].get("taints") or [] if t != taint]}})
    policies = [(name, res, probe, namespace) for given, name, res, probe, namespace in (
        (label, POLICY, rest.NAMESPACES, _NAMESPACE_PROBE, None),
        (runtime_class, RUNTIME_POLICY, rest.PODS, _RUNTIME_PROBE, PROBE_NAMESPACE),
        (registry, REGISTRY_POLICY, rest.PODS, _REGISTRY_PROBE, PROBE_NAMESPACE)) if given]
    for name, *_ in policies:
        kube.delete(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, name)
        kube.delete(rest.VALIDATING_ADMISSION_POLICIES, name)
    for name, res, probe, namespace in policies:
        _in_force(kube, name, res, probe, namespace, refused=False)
