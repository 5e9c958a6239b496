"""One handle on the cluster under test: API access, what it should hold, what we may do to it.

Suites get a :class:`ClusterHandle` whatever the provider; what the provider can do
(stop a node's driver, add simulated nodes) the handle answers by asking it
(:class:`~dra_harness.providers.abilities.ProviderAbilities`), and suites that need an action the
provider lacks skip with that reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from kubernetes import client

from dra_harness.kube import builders, kueue_api, rest
from dra_harness.kube.placement import keeps_off
from dra_harness.kube.pods import allocated_devices, pod_ready
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import watch_until
from dra_harness.labels import DISRUPTABLE_LABEL, KEPT_LABEL, KWOK_ANNOTATION, RUN_LABEL, run_selector
from dra_harness.retrying import NotYet, until
from dra_harness.components.images import PUBLIC_PROBE_IMAGE
from dra_harness.providers.abilities import ProviderAbilities
from dra_harness.providers.hardware import Hardware
from dra_harness.providers.profiles import DriverProfile


log = logging.getLogger(__name__)

T = TypeVar("T")
#: Cluster-scoped kinds a test may create; the sweep deletes those carrying the run label
#: (DeviceTaintRules too, where served: a NoExecute rule left behind evicts real workloads).
# Swept in reverse: an in-cluster KWOK's binding and role first, the driver webhook's configuration, a policy's
# binding before the policy, and both before the classes it guards.
CLUSTER_SCOPED = (rest.RESOURCE_SLICES, rest.DEVICE_CLASSES, rest.PRIORITY_CLASSES,
                  rest.VALIDATING_ADMISSION_POLICIES, rest.VALIDATING_ADMISSION_POLICY_BINDINGS,
                  rest.VALIDATING_WEBHOOK_CONFIGURATIONS, rest.CLUSTER_ROLES, rest.CLUSTER_ROLE_BINDINGS)


def _kueue_kinds(kube: Kube) -> list[rest.Resource]:
    # Kueue's release installs its CRDs together: one discovery call tells whether all three are served.
    first = kueue_api.CLUSTER_SCOPED[0]
    served = rest.served(kube, kueue_api.GROUP, first.plural, first.kind, (kueue_api.VERSION,))
    return list(reversed(kueue_api.CLUSTER_SCOPED)) if served else []  # deleted in their own order (swept in reverse)


def _taint_kinds(kube: Kube) -> list[rest.Resource]:
    taints = rest.device_taint_rules(kube)
    return [taints] if taints else []


#: Cluster-scoped kinds a run may create only where the server serves them: (what, the kinds served). Each asks
#: discovery, which raises while the server cannot answer (:func:`~dra_harness.kube.rest.served`): a sweep then
#: asks again, and names what it could not look at.
OPTIONAL_KINDS: tuple[tuple[str, Callable[[Kube], list[rest.Resource]]], ...] = (
    ("Kueue's kinds", _kueue_kinds), ("DeviceTaintRule", _taint_kinds))


def cluster_scoped_kinds(kube: Kube) -> list[rest.Resource]:
    """Every cluster-scoped kind a run may create on this cluster (Kueue's where its API is served, DeviceTaintRule
    last where served); raises while discovery cannot be answered."""
    return [*CLUSTER_SCOPED, *(res for _, find in OPTIONAL_KINDS for res in find(kube))]


@dataclass
class ClusterHandle:
    provider: ProviderAbilities
    kube: Kube
    kubeconfig: Path
    run_id: str
    expected: Hardware
    profile: DriverProfile
    notes: list[str] = field(default_factory=list)
    shell_image: str | None = None
    #: Where ``expected`` comes from: the user's file, the hardware the harness itself configured
    #: (provider), or what the cluster published at the start (observed: the cluster under test
    #: is its own baseline, so inventory checks against it establish nothing).
    expected_source: Literal["file", "provider", "observed"] = "provider"
    #: Nodes no container check may pick, and why (the preflight found the probe image cannot run there).
    avoid: dict[str, str] = field(default_factory=dict)

    @property
    def driver(self) -> str:
        return self.profile.driver

    @property
    def device_class(self) -> str:
        return self.profile.device_class

    def typed(self, api: Callable[[client.ApiClient], T]) -> T:
        """A generated typed API (e.g. ``kubernetes.client.ResourceV1Api``) on this cluster's connection.

        Suites use the dict-based :attr:`kube` so that fields newer than the client
        library still show up in evidence; typed APIs are here for user extensions.
        """
        return api(client.ApiClient(self.kube.configuration))

    # -- creating objects (all carry the run label) ------------------------------------
    def request(self, name: str = "gpu", count: int = 1, selectors: list[str] | None = None, **kw) -> dict:
        """An ``exactly`` request for devices of the profile's DeviceClass."""
        return builders.exactly(name, kw.pop("device_class", self.device_class), count, selectors, **kw)

    def template(self, namespace: str, name: str, *requests: dict, **kw) -> dict:
        body = builders.claim_template(name, self.run_id, list(requests) or [self.request()], **kw)
        return self.kube.create(rest.RESOURCE_CLAIM_TEMPLATES, body, namespace)

    def claim(self, namespace: str, name: str, *requests: dict, **kw) -> dict:
        body = builders.claim(name, self.run_id, list(requests) or [self.request()], **kw)
        return self.kube.create(rest.RESOURCE_CLAIMS, body, namespace)

    def pod(self, namespace: str, name: str, template: str | None = None, claim: str | None = None, **kw) -> dict:
        """A pod using one template claim or one shared claim (pod-level name ``gpu``), or ``claims=``."""
        claims = kw.pop("claims", None) or (
            {"gpu": {"template": template}} if template else {"gpu": {"claim": claim}} if claim else {}
        )
        return self.kube.create(rest.PODS, builders.pod(name, self.run_id, claims=claims, **kw), namespace)

    # -- reading the cluster's devices -----------------------------------------------------
    def published(self) -> dict[tuple[str, str, str], dict]:
        """(driver, pool, device) -> {"node", "device"} for every device of the profile's driver."""
        out = {}
        for s in self.kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={self.driver}"):
            for d in s["spec"].get("devices") or []:
                out[(self.driver, s["spec"]["pool"]["name"], d["name"])] = {"node": s["spec"].get("nodeName"), "device": d}
        return out

    def other_runs_namespaces(self) -> set[str]:
        """Namespaces another harness run created: their claims come and go while this run checks."""
        selector = f"{RUN_LABEL},{RUN_LABEL}!={self.run_id}"
        return {n["metadata"]["name"] for n in self.kube.list(rest.NAMESPACES, label_selector=selector)}

    def allocations(self, *, other_runs: bool = True) -> dict[tuple[str, str, str], list[str]]:
        """Device -> every claim (``ns/name``) in the cluster whose allocation holds it.

        ``other_runs=False`` leaves out claims in other runs' namespaces: a device this run freed
        may be taken by a concurrent run a moment later, which says nothing about this run.
        """
        skip = set() if other_runs else self.other_runs_namespaces()
        held: dict[tuple[str, str, str], list[str]] = {}
        for c in self.kube.list(rest.RESOURCE_CLAIMS):
            if c["metadata"]["namespace"] in skip:
                continue
            for dev in allocated_devices(c):
                held.setdefault(dev.key, []).append(f"{c['metadata']['namespace']}/{c['metadata']['name']}")
        return held

    def free_devices(self, node: str | None = None) -> dict[str, list[dict]]:
        """Node -> its published devices nobody's claim holds now (``node``: that node only), by device name."""
        held = self.allocations()
        out: dict[str, list[dict]] = {}
        for key, where in sorted(self.published().items()):
            if key not in held and where["node"] and node in (None, where["node"]):
                out.setdefault(where["node"], []).append(where["device"])
        return out

    @property
    def controls_driver(self) -> bool:
        """Whether the harness itself starts and stops the driver (the embedded cluster's plugin
        processes). Elsewhere a DaemonSet replaces a stopped driver within seconds, so checks that
        need the driver to *stay* gone cannot run there."""
        return self.provider.controls_driver

    def cdi_dir(self, node: str) -> Path | None:
        """Where the driver on ``node`` writes CDI specs, where the harness can read them; None elsewhere."""
        return self.provider.cdi_dir(node)

    def driver_pods(self, node: str | None = None) -> list[dict] | None:
        """The pods of the driver's kubelet-plugin DaemonSet (on ``node``), found by owner.

        None when the profile names no DaemonSet or it does not exist: then the harness cannot
        tell which pods are the driver's, and never guesses from a label other drivers share.
        """
        namespace, name = self.profile.driver_daemonset
        if not name:
            return None
        try:
            daemonset = self.kube.get(rest.DAEMON_SETS, name, namespace)
        except rest.NotFound:
            return None
        uid = daemonset["metadata"]["uid"]
        pods = self.kube.list(rest.PODS, namespace, field_selector=f"spec.nodeName={node}" if node else None)
        return [p for p in pods if any(o.get("uid") == uid and o.get("controller")
                                       for o in p["metadata"].get("ownerReferences") or [])]

    def driver_log(self, node: str, lines: int = 40) -> str:
        """The last lines the node's driver wrote: its process's log (embedded cluster), else its
        DaemonSet pod's containers' logs through the API server; "" where neither can be told."""
        text = self.provider.driver_log(node, lines)
        if text or self.controls_driver:
            return text
        out = []
        for pod in self.driver_pods(node) or []:
            meta = pod["metadata"]
            for ctr in pod["spec"]["containers"]:
                try:
                    log = self.kube.raw(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"
                                        f"?container={ctr['name']}&tailLines={lines}")
                except (rest.ApiError, rest.Unreachable) as e:
                    log = f"unavailable: {e}"
                out.append(f"== {meta['name']}/{ctr['name']}\n{log.rstrip()}")
        return "\n".join(out)

    def driver_running(self, node: str) -> bool | None:
        """Whether the node's driver runs: its process (embedded cluster) or a Ready plugin pod
        of its DaemonSet. None when it cannot be told (no DaemonSet known)."""
        running = self.provider.driver_running(node)
        if running is not None:
            return running
        pods = self.driver_pods(node)
        if pods is None:
            return None
        return any(pod_ready(p) for p in pods)

    def device_taint_rules(self) -> rest.Resource | None:
        """DeviceTaintRule of the newest served version, or None where none is served."""
        return rest.device_taint_rules(self.kube)

    def schedulable_nodes(self) -> list[str]:
        """Nodes the scheduler may place the harness's device pods on, sorted: not cordoned, no NoSchedule or
        NoExecute taint but those the cluster's rules tolerate (``--toleration``: a managed GPU pool's), and selected
        by the rules' node selector (a staging node tainted for maintenance takes none of them)."""
        device_pod = self.kube.rules.shape("Pod", {"spec": {"resourceClaims": [{"name": "gpu"}]}})["spec"]
        return sorted(n["metadata"]["name"] for n in self.kube.list(rest.NODES) if keeps_off(device_pod, n) is None)

    def runs_containers(self) -> bool:
        """Whether any node runs real containers (a kubelet, not KWOK)."""
        return bool(self.container_nodes())

    def container_nodes(self) -> list[str]:
        """Nodes that run real containers (a kubelet, not KWOK) and have the driver's devices, sorted.

        A kind or kubeadm control plane runs real containers too, but publishes no devices
        (and is tainted): a probe pinned there would only wait.
        """
        return sorted(
            n["metadata"]["name"] for n in self.kube.list(rest.NODES)
            if KWOK_ANNOTATION not in (n["metadata"].get("annotations") or {}) and self.expected.nodes.get(n["metadata"]["name"])
            and n["metadata"]["name"] not in self.avoid
        )

    def simulated_because(self, node: str) -> str:
        """Why ``node``, chosen for a check that needs a kubelet, is not one of :meth:`container_nodes`: said in the
        check's skip, with the real nodes passed over and why (a transient taint or slice gap shows there)."""
        real = {n["metadata"]["name"]: n for n in self.kube.list(rest.NODES)
                if KWOK_ANNOTATION not in (n["metadata"].get("annotations") or {})}
        publishing = {v["node"] for v in self.published().values()}
        schedulable = set(self.schedulable_nodes())

        def why(name: str) -> str:
            if name in self.avoid:
                return self.avoid[name]
            if not self.expected.nodes.get(name):
                return "no devices expected there"
            if name not in publishing:
                return "publishes nothing now"
            if (real[name]["metadata"].get("labels") or {}).get(DISRUPTABLE_LABEL) != "true":
                return f"not labelled {DISRUPTABLE_LABEL}=true"
            return "cordoned or tainted now" if name not in schedulable else "eligible"
        passed = [f"{name}: {why(name)}" for name in sorted(real) if name != node]
        return f"{node} is {'a real node passed over' if node in real else 'simulated (KWOK)'}" + \
            (f"; real nodes passed over: {'; '.join(passed)}" if passed else "")

    @property
    def probe_image(self) -> str:
        """An image with a shell for container-level checks: ``--shell-image`` (an air-gapped
        cluster's mirror), else the one imported on the embedded cluster's real nodes, else busybox."""
        return self.shell_image or self.provider.workload_image or PUBLIC_PROBE_IMAGE

    def server_version(self) -> str:
        return self.kube.request("GET", "/version")["gitVersion"]

    def create_namespace(self, name: str, labels: dict[str, str]) -> None:
        """A namespace of this run. On a cluster the harness did not create, it then binds itself
        ``dra-harness-namespace`` there (deploy/rbac): its writes are granted per namespace it
        owns, never cluster-wide."""
        self.kube.create(rest.NAMESPACES, {"metadata": {"name": name, "labels": labels}})
        if not self.provider.harness_operated:
            grant_namespace_role(self.kube, name)
        for source, secret in self.kube.rules.image_pull_secrets:  # --image-pull-secret, once the grant lets us
            # Type and data only (the client logs no body), labelled so the sweep finds a copy left behind.
            original = self.kube.get(rest.SECRETS, secret, source)
            self.kube.create(rest.SECRETS, {"metadata": {"name": secret, "labels": {RUN_LABEL: self.run_id}},
                                            "type": original.get("type"), "data": original.get("data") or {}}, name)

    def delete_namespace(self, name: str) -> None:
        """Free a test's devices now and delete its namespace in the background.

        The namespace controller waits a fixed 5 s before deleting any content, so
        workloads, pods and claims are deleted directly first; :func:`sweep_run` waits for
        the namespaces themselves once, at the end of the run.
        """
        for res in (rest.DEPLOYMENTS, rest.JOBS):
            self.kube.delete_collection(res, name)
        self.kube.delete_collection(rest.PODS, name)  # graceful: see builders.GRACE_S
        self.kube.delete_collection(rest.RESOURCE_CLAIMS, name)
        self.kube.delete(rest.NAMESPACES, name)

    def wait_until_quiet(self, timeout: float = 120.0) -> None:
        """Wait until no claim of this run holds a device (claims in kept namespaces aside).

        Another run's claims are another workload's, like a tenant's (the preflight counts the devices they hold as
        held by others): waiting for claims of *any* run made every exclusive test time out and FAIL behind a
        ``dra-harness canary`` held across an upgrade, or a killed run's leftovers. Only those already being
        deleted are waited for too, on a cluster other runs share: the last test of another run, which the cluster
        lock let end just now, releases its devices a moment later.
        """
        kept = {n["metadata"]["name"] for n in self.kube.list(rest.NAMESPACES, label_selector=f"{KEPT_LABEL}=true")}

        def holding(claims: list[dict]) -> list[dict]:
            return [c for c in claims if c["metadata"]["namespace"] not in kept and c.get("status", {}).get("allocation")
                    and (c["metadata"].get("labels", {}).get(RUN_LABEL) == self.run_id or c["metadata"].get("deletionTimestamp"))]

        shared = self.provider.outlives_run
        watch_until(self.kube, rest.RESOURCE_CLAIMS, lambda claims: not holding(claims), timeout,
                    f"claims of earlier tests to release their devices (run {self.run_id}"
                    + (", and other runs' claims being deleted)" if shared else ")"),
                    label_selector=RUN_LABEL if shared else run_selector(self.run_id),
                    why=lambda claims: "still allocated: " + ", ".join(
                        f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in holding(claims)[:10]))


#: The ClusterRole with a test's in-namespace writes, bound by the harness in each namespace it creates.
NAMESPACE_ROLE = "dra-harness-namespace"
ROLE_BINDINGS = rest.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)


def grant_namespace_role(kube: Kube, namespace: str, timeout: float = 15.0) -> None:
    """Bind :data:`NAMESPACE_ROLE` to ourselves in ``namespace`` and wait until it takes effect.

    An identity that may not bind it (no ``bind`` on that role) but already may write there
    (cluster-admin) is fine: what matters is that a pod may be created, which is asked of the
    API server (SelfSubjectAccessReview) rather than assumed.
    """
    user = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})["status"]["userInfo"]
    try:
        kube.create(ROLE_BINDINGS, {
            "metadata": {"name": "dra-harness"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user["username"]}],
        }, namespace)
    except rest.ApiError as e:
        if e.status not in (403, 404):  # 404: the role is not installed; an admin needs none
            raise

    def allowed() -> None:  # an RBAC binding takes effect when the API server's authorizer cache catches up
        review = kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "pods"}}})
        if not review["status"].get("allowed"):
            raise NotYet(f"{user['username']} may not create pods in {namespace} yet")

    try:
        until(time.monotonic() + timeout, 0.2, log, f"the namespace role to take effect in {namespace}")(allowed)
    except NotYet:
        raise rest.ApiError(403, "Forbidden", f"{user['username']} may not create pods in its own namespace "
                            f"{namespace}: bind the roles in deploy/rbac/dra-harness.yaml ({NAMESPACE_ROLE} "
                            "needs the `bind` grant of role dra-harness)") from None
