"""The embedded cluster dressed as a staging installation, for testing the harness on one.

Users run the harness on clusters it did not build: the driver is a DaemonSet, other
DRA drivers' plugin pods carry the same generic labels, other teams' pods hold claims,
a node is cordoned for maintenance, and the harness runs as a ServiceAccount with the
roles we ship and nothing more. The project cannot borrow such a cluster in CI, so
this module makes the embedded one look like that and hands out a ServiceAccount
kubeconfig: a run through it (``--cluster existing``) sees what a user's run sees.

What it installs is *not the harness's*: nothing carries the run label, and
:func:`others` snapshots it so a test can prove a run left every piece as it was.

A :class:`Shape` says how this staging cluster differs from the one the checks were
written on (the driver's DaemonSet under another release name, or no pod at all; no
pullable probe image; tenants holding devices down to no whole node free; cordoned and
tainted nodes; an identity without the disruptive role; PodSecurity ``restricted`` by default, a
LimitRange and a device quota in every new namespace (:mod:`.twin_policies`); two runs at once; a fault
while the run goes on: :data:`FAULTS`). ``Shape()`` is the fixed twin; ``tests/integration/twins`` draws
others from a seed and injects the faults.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_harness import data
from dra_harness.kube.types import Obj
from dra_harness.providers import driver_manifests
from dra_harness.providers.handle import NAMESPACE_ROLE, cluster_scoped_kinds
from dra_harness.providers import node_changes
from dra_harness.providers.sweep import NODE_LEASE_NAMESPACE
from dra_harness.providers.incluster_kwok import SHIPPED_ROLE as KWOK_ROLE
from dra_harness.providers.lock import LEASES
from dra_harness.kube.apply import apply_all
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import watch_until
from dra_harness.labels import DISRUPTABLE_LABEL, RUN_LABEL
from dra_harness.providers.embedded import twin_managed
from dra_harness.providers.embedded.cluster import DRIVER_NAME, LocalCluster
from dra_harness.components.images import DRIVER_IMAGE
from dra_harness.errors import ClusterError

RBAC = data.path("rbac", "dra-harness.yaml")
_RBAC_GROUP = "rbac.authorization.k8s.io"
CLUSTER_ROLE_BINDINGS = rest.Resource(_RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
ROLE_BINDINGS = rest.Resource(_RBAC_GROUP, "v1", "rolebindings", "RoleBinding", True)

OTHER_DRIVER = "other.example.com"
OTHER_NAMESPACE = "other-dra-driver"
CI_NAMESPACE = "dra-harness-ci"
INFRA_NAMESPACE = "platform-infra"
TENANT_PRIORITY_CLASS = "tenant-batch-high"
TENANT_DEVICE_CLASS = "tenant-large-gpus"
#: The example chart's generic plugin label, which the other driver's pods carry too.
GENERIC_LABELS = {"app.kubernetes.io/component": "kubeletplugin"}


#: Where a shape's driver runs: as the profile says, as a Helm release named otherwise, or not in a pod.
DRIVER_FORMS = ("profile-daemonset", "release-daemonset", "processes")
#: The release a user installed the driver under, which the profile does not know.
RELEASE_NAMESPACE, RELEASE_NAME = "acme-gpu", "acme-dra-kubeletplugin"
#: The label a driver's namespace carries where PodSecurity is enforced by default.
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}
#: What goes wrong while a shape's run goes on: one run's clock a minute ahead of the other's; the API server away
#: for a minute from the moment a drain cordons; pytest killed with SIGKILL mid-drain; every write of the run's
#: identity answered 429 by API Priority and Fairness from its last test's teardown on (its clean-up and sweep).
FAULTS = ("clock-skew", "api-away-mid-drain", "kill-mid-drain", "throttled-sweep")
MAINTENANCE_TAINT = {"key": "maintenance.example.com/reboot", "value": "pending", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Shape:
    """How a staging cluster differs from ours. Node positions index :meth:`ClusterSpec.all_node_names`
    (the simulated nodes, then the real ones)."""

    seed: int = 0
    driver: str = "profile-daemonset"
    shell_image: bool = True  # the run passes --shell-image; without it the public busybox cannot be pulled here
    tenants: tuple[tuple[int, int], ...] = ((2, 1), (2, 1))  # (node, devices) each tenant's pod holds
    cordoned: tuple[int, ...] = (1,)
    tainted: tuple[int, ...] = ()
    not_disruptable: tuple[int, ...] = (2,)
    disruptive_role: bool = True
    other_driver: bool = True
    pod_security: str = ""  # the level enforced on namespaces that set none ("": none)
    limit_range: bool = False  # every new namespace gets a LimitRange (twin_policies)
    device_quota: int = 0  # every new namespace gets a quota of this many devices (0: none)
    runs: int = 1  # runs of the harness at once
    simulated_nodes: int = 0  # the run may add this many simulated nodes (--allow-contention --simulated-nodes)
    tolerate_all: bool = False  # a tenant's DaemonSet that tolerates every taint (a log shipper)
    hostname_spread: bool = False  # a tenant's Deployment spread over hostnames with DoNotSchedule
    fault: str = ""  # one of FAULTS, injected while the run goes on ("": none)
    gpu_taint: int = -1  # a provider's taint on every node (twin_managed.PROVIDER_TAINTS index; -1: none)
    namespace_label: str = ""  # a policy refuses namespaces without this label ("": none)
    runtime_class: bool = False  # a policy refuses GPU pods without twin_managed.GPU_RUNTIME_CLASS
    registry: bool = False  # an image policy admits only twin_managed.MIRROR (its pause image there on real nodes)
    gpu_pool: int = 0  # the last N nodes are a labelled GPU pool, the others a system pool without devices (0: none)

    def describe(self) -> str:
        return (f"seed {self.seed}: driver {self.driver}, shell image {'given' if self.shell_image else 'none'}, "
                f"tenants {list(self.tenants)}, cordoned {list(self.cordoned)}, tainted {list(self.tainted)}, "
                f"not disruptable {list(self.not_disruptable)}, disruptive role {self.disruptive_role}, "
                f"other driver {self.other_driver}, pod security {self.pod_security or 'privileged'}, "
                f"limit range {self.limit_range}, device quota {self.device_quota or 'none'}, runs at once {self.runs}, "
                f"simulated nodes allowed {self.simulated_nodes}, tolerate-all DaemonSet {self.tolerate_all}, "
                f"hostname-spread Deployment {self.hostname_spread}, fault {self.fault or 'none'}, managed rules "
                f"{twin_managed.describe(self.taint, self.namespace_label, self.runtime_class, self.registry, self.gpu_pool)}")

    @property
    def taint(self) -> Obj | None:
        return twin_managed.PROVIDER_TAINTS[self.gpu_taint] if self.gpu_taint >= 0 else None


@dataclass(frozen=True)
class Twin:
    kubeconfig: Path  # the ServiceAccount's: the only way the run under test reaches the cluster
    expected_hardware: Path
    maintenance_node: str  # labelled disruptable, cordoned before any run ("" when the shape cordons none)
    tenant_node: str  # runs the tenants' pods; not labelled disruptable
    daemonset_nodes: tuple[str, ...]  # nodes whose devices the DaemonSet's plugin publishes
    shape: Shape = Shape()


def build(cluster: LocalCluster, workdir: Path | None = None, shape: Shape = Shape()) -> Twin:
    """Install the staging furniture of ``shape`` on a running embedded cluster of at least 3 KWOK nodes."""
    state = cluster.state()
    if state is None:
        raise ClusterError(f"cluster {cluster.name} is not up")
    spec = state.spec
    kwok = spec.node_names()
    if len(kwok) < 3:
        raise ClusterError("the staging twin needs at least 3 simulated nodes")
    kube = cluster.kube()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="dra-harness-twin-"))
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    workdir.chmod(0o700)
    nodes = spec.all_node_names()
    real = [n for n in nodes if n not in kwok]

    namespace = _install_driver(cluster, kube, real, shape.driver, shape.taint) if shape.driver != "processes" else None
    if shape.other_driver:
        _install_other_driver(kube, kwok)
    _install_tenants(kube, [(nodes[i], count) for i, count in shape.tenants])
    if shape.tolerate_all or shape.hostname_spread:
        _install_infra(kube, shape.tolerate_all, shape.hostname_spread)
    for i in shape.not_disruptable:
        kube.patch(rest.NODES, nodes[i], {"metadata": {"labels": {DISRUPTABLE_LABEL: None}}})
    for i in shape.tainted:
        kube.patch(rest.NODES, nodes[i], {"spec": {"taints": [MAINTENANCE_TAINT]}})
    for i in shape.cordoned:
        kube.patch(rest.NODES, nodes[i], {"spec": {"unschedulable": True}})
    gpu_nodes = nodes[-shape.gpu_pool:] if shape.gpu_pool else nodes  # the real nodes, last, are GPU nodes
    if shape.gpu_pool:
        twin_managed.system_pool(cluster, kube, gpu_nodes, [n for n in nodes if n not in gpu_nodes], namespace)
    if shape.taint:  # last: the pool's own pods (driver, tenants) ran before, as on a pool that was set up
        twin_managed.taint_pool(kube, gpu_nodes, shape.taint)
    kubeconfig = serviceaccount_kubeconfig(kube, cluster.kubeconfig, workdir / "sa-kubeconfig", contention=shape.simulated_nodes > 0,
                                           disruptive=shape.disruptive_role, driver_namespace=namespace)
    if spec.pod_security:
        _prove_pod_security(kube, spec.pod_security)
    if shape.namespace_label:  # last: the twin's own namespaces (its CI identity's) predate the policy
        twin_managed.require_namespace_label(kube, shape.namespace_label)
    if shape.runtime_class or shape.registry:  # the platform's namespaces, there before, are exempt
        exempt = [n["metadata"]["name"] for n in kube.list(rest.NAMESPACES)
                  if n["metadata"]["name"] != twin_managed.PROBE_NAMESPACE]
        if shape.registry:
            for node in real:
                twin_managed.mirror_images(cluster, node)
            twin_managed.admit_registry(kube, exempt)
        if shape.runtime_class:
            twin_managed.require_runtime_class(kube, exempt)
    hardware = workdir / "expected-hardware.yaml"
    hardware.write_text(yaml.safe_dump({
        "driver": DRIVER_NAME, "deviceClass": DRIVER_NAME,
        "nodes": {n: {"devices": spec.gpus_per_node} for n in gpu_nodes},
        "devices": {"attributes": {"model": "LATEST-GPU-MODEL", "driverVersion": "1.0.0"}, "capacity": {"memory": "80Gi"}},
    }))
    maintenance = nodes[shape.cordoned[0]] if shape.cordoned else ""
    tenant_node = nodes[shape.tenants[0][0]] if shape.tenants else ""
    return Twin(kubeconfig, hardware, maintenance, tenant_node, tuple(real) if namespace else (), shape)


def _install_driver(cluster: LocalCluster, kube: Kube, real: list[str], form: str, taint: Obj | None = None) -> str:
    """The example driver as its chart installs it, on every node; its namespace. On a real node it replaces
    the plugin process; on a KWOK node KWOK plays its pod while the process keeps publishing. The
    ``release-daemonset`` form installs it under a namespace and name the profile does not know."""
    state = cluster.state()
    assert state is not None
    for node in real:
        cluster.hand_driver_to_pod(node)
    kubelet_root, cdi_root = "/var/lib/kubelet", "/var/run/cdi"
    if real:
        from dra_harness.providers.embedded import realcluster

        rn = realcluster.node(cluster, real[0])
        kubelet_root, cdi_root = str(rn.kubelet_root), str(rn.cdi_dir)
    docs = driver_manifests.render_driver_manifests(DRIVER_IMAGE, kubelet_root, cdi_root=cdi_root)
    driver_manifests.for_embedded(docs, state.ports["apiserver"], state.spec.gpus_per_node)
    if taint:
        twin_managed.tolerating(docs, taint)
    for doc in docs:  # a driver mounts host paths: its namespace is exempt, as its install guide says
        if doc["kind"] == "Namespace":
            doc["metadata"].setdefault("labels", {}).update(PRIVILEGED)
    namespace = driver_manifests.NAMESPACE
    if form == "release-daemonset":
        namespace = RELEASE_NAMESPACE
        for doc in docs:
            _rename(doc, driver_manifests.NAMESPACE, RELEASE_NAMESPACE)
            if doc["kind"] == "DaemonSet":
                doc["metadata"]["name"] = RELEASE_NAME
    driver_manifests.apply(kube, docs)

    def whole(slices: list[Obj]) -> bool:
        per_node: dict[str, int] = {}
        for s in slices:
            per_node[s["spec"].get("nodeName", "")] = per_node.get(s["spec"].get("nodeName", ""), 0) + len(s["spec"].get("devices") or [])
        return all(per_node.get(n) == state.spec.gpus_per_node for n in state.spec.all_node_names())

    watch_until(kube, rest.PODS, lambda pods: len([p for p in pods if p["status"].get("phase") == "Running"])
                == len(state.spec.all_node_names()), 180, "the driver DaemonSet's pods to run on every node",
                namespace=namespace)
    watch_until(kube, rest.RESOURCE_SLICES, whole, 120, "every node's slices, the DaemonSet's included",
                field_selector=f"spec.driver={DRIVER_NAME}")
    return namespace


def _prove_pod_security(kube: Kube, level: str) -> None:
    """The shape holds: a pod as most charts write it (root, no seccomp profile) is refused in a namespace that
    sets no level (a server-side dry run)."""
    bare = {"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    try:
        kube.create(rest.PODS, bare, CI_NAMESPACE, dry_run=True)
    except rest.ApiError as e:
        if f'violates PodSecurity "{level}' in e.message:
            return
        raise ClusterError(f"the twin's PodSecurity default refused a bare pod for another reason: {e}") from e
    raise ClusterError(f"the twin's API server admitted a bare pod: PodSecurity {level} is not enforced by default")


def _rename(doc: Obj, old: str, new: str) -> None:
    """Move a manifest document from namespace ``old`` to ``new`` (its own namespace, subjects)."""
    meta = doc["metadata"]
    if doc["kind"] == "Namespace" and meta["name"] == old:
        meta["name"] = new
    if meta.get("namespace") == old:
        meta["namespace"] = new
    for subject in doc.get("subjects") or []:
        if subject.get("namespace") == old:
            subject["namespace"] = new


def _install_other_driver(kube: Kube, kwok: list[str]) -> None:
    """Another vendor's plugin: same generic labels, its own class and slice; never ours to touch."""
    kube.create(rest.NAMESPACES, {"metadata": {"name": OTHER_NAMESPACE, "labels": PRIVILEGED}})
    labels = {**GENERIC_LABELS, "app.kubernetes.io/name": "other-dra-driver"}
    kube.create(rest.DAEMON_SETS, {
        "metadata": {"name": "other-dra-driver-kubeletplugin", "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "plugin", "image": "registry.k8s.io/pause:3.10"}]}}},
    }, OTHER_NAMESPACE)
    kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": OTHER_DRIVER},
                                      "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{OTHER_DRIVER}'"}}]}})
    kube.create(rest.RESOURCE_SLICES, {
        "metadata": {"name": f"{kwok[0]}-other"},
        "spec": {"driver": OTHER_DRIVER, "nodeName": kwok[0],
                 "pool": {"name": kwok[0], "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"accel-{i}"} for i in range(2)]},
    })
    watch_until(kube, rest.PODS, lambda pods: len([p for p in pods if p["status"].get("phase") == "Running"]) == len(kwok),
                120, "the other driver's plugin pods", namespace=OTHER_NAMESPACE)


def _install_tenants(kube: Kube, holdings: list[tuple[str, int]]) -> None:
    """Teams with a pod holding ``count`` devices on ``node`` each, and a PriorityClass and DeviceClass of theirs."""
    kube.create(rest.PRIORITY_CLASSES, {"metadata": {"name": TENANT_PRIORITY_CLASS}, "value": 1000})
    kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": TENANT_DEVICE_CLASS}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]}})
    for tenant, (node, count) in zip(tenants(len(holdings)), holdings, strict=True):
        kube.create(rest.NAMESPACES, {"metadata": {"name": tenant, "labels": {"team": tenant}}})
        claim = builders.claim("training", "tenant", [builders.exactly("gpu", DRIVER_NAME, count)])
        pod = builders.pod("trainer", "tenant", claims={"gpu": {"claim": "training"}}, labels={"tenant": tenant},
                           node_name=node, priority_class=TENANT_PRIORITY_CLASS)
        for body in (claim, pod):
            body["metadata"]["labels"].pop(RUN_LABEL)  # not the harness's
        kube.create(rest.RESOURCE_CLAIMS, claim, tenant)
        kube.create(rest.PODS, pod, tenant)
    for tenant in tenants(len(holdings)):
        watch_until(kube, rest.PODS, lambda pods: bool(pods) and pods[0]["status"].get("phase") == "Running", 90,
                    f"{tenant}'s pod to run", namespace=tenant)


def _install_infra(kube: Kube, tolerate_all: bool, hostname_spread: bool) -> None:
    """A platform team's pods as shared clusters run them: a log shipper on every node whatever its taints, and a
    web Deployment whose replicas must be on different hosts. Simulated nodes must hurt neither."""
    kube.create(rest.NAMESPACES, {"metadata": {"name": INFRA_NAMESPACE, "labels": {"team": "infra", **PRIVILEGED}}})
    pause = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if tolerate_all:
        labels = {"app": "log-shipper"}
        kube.create(rest.DAEMON_SETS, {"metadata": {"name": "log-shipper"}, "spec": {
            "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 1, "containers": [pause]}}}},
            INFRA_NAMESPACE)
    if hostname_spread:
        labels = {"app": "web"}
        kube.create(rest.DEPLOYMENTS, {"metadata": {"name": "web"}, "spec": {
            "replicas": 2, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}}],
                "terminationGracePeriodSeconds": 1, "containers": [pause]}}}}, INFRA_NAMESPACE)
    want = (len(kube.list(rest.NODES)) if tolerate_all else 0) + (2 if hostname_spread else 0)
    watch_until(kube, rest.PODS, lambda pods: len([p for p in pods if p["status"].get("phase") == "Running"]) >= want,
                120, "the platform team's pods to run", namespace=INFRA_NAMESPACE)


def tenants(count: int) -> list[str]:
    """The tenants' namespaces: ``tenant-a``, ``tenant-b``, ..."""
    return [f"tenant-{chr(ord('a') + i)}" for i in range(count)]


#: Roles a user binds only to run contention (``--allow-contention``); the twin's staging run has none.
CONTENTION_ROLES = ("dra-harness-contention", "dra-harness-simulated-node-leases")
#: Roles a user binds only for ``--allow-disruptive``.
DISRUPTIVE_ROLES = ("dra-harness-disruptive", "dra-harness-driver-pods")


def serviceaccount_kubeconfig(kube: Kube, admin_kubeconfig: Path, path: Path, contention: bool = False,
                              disruptive: bool = True, driver_namespace: str | None = driver_manifests.NAMESPACE) -> Path:
    """A ServiceAccount bound to exactly the roles in deploy/rbac (the contention ones only with
    ``contention``, the disruptive ones only with ``disruptive``), and a kubeconfig holding its token.
    The driver-pods Role goes where the driver is (``driver_namespace``; None: no driver pods to delete)."""
    roles = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for role in roles:
        if role["metadata"].get("namespace") == driver_manifests.NAMESPACE and driver_namespace:
            role["metadata"]["namespace"] = driver_namespace
    if not disruptive:
        roles = [r for r in roles if r["metadata"]["name"] not in DISRUPTIVE_ROLES]
    elif driver_namespace is None:
        roles = [r for r in roles if r["metadata"]["name"] != "dra-harness-driver-pods"]
    apply_all(kube, roles)
    kube.create(rest.NAMESPACES, {"metadata": {"name": CI_NAMESPACE}})
    kube.create(rest.SERVICE_ACCOUNTS, {"metadata": {"name": "dra-harness"}}, CI_NAMESPACE)
    subject = [{"kind": "ServiceAccount", "name": "dra-harness", "namespace": CI_NAMESPACE}]
    for role in roles:
        name = role["metadata"]["name"]
        if role["kind"] not in ("ClusterRole", "Role") or name in (NAMESPACE_ROLE, KWOK_ROLE):
            continue  # the policy binds itself; the namespace and KWOK roles are the harness's to bind
        if name in CONTENTION_ROLES and not contention:
            continue
        if role["kind"] == "ClusterRole":
            kube.create(CLUSTER_ROLE_BINDINGS, {"metadata": {"name": f"ci-{name}"}, "subjects": subject,
                                                "roleRef": {"apiGroup": _RBAC_GROUP, "kind": "ClusterRole", "name": name}})
        else:
            kube.create(ROLE_BINDINGS, {"metadata": {"name": f"ci-{name}"}, "subjects": subject,
                                        "roleRef": {"apiGroup": _RBAC_GROUP, "kind": "Role", "name": name}},
                        role["metadata"]["namespace"])
    token = kube.request("POST", rest.SERVICE_ACCOUNTS.path(CI_NAMESPACE, "dra-harness", "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200},
    })["status"]["token"]
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ci",
        "clusters": [{"name": "staging", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "dra-harness", "user": {"token": token}}],
        "contexts": [{"name": "ci", "context": {"cluster": "staging", "user": "dra-harness"}}],
    }))
    return path


def others(kube: Kube) -> dict[str, Any]:
    """Everything on the twin that is not the harness's, by UID and spec, plus node state.

    The driver's own plugin pods are left out: a disruptive run may replace them (that is
    its job); their DaemonSet is in.
    """
    out: dict[str, Any] = {}
    teams = [n["metadata"]["name"] for n in kube.list(rest.NAMESPACES, label_selector="team")]
    for ns in (*teams, OTHER_NAMESPACE, CI_NAMESPACE):
        for res in (rest.PODS, rest.RESOURCE_CLAIMS, rest.DAEMON_SETS, rest.SERVICE_ACCOUNTS):
            for o in kube.list(res, ns):
                out[f"{res.kind}/{ns}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o.get("spec"))
    for o in kube.list(rest.DAEMON_SETS, driver_manifests.NAMESPACE) + kube.list(rest.DAEMON_SETS, RELEASE_NAMESPACE):
        out[f"DaemonSet/{o['metadata']['namespace']}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o.get("spec"))
    for res in (rest.PRIORITY_CLASSES, rest.DEVICE_CLASSES):
        for o in kube.list(res):
            if RUN_LABEL not in (o["metadata"].get("labels") or {}):
                out[f"{res.kind}/{o['metadata']['name']}"] = (o["metadata"]["uid"], o.get("spec", o.get("value")))
    for n in kube.list(rest.NODES):
        labels = {k: v for k, v in (n["metadata"].get("labels") or {}).items()}
        taints = [t for t in n["spec"].get("taints") or [] if not t["key"].startswith("node.kubernetes.io/")]
        out[f"Node/{n['metadata']['name']}"] = (n["metadata"]["uid"], bool(n["spec"].get("unschedulable")), labels, taints)
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two :func:`others` snapshots, one line each."""
    lines = [f"gone: {k}" for k in sorted(set(before) - set(after))]
    lines += [f"new: {k}" for k in sorted(set(after) - set(before))]
    lines += [f"changed: {k}" for k in sorted(set(before) & set(after)) if before[k] != after[k]]
    return lines


def leftovers(kube: Kube) -> list[str]:
    """Anything a run of the harness may create that is still there (every run, any run id)."""
    left = [f"namespace/{n['metadata']['name']}" for n in kube.list(rest.NAMESPACES, label_selector=RUN_LABEL)]
    for res in cluster_scoped_kinds(kube):  # the kinds the sweep deletes
        # The twin has no DeviceTaintRule of its own: any rule left, labelled or not, is a run's.
        selector = None if res.kind == "DeviceTaintRule" else RUN_LABEL
        left += [f"{res.kind}/{o['metadata']['name']}" for o in kube.list(res, label_selector=selector)]
    left += [f"Lease/{o['metadata']['name']}" for o in kube.list(LEASES, "default", label_selector=RUN_LABEL)]
    nodes = {n["metadata"]["name"] for n in kube.list(rest.NODES)}  # a simulated node's lease outliving it
    left += [f"Lease {NODE_LEASE_NAMESPACE}/{name}" for o in kube.list(LEASES, NODE_LEASE_NAMESPACE)
             if (name := o["metadata"]["name"]) not in nodes]
    # Node labels and taints are compared whole by :func:`others`; here only a run's own label.
    left += [f"label {RUN_LABEL} on node {n['metadata']['name']}" for n in kube.list(rest.NODES, label_selector=RUN_LABEL)]
    left += [f"cordon of run {run} on node {n['metadata']['name']}" for n in kube.list(rest.NODES)
             if (run := node_changes.cordoned_by(n))]
    return left
