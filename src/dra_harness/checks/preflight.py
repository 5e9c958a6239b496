"""What this cluster lets us test, established before any check judges it.

A check written on the cluster we built assumes what held there: an image it can pull,
a driver DaemonSet of the name the profile knows, whole nodes free, every node
schedulable. On a cluster someone else built each assumption can be false, and a check
that finds it false then blames the product. The preflight asks first, in about 30 s, and
writes the answers as facts with their evidence (``preflight.json``): the identity's
rights for every verb the suites use, the driver's kubelet-plugin pods found by what they
are, whether the probe image can be pulled on each node that runs containers and what
admission does to a probe pod, and per node the devices published, held by others and
free. Checks declare what they need (:mod:`dra_harness.checks.needs`) and are "not
established" with the missing fact, at once, before they create anything.

Capacity is a snapshot of what *others* hold at the start: this run's own tests take
and free devices all the time, and the exclusive marker, not this file, keeps them apart.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from dra_harness.checks import cel, preflight_hints
from dra_harness.errors import HarnessError
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.kube import builders, podstates, rest
from dra_harness.kube.placement import keeps_off
from dra_harness.kube.pods import allocated_devices, blocking_taints, only_conditions_block, wait_nodes_ready
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.labels import DISRUPTABLE_LABEL, KWOK_ANNOTATION, RUN_LABEL, run_selector
from dra_harness.providers.handle import ClusterHandle

SCHEMA = 1
#: The run directory's copy of the facts, which the report shows.
FILE = "preflight.json"
#: How long the image probe may take on each node: a pull still going then is "unknown", never "not pullable".
IMAGE_PROBE_S = 20.0
#: How old the probe namespace is, at least, when its quotas are read on a cluster the run did not create: a policy
#: engine furnishes a namespace moments after it exists, and with no node to probe the read came first (a twin's run
#: under load then judged against a quota it never saw).
POLICY_GRACE_S = 3.0
#: How long a node with devices that is not Ready, for no cordon or owner's taint, may take to come back before the
#: facts are taken: a kubelet reports NotReady when its runtime did not answer for 30 s, which load alone can cause
#: (a CI run's real node was passed over all run long for one such moment at its preflight).
NOT_READY_GRACE_S = 30.0
#: Rights the suites use: name -> (verb, group, resource, subresource, where: "cluster" | "driver" | "lease").
RIGHTS: dict[str, tuple[str, str, str, str, str]] = {
    "list-resource-slices": ("list", "resource.k8s.io", "resourceslices", "", "cluster"),
    "list-resource-claims": ("list", "resource.k8s.io", "resourceclaims", "", "cluster"),
    "list-nodes": ("list", "", "nodes", "", "cluster"),
    "list-pods": ("list", "", "pods", "", "cluster"),
    "create-namespaces": ("create", "", "namespaces", "", "cluster"),
    "create-role-bindings": ("create", "rbac.authorization.k8s.io", "rolebindings", "", "cluster"),
    "create-priority-classes": ("create", "scheduling.k8s.io", "priorityclasses", "", "cluster"),
    "create-device-classes": ("create", "resource.k8s.io", "deviceclasses", "", "cluster"),
    "create-admission-policies": ("create", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "cluster"),
    "create-subject-access-reviews": ("create", "authorization.k8s.io", "subjectaccessreviews", "", "cluster"),
    "create-device-taint-rules": ("create", "resource.k8s.io", "devicetaintrules", "", "cluster"),
    "patch-nodes": ("patch", "", "nodes", "", "cluster"),
    "evict-pods": ("create", "", "pods", "eviction", "cluster"),
    "node-proxy": ("get", "", "nodes", "proxy", "cluster"),
    "create-nodes": ("create", "", "nodes", "", "cluster"),
    "delete-driver-pods": ("delete", "", "pods", "", "driver"),
    "create-leases": ("create", "coordination.k8s.io", "leases", "", "lease"),
}


@dataclass
class NodeFacts:
    name: str
    simulated: bool  # KWOK plays its pods: nothing runs in a container there
    schedulable: bool
    disruptable: bool
    taints: list[str] = field(default_factory=list)
    published: int = 0
    held_by_others: list[str] = field(default_factory=list)  # device names another workload's claims hold
    driver_pods: list[str] = field(default_factory=list)  # namespace/name of the plugin pods serving the driver here
    image: str = "not probed"  # pullable | not pullable | unknown | not probed | imported by the harness
    image_evidence: str = ""

    @property
    def free(self) -> int:
        return self.published - len(self.held_by_others)


@dataclass
class Facts:
    """The preflight's answers; each carries the evidence a reviewer can check."""

    run_id: str
    driver: str
    identity: str = ""
    rights: dict[str, bool] = field(default_factory=dict)
    rights_evidence: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    driver_controlled: bool = False  # the harness starts and stops the driver itself (embedded cluster)
    driver_daemonset: str = ""  # namespace/name found serving the driver, "" when none or several
    driver_evidence: str = ""
    probe_image: str = ""
    admission: dict[str, Any] = field(default_factory=dict)
    device_classes: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    nodes_settling: dict[str, str] = field(default_factory=dict)  # node -> how long it was not Ready here, and how it ended
    #: Options that would let more checks run here (``--toleration nvidia.com/gpu:NoSchedule``), each with why.
    hints: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a fact that could not be gathered, and why

    def to_json(self) -> Obj:
        out = asdict(self)
        out["schema"] = SCHEMA
        for name, node in self.nodes.items():
            out["nodes"][name]["free"] = node.free
        return out

    @classmethod
    def from_json(cls, raw: Obj) -> Facts:
        raw = {k: v for k, v in raw.items() if k != "schema"}
        nodes = {n: NodeFacts(**{k: v for k, v in f.items() if k != "free"}) for n, f in (raw.pop("nodes", None) or {}).items()}
        return cls(**raw, nodes=nodes)

    # -- questions the needs ask ---------------------------------------------------------------
    def container_nodes(self) -> list[NodeFacts]:
        return [n for n in self.nodes.values() if not n.simulated and n.published and n.schedulable]

    def namespace_device_quota(self) -> tuple[str, int] | None:
        """The tightest quota on the driver's devices the cluster put in a new namespace of ours: (class, devices)."""
        quotas = {c: n for c, n in (self.admission.get("device_quota") or {}).items()
                  if c in self.device_classes or not self.device_classes}
        return min(quotas.items(), key=lambda q: q[1]) if quotas else None

    def whole_free_nodes(self) -> list[str]:
        """Schedulable nodes none of whose published devices another workload holds, largest first."""
        return [n.name for n in sorted(self.nodes.values(), key=lambda n: (-n.published, n.name))
                if n.schedulable and n.published and not n.held_by_others]

    def free_total(self) -> int:
        return sum(n.free for n in self.nodes.values() if n.schedulable)


def _nodes(handle: ClusterHandle, facts: Facts) -> None:
    by_device = {key: where["node"] or "" for key, where in handle.published().items()}
    published: dict[str, list[str]] = {}
    for key, node in by_device.items():
        published.setdefault(node, []).append(key[2])
    held: dict[str, list[str]] = {}
    ours = run_namespaces(handle)
    for claim in handle.kube.list(rest.RESOURCE_CLAIMS):
        if claim["metadata"]["namespace"] in ours:
            continue
        for dev in allocated_devices(claim):
            if dev.key in by_device:
                held.setdefault(by_device[dev.key], []).append(dev.device)
    # A pod of the run that asks for devices, as the cluster's rules shape it (their tolerations, the pool's label).
    device_pod = handle.kube.rules.shape("Pod", {"spec": {"resourceClaims": [{"name": "gpu"}]}})["spec"]
    for node in _settled_nodes(handle, facts, set(published)):
        name = node["metadata"]["name"]
        taints = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in node["spec"].get("taints") or []]
        kept_off = keeps_off(device_pod, node)
        schedulable = kept_off is None
        if kept_off and kept_off != "cordoned" and not blocking_taints(node):
            taints.append(kept_off)  # the pool's label: said where the node's taints are
        labels = node["metadata"].get("labels") or {}
        facts.nodes[name] = NodeFacts(
            name, simulated=KWOK_ANNOTATION in (node["metadata"].get("annotations") or {}), schedulable=schedulable,
            disruptable=labels.get(DISRUPTABLE_LABEL) == "true" and schedulable, taints=taints,
            published=len(published.get(name, [])), held_by_others=sorted(held.get(name, [])))


def _settled_nodes(handle: ClusterHandle, facts: Facts, publishing: set[str]) -> list[Obj]:
    """The nodes, after those with devices that are not Ready only for a moment had ``NOT_READY_GRACE_S`` to
    come back. The facts hold for the whole run: a node that missed one status report (a kubelet under
    load) would otherwise be passed over by every check that needs it, all run long."""
    nodes = handle.kube.list(rest.NODES)
    settling = {n["metadata"]["name"] for n in nodes if n["metadata"]["name"] in publishing and only_conditions_block(n)}
    if not settling:
        return nodes
    started = time.monotonic()
    try:
        wait_nodes_ready(handle.kube, settling, None, NOT_READY_GRACE_S, "node(s) with devices the preflight found not Ready to be")
        ended = "Ready"
    except WaitError as e:
        ended = f"still not: {e}"
    took = time.monotonic() - started
    facts.nodes_settling = {name: f"{took:.1f} s, {ended}" for name in sorted(settling)}
    return handle.kube.list(rest.NODES)


def run_namespaces(handle: ClusterHandle) -> set[str]:
    """This run's namespaces: their claims come and go with its own tests. Another run's are another workload's,
    as a tenant's are: a canary held across an upgrade, or a killed run's leftovers, hold their devices for
    hours, and counted free they made the checks that needed them wait and fail."""
    return {n["metadata"]["name"] for n in handle.kube.list(rest.NAMESPACES, label_selector=run_selector(handle.run_id))}


def _rights(handle: ClusterHandle, facts: Facts, lease_namespace: str) -> None:
    kube = handle.kube
    try:
        review = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        facts.identity = review.get("status", {}).get("userInfo", {}).get("username", "")
    except HarnessError as e:
        facts.errors.append(f"identity: {e}")
    driver_ns = facts.driver_daemonset.partition("/")[0] or handle.profile.driver_daemonset[0]
    for name, (verb, group, resource, sub, where) in RIGHTS.items():
        namespace = {"driver": driver_ns, "lease": lease_namespace}.get(where)
        attrs = {"verb": verb, "group": group, "resource": resource, **({"subresource": sub} if sub else {}),
                 **({"namespace": namespace} if namespace else {})}
        try:
            answer = kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}})
        except HarnessError as e:
            facts.errors.append(f"right {name}: {e}")
            continue
        status = answer.get("status", {})
        facts.rights[name] = bool(status.get("allowed"))
        scope = f" in {namespace}" if namespace else ""
        facts.rights_evidence[name] = (f"{verb} {resource}{'/' + sub if sub else ''}{scope}: "
                                       + ("allowed" if status.get("allowed") else f"denied {status.get('reason', '')}".strip()))


def _plugin_pods(handle: ClusterHandle, facts: Facts) -> None:
    """Pods serving the driver, found by what they are: on a node with the driver's slices, mounting a
    kubelet plugin path of the driver (or its registration directory, naming the driver or owned by the
    profile's DaemonSet) from the host. The profile's DaemonSet name is otherwise only a hint; several
    owners, or none, are facts too."""
    facts.driver_controlled = handle.controls_driver
    owners: dict[str, set[str]] = {}
    hint = "/".join(handle.profile.driver_daemonset)
    for pod in handle.kube.list(rest.PODS):
        node = pod["spec"].get("nodeName") or ""
        if node not in facts.nodes or not facts.nodes[node].published or pod["metadata"].get("deletionTimestamp"):
            continue
        meta = pod["metadata"]
        owner = next((o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "DaemonSet"), "")
        paths = [(v.get("hostPath") or {}).get("path", "") for v in pod["spec"].get("volumes") or []]
        # A plugin mounting the whole plugins directory and naming its driver nowhere (NVIDIA's chart) is known by
        # registering with the kubelet from the DaemonSet its profile names.
        serves = any(facts.driver in p for p in paths) or (
            any("plugins_registry" in p for p in paths)
            and (_names_driver(pod, facts.driver) or (bool(owner) and f"{meta['namespace']}/{owner}" == hint)))
        if not serves:
            continue
        facts.nodes[node].driver_pods.append(f"{meta['namespace']}/{meta['name']}")
        owners.setdefault(f"{meta['namespace']}/{owner}" if owner else "", set()).add(node)
    daemonsets = sorted(o for o in owners if o)
    if len(daemonsets) == 1:
        facts.driver_daemonset = daemonsets[0]
        facts.driver_evidence = (f"DaemonSet {daemonsets[0]} runs the plugin on {len(owners[daemonsets[0]])} node(s) "
                                 f"(found by its host paths; the profile's hint was {hint or 'none'})")
    elif daemonsets:
        facts.driver_evidence = f"several DaemonSets serve {facts.driver}: {', '.join(daemonsets)}; pass --driver-daemonset"
    elif "" in owners:
        facts.driver_evidence = f"the plugin pods of {facts.driver} belong to no DaemonSet: not a pod the harness can restart"
    elif facts.driver_controlled:
        facts.driver_evidence = "the driver runs as processes the harness starts and stops (embedded cluster)"
    else:
        facts.driver_evidence = f"no pod on a node with {facts.driver}'s slices mounts its plugin paths: not a pod we can restart"


def _names_driver(pod: Obj, driver: str) -> bool:
    """Whether a pod's containers name the driver (its args or env), for plugins whose paths do not."""
    for c in pod["spec"].get("containers") or []:
        words = [*(c.get("args") or []), *(c.get("command") or []), *(str(e.get("value", "")) for e in c.get("env") or [])]
        if any(driver in w for w in words):
            return True
    return False


def _device_classes(handle: ClusterHandle, facts: Facts) -> None:
    """Devices each DeviceClass of the driver selects, published and free (held by nobody else)."""
    published = handle.published()
    ours = run_namespaces(handle)
    held = {k for k, claims in handle.allocations().items() if not all(c.split("/")[0] in ours for c in claims)}
    for dc in handle.kube.list(rest.DEVICE_CLASSES):
        exprs = [s["cel"]["expression"] for s in dc["spec"].get("selectors") or [] if "cel" in s]
        if not any(facts.driver in e for e in exprs):
            continue
        matched = [k for k, where in published.items()
                   if all(cel.evaluate(e, facts.driver, where["device"]).matched for e in exprs)]
        facts.device_classes[dc["metadata"]["name"]] = {"published": len(matched), "free": len([k for k in matched if k not in held])}


def _decided(pod: Obj) -> bool:
    return pod["status"].get("phase") in ("Running", "Succeeded", "Failed") or bool(podstates.environment_blocker([pod]))


def _images(handle: ClusterHandle, facts: Facts) -> None:
    """One tiny pod per node that runs containers, with the probe image and its shell; stopped at the first
    sign either way. Also what admission does to such a pod in a namespace of ours (a server-side dry run)."""
    image = facts.probe_image = handle.probe_image
    nodes = facts.container_nodes()
    if handle.provider.workload_image and image == handle.provider.workload_image:
        for n in nodes:
            n.image, n.image_evidence = "imported by the harness", f"{image} is imported on the harness's own nodes"
        return
    if not facts.rights.get("create-namespaces", False):
        facts.admission = {"allowed": None, "evidence": "not probed: the identity may not create namespaces"}
        return
    namespace = f"drh-pre-{uuid.uuid4().hex[:8]}"
    kube = handle.kube
    handle.create_namespace(namespace, {RUN_LABEL: handle.run_id})
    created = time.monotonic()
    try:
        watch_until(kube, rest.SERVICE_ACCOUNTS, lambda items: bool(items), 15, f"default ServiceAccount in {namespace}",
                    namespace=namespace, field_selector="metadata.name=default")
        facts.admission = _admission(handle, namespace, image)
        if not facts.admission.get("allowed"):  # a pod admission refuses cannot run anywhere: no container check can
            for n in nodes:
                n.image, n.image_evidence = "unusable", f"admission refused the probe pod: {facts.admission.get('evidence')}"
            return
        for i, n in enumerate(nodes):
            body = _probe_body(f"pull-{i}", handle.run_id, image, n.name)
            kube.create(rest.PODS, body, namespace)
        try:
            pods = watch_until(kube, rest.PODS, lambda ps: len(ps) == len(nodes) and all(_decided(p) for p in ps),
                               IMAGE_PROBE_S, f"the probe image {image} to start or fail on {len(nodes)} node(s)",
                               namespace=namespace, environment=False)
        except WaitError as e:
            pods = list(getattr(e, "last", None) or [])
        by_node = {(p["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname"): p for p in pods}
        for n in nodes:
            pod = by_node.get(n.name)
            blocker = podstates.environment_blocker([pod]) if pod else None
            phase = pod["status"].get("phase") if pod else None
            if blocker:
                n.image, n.image_evidence = "unusable", blocker
            elif phase in ("Running", "Succeeded"):
                n.image, n.image_evidence = "usable", f"{image} ran on {n.name} ({phase})"
            elif phase == "Failed":
                n.image, n.image_evidence = "unusable", f"{image} was pulled but its shell did not run on {n.name}"
            else:
                n.image, n.image_evidence = "unknown", f"no answer within {IMAGE_PROBE_S:.0f}s (a slow pull?)"
    finally:
        if facts.admission.get("allowed") is not None:  # read last: a policy engine furnishes a namespace after it exists
            if handle.provider.outlives_run and (grace := created + POLICY_GRACE_S - time.monotonic()) > 0:
                try:  # a quota ends the grace at once; none in it is the answer
                    watch_until(kube, rest.RESOURCE_QUOTAS, lambda quotas: bool(quotas), grace,
                                f"a ResourceQuota in {namespace}", namespace=namespace)
                except WaitError:
                    pass
            facts.admission.update(_namespace_policy(kube, namespace))
        handle.delete_namespace(namespace)


#: The ResourceQuota key that limits devices of a DeviceClass (``<class>`` + this).
DEVICE_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def _namespace_policy(kube: rest.Kube, namespace: str) -> Obj:
    """What the cluster put in a namespace of ours: its ResourceQuotas, the devices they allow per
    DeviceClass, and its LimitRanges."""
    try:
        quotas, ranges = kube.list(rest.RESOURCE_QUOTAS, namespace), kube.list(rest.LIMIT_RANGES, namespace)
    except rest.ApiError as e:
        return {"policy_evidence": f"the namespace's quotas and limit ranges could not be read: {e}"}
    device_quota: dict[str, int] = {}
    for q in quotas:
        for key, value in ((q.get("spec") or {}).get("hard") or {}).items():
            if key.endswith(DEVICE_QUOTA_SUFFIX):
                cls = key[: -len(DEVICE_QUOTA_SUFFIX)]
                device_quota[cls] = min(device_quota.get(cls, 1 << 30), int(parse_quantity(str(value))))
    return {"resource_quotas": [q["metadata"]["name"] for q in quotas], "device_quota": device_quota,
            "limit_ranges": [r["metadata"]["name"] for r in ranges]}


def _probe_body(name: str, run_id: str, image: str, node: str) -> Obj:
    body = builders.pod(name, run_id, node_name=node, image=image)
    body["spec"]["restartPolicy"] = "Never"
    body["spec"]["containers"][0]["command"] = ["sh", "-c", "exit 0"]
    return body


def _admission(handle: ClusterHandle, namespace: str, image: str) -> Obj:
    """A server-side dry run of a probe pod: refused (and why), or admitted with what admission changed."""
    kube = handle.kube
    body = _probe_body("admission", handle.run_id, image, "")
    body["spec"].pop("nodeSelector", None)
    # As a check's pod is: with a claim (a policy on GPU pods sees it; a dry run needs no claim to exist), and
    # shaped by the cluster's rules (a dry run is otherwise sent as it is), so a rule the options meet is admitted.
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "dra-harness-admission-probe"}]
    body["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    body = kube.rules.shape("Pod", body)
    labels = kube.get(rest.NAMESPACES, namespace)["metadata"].get("labels") or {}
    enforced = {k.rsplit("/", 1)[1]: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}
    quotas = [q["metadata"]["name"] for q in kube.list(rest.RESOURCE_QUOTAS, namespace)]
    out: Obj = {"pod_security": enforced, "resource_quotas": quotas}
    try:
        admitted = kube.create(rest.PODS, body, namespace, dry_run=True)
    except rest.ApiError as e:
        return {**out, "allowed": False, "evidence": e.message[:300]}
    resources = admitted["spec"]["containers"][0].get("resources") or {}
    added = {k: v for k, v in resources.items() if k != "claims"}
    # Most of a run's pods only hold devices and run the pause image (an image policy may admit one and not the other).
    container = {k: v for k, v in body["spec"]["containers"][0].items() if k != "command"}
    holder = kube.rules.shape("Pod", {**body, "spec": {**body["spec"], "containers": [{**container, "image": PAUSE_IMAGE}]}})
    try:
        kube.create(rest.PODS, holder, namespace, dry_run=True)
        pause: Obj = {"pause_allowed": True}
    except rest.ApiError as e:
        pause = {"pause_allowed": False, "pause_evidence": e.message[:300]}
    return {**out, "allowed": True, "defaults": added, **pause,
            "evidence": "admitted" + (f"; admission set {added}" if added else " unchanged")}


def collect(handle: ClusterHandle, lease_namespace: str = "default") -> Facts:
    """Every fact the needs ask about. A fact that cannot be gathered is said in ``errors``, never guessed."""
    started = time.monotonic()
    facts = Facts(handle.run_id, handle.driver)
    steps = [("nodes and devices", _nodes), ("driver pods", _plugin_pods),
             ("rights", lambda h, f: _rights(h, f, lease_namespace)), ("device classes", _device_classes),
             ("probe image", _images)]
    for what, step in steps:
        try:
            step(handle, facts)
        except (HarnessError, cel.SelectorError) as e:
            facts.errors.append(f"{what}: {e}")
    facts.hints = preflight_hints.hints(facts, handle.kube.list(rest.NODES) if facts.nodes else [])
    facts.seconds = round(time.monotonic() - started, 3)
    return facts



def describe(facts: Facts) -> list[dict[str, str]]:
    """The facts as rows a reviewer reads (fact, what was found, the evidence), for the report and the CLI."""
    denied = [n for n, ok in facts.rights.items() if not ok]
    rows = [
        {"fact": "identity", "value": facts.identity or "unknown", "evidence": "SelfSubjectReview"},
        {"fact": "rights", "value": f"{len(facts.rights) - len(denied)} of {len(facts.rights)} verbs the suites use allowed",
         "evidence": "; ".join(facts.rights_evidence[n] for n in denied) or "every one allowed"},
        {"fact": "driver", "value": facts.driver_daemonset or ("processes of the harness" if facts.driver_controlled else "not restartable"),
         "evidence": facts.driver_evidence},
        {"fact": "admission of a probe pod", "value": {True: "admitted", False: "refused", None: "not probed"}.get(
            facts.admission.get("allowed"), "not probed"), "evidence": str(facts.admission.get("evidence", ""))},
    ]
    if "limit_ranges" in facts.admission or "policy_evidence" in facts.admission:
        quota = facts.namespace_device_quota()
        rows.append({"fact": "policy in a new namespace",
                     "value": f"at most {quota[1]} devices of {quota[0]}" if quota else "no quota on devices",
                     "evidence": facts.admission.get("policy_evidence") or
                     f"ResourceQuotas: {', '.join(facts.admission['resource_quotas']) or 'none'}; "
                     f"LimitRanges: {', '.join(facts.admission['limit_ranges']) or 'none'}"})
    for n in sorted(facts.nodes.values(), key=lambda n: n.name):
        if not n.published and n.simulated:
            continue
        state = ("schedulable" if n.schedulable else "unschedulable") + (", disruptable" if n.disruptable else "")
        rows.append({"fact": f"node {n.name}", "value": f"{n.free} of {n.published} devices free; {state}"
                     + ("" if n.simulated else f"; probe image {n.image}"),
                     "evidence": "; ".join(filter(None, [
                         f"held by others: {', '.join(n.held_by_others)}" if n.held_by_others else "",
                         f"taints: {', '.join(n.taints)}" if n.taints else "",
                         f"not Ready at first, waited {facts.nodes_settling[n.name]}" if n.name in facts.nodes_settling else "",
                         f"plugin pods: {', '.join(n.driver_pods)}" if n.driver_pods else "",
                         n.image_evidence]))})
    for name, c in sorted(facts.device_classes.items()):
        rows.append({"fact": f"DeviceClass {name}", "value": f"{c['free']} of {c['published']} devices free",
                     "evidence": "its CEL selectors evaluated on every published device"})
    rows += [{"fact": "not gathered", "value": e.split(":", 1)[0], "evidence": e} for e in facts.errors]
    rows += [{"fact": "an option that would help", "value": h.partition(" (")[0], "evidence": h.partition(" (")[2].rstrip(")")}
             for h in facts.hints]
    return rows
