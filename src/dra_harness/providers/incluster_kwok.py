"""Simulated nodes on a cluster we did not create, by a KWOK that runs in that cluster as a Deployment.

Why: the local form (:mod:`.simulated_nodes`) needs the machine running the harness to reach
the API server for the whole run, and its KWOK lives only as long as that process; a CI runner
may be far from the cluster. In the cluster, KWOK talks to its own API server from a pod, as its
namespace's ``default`` ServiceAccount bound to only what KWOK needs (upstream's ``kwok-controller``
ClusterRole, less KWOK's own CRDs, which we do not enable): a ClusterRole of the run's own where the
harness may create one (an admin), else ``dra-harness-kwok`` from deploy/rbac, which the contention
role may bind (``bind`` on that role only; the admission policy lets it bind nothing else, to no
one but a run's KWOK). So a ServiceAccount holding deploy/rbac's roles needs no admin here either.
It manages exactly the nodes annotated with this run's tag, as the local form does, with the same
pod stages: the run's (:mod:`.kwok_stages`, limited to the run's own pods), from a ConfigMap in its
namespace rather than the image's shipped ones, which would fake every pod on the nodes.

The image: ``dra-harness.local/kwok:v<version>`` (:func:`dra_harness.components.images.kwok_image`),
built here from KWOK's module; the cluster's nodes must be able to pull it or have it
preloaded (``--kwok-image`` names it, ``--kwok-node-selector`` where its pod may run: a real
node, never one of the simulated ones). Where the kubeconfig reaches the API server on loopback
(a cluster on this host), the pod uses the host's network and that address, as the embedded
cluster's DaemonSet driver does. Everything carries the run's label: the namespace (with the
Deployment), the binding and the run's own ClusterRole; the run's sweep removes them
if the run dies first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from urllib.parse import urlparse

from dra_harness.errors import ClusterError, one_line
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitError, wait_for_deletion, watch_until
from dra_harness.labels import RUN_LABEL, SIMULATED_NODE_LABEL
from dra_harness.labels import KWOK_ANNOTATION
from dra_harness.providers import kwok_stages
from dra_harness.providers.handle import grant_namespace_role
from dra_harness.providers.simulated_nodes import ANNOTATION

log = logging.getLogger(__name__)
READY_DEADLINE_S = 120.0
#: deploy/rbac's copy of :data:`RULES`, bound when the harness may not create a ClusterRole.
SHIPPED_ROLE = "dra-harness-kwok"
STOP_DEADLINE_S = 90.0
#: Where the run's stages (a ConfigMap of the KWOK's name) are mounted in its pod.
STAGES_DIR = "/etc/kwok-run"
#: Upstream's ``kwok-controller`` role (kustomize/rbac/role.yaml, v0.8.0) without its kwok.x-k8s.io CRDs.
RULES = [
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes/status", "pods/status"], "verbs": ["patch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "list", "patch", "update", "watch"]},
]


@dataclass
class ClusterKwok:
    """A KWOK Deployment managing the nodes annotated ``ANNOTATION=<tag>``."""

    kube: Kube
    tag: str
    run_id: str
    image: str
    node_selector: dict[str, str] = field(default_factory=dict)
    ready_deadline: float = READY_DEADLINE_S
    #: The ClusterRole bound to KWOK: the run's own (:attr:`name`) or :data:`SHIPPED_ROLE`.
    role: str = ""

    @property
    def annotation(self) -> tuple[str, str]:
        return ANNOTATION, self.tag

    @property
    def name(self) -> str:
        return f"dra-harness-kwok-{self.tag}"

    def _meta(self, namespace: str | None = None) -> Obj:
        meta: Obj = {"name": self.name, "labels": {RUN_LABEL: self.run_id}}
        if namespace:
            meta["namespace"] = namespace
        return meta

    def deployment(self) -> Obj:
        args = [f"--config={STAGES_DIR}/stages.yaml", f"--manage-nodes-with-annotation-selector={ANNOTATION}={self.tag}",
                "--cidr=10.245.0.0/16", "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40",
                "--server-address=127.0.0.1:0"]
        container: Obj = {"name": "kwok", "image": self.image, "imagePullPolicy": "IfNotPresent", "args": args,
                          "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                          "volumeMounts": [{"name": "stages", "mountPath": STAGES_DIR, "readOnly": True}]}
        pod: Obj = {"serviceAccountName": "default", "containers": [container], "terminationGracePeriodSeconds": 5,
                    "volumes": [{"name": "stages", "configMap": {"name": self.name}}]}
        if self.node_selector:
            pod["nodeSelector"] = dict(self.node_selector)
        # Never on a simulated node: a KWOK there would only pretend to run (KWOK's convention labels them type=kwok).
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]},
                                  {"key": SIMULATED_NODE_LABEL, "operator": "DoesNotExist"}]}]}}}
        server = urlparse(self.kube.host)
        if server.hostname in ("127.0.0.1", "localhost", "::1"):
            # The API server listens on this host's loopback: only the host's network reaches it.
            pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
            container["env"] = [{"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
                                {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port or 443)}]
        labels = {"app.kubernetes.io/name": "kwok", RUN_LABEL: self.run_id}
        return {"metadata": self._meta(self.name), "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "kwok"}},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": pod}}}

    def stages(self) -> Obj:
        """The ConfigMap of the run's stages, which the pod reads as its ``--config``."""
        return {"metadata": self._meta(self.name), "data": {"stages.yaml": kwok_stages.for_run(self.run_id)}}

    def start(self) -> ClusterKwok:
        kube = self.kube
        kube.create(rest.NAMESPACES, {"metadata": self._meta()})
        try:
            grant_namespace_role(kube, self.name)  # the Deployment is the harness's to create there
            kube.create(rest.CONFIG_MAPS, self.stages(), self.name)
            self.role = self._role()
            kube.create(rest.CLUSTER_ROLE_BINDINGS, {
                "metadata": self._meta(),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.role},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": self.name}]})
            kube.create(rest.DEPLOYMENTS, self.deployment(), self.name)
        except rest.ApiError as e:
            self.stop()
            if e.status != 403:
                raise
            raise ClusterError(f"in-cluster KWOK: {one_line(e)}; a ServiceAccount needs deploy/rbac/dra-harness.yaml "
                               f"applied and its dra-harness-contention role bound (--allow-contention)") from None
        try:
            watch_until(kube, rest.PODS, lambda pods: any(_running(p) for p in pods), self.ready_deadline,
                        f"the KWOK Deployment's pod ({self.image}) to run", namespace=self.name, why=_describe)
        except WaitError as e:
            self.stop()
            raise ClusterError(f"in-cluster KWOK did not start: {one_line(e)}") from None
        pod = self._pod()
        node = self.kube.get(rest.NODES, pod["spec"]["nodeName"]) if pod else None
        if node is None or KWOK_ANNOTATION in (node["metadata"].get("annotations") or {}):
            self.stop()
            raise ClusterError(f"in-cluster KWOK landed on {pod['spec']['nodeName'] if pod else 'no node'}, a simulated "
                               "node: nothing runs there; give --kwok-node-selector a real node's label")
        return self

    def _role(self) -> str:
        """The run's own ClusterRole where the harness may create one, else deploy/rbac's :data:`SHIPPED_ROLE`."""
        try:
            self.kube.create(rest.CLUSTER_ROLES, {"metadata": self._meta(), "rules": RULES})
            return self.name
        except rest.ApiError as e:
            if e.status != 403:
                raise
            log.info("in-cluster KWOK: may not create a ClusterRole (%s); binding %s", one_line(e), SHIPPED_ROLE)
            return SHIPPED_ROLE

    def _pod(self) -> Obj | None:
        pods = self.kube.list(rest.PODS, self.name)
        return pods[0] if pods else None

    def check(self) -> None:
        """Raise with the pod's state and last log line if KWOK is not running."""
        pod = self._pod()
        if pod is None or not _running(pod):
            raise ClusterError(f"the in-cluster KWOK is not running ({_describe([pod] if pod else [])}): {self.last_line()}")

    def last_line(self) -> str:
        pod = self._pod()
        if pod is None:
            return "no pod"
        try:
            text = self.kube.raw(f"/api/v1/namespaces/{self.name}/pods/{pod['metadata']['name']}/log?tailLines=1")
        except (rest.ApiError, rest.Unreachable) as e:
            return f"no log ({e})"
        return text.strip()[-300:] or "no output"

    def stop(self) -> None:
        """The binding and role first (nothing may act as KWOK once it is going), then the namespace with the rest."""
        try:
            self.kube.delete(rest.CLUSTER_ROLE_BINDINGS, self.name)
        except rest.ApiError as e:
            if e.status != 403:  # may not delete one: it could not have made one either
                raise
        if self.role == self.name:  # deploy/rbac's role is not ours to remove
            self.kube.delete(rest.CLUSTER_ROLES, self.name)
        self.kube.delete(rest.NAMESPACES, self.name)
        try:
            wait_for_deletion(self.kube, rest.NAMESPACES, self.name, STOP_DEADLINE_S)
        except WaitError as e:  # deletion is requested; the run's sweep finds what is left by its label
            log.warning("in-cluster KWOK: %s", one_line(e))


def _running(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def _describe(pods: list[Obj]) -> str:
    out = []
    for p in pods:
        waiting = [c["state"]["waiting"].get("reason", "") for c in p.get("status", {}).get("containerStatuses") or []
                   if "waiting" in c.get("state", {})]
        out.append(f"{p['metadata']['name']} on {p['spec'].get('nodeName') or 'no node'}: {p.get('status', {}).get('phase')}"
                   + (f" ({', '.join(waiting)})" if waiting else ""))
    return "; ".join(out) or "no pod yet"
