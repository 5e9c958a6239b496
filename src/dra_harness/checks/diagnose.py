"""Why is this DRA pod Pending? Tell a typo from a full cluster.

kube-scheduler says "cannot allocate all claims" both when a selector names an
attribute no device has and when every matching device is taken. This module looks
at the published slices, the DeviceClass, the claim's requests and every allocation
in the cluster, and names one cause per pod:

- ``device-class-missing``  the request names a DeviceClass that does not exist
- ``claim-not-created``     the template claim was never created (quota, missing template)
- ``extended-resource-unmapped``  the pod asks for an extended resource no node advertises and no
                            DeviceClass maps (``extendedResourceName``); a mapped one is diagnosed
                            as a request of its class
- ``no-devices-for-class``  no published device matches the DeviceClass: slices missing
- ``selector-typo``         a selector reads an attribute/capacity no device publishes
- ``no-device-matches``     devices publish the names, but no value satisfies the selectors
- ``device-tainted``        every matching device carries a taint (its slice's, or a DeviceTaintRule's)
                            the request does not tolerate
- ``too-few-devices``       the request asks for more devices than match in the whole cluster
- ``capacity-exhausted``    matching devices exist and are all allocated (holders listed)
- ``no-node-has-enough``    enough free matching devices, but not on one node
- ``node-constraints``      free devices exist only on nodes the pod may not use
- ``untolerated-taint``     every node with devices carries a taint the pod does not tolerate (a managed GPU
                            pool's ``nvidia.com/gpu``): the option that lets the harness's pods through is named
- ``node-selector-mismatch``  the pod's node selector or affinity admits no node with devices
- ``cordoned``              every node with devices is cordoned
- ``environment``           the scheduler refused every node that could take the pod for cpu, memory, pods,
                            volumes or ports (:mod:`dra_harness.kube.refusals`)
- ``unknown``               none of the above; the scheduler's message is quoted

Causes are only said when the data shows them; anything else is ``unknown``.
"""

from __future__ import annotations

import functools

import difflib
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from dra_harness.checks import cel, device_taints
from dra_harness.kube import refusals, rest
from dra_harness.kube.events import events_for
from dra_harness.kube.pods import allocated_devices, claim_names, scheduling_message
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj


@dataclass
class Diagnosis:
    namespace: str
    pod: str
    cause: str
    message: str
    scheduler_message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClusterView:
    """One consistent read of everything a diagnosis needs."""

    slices: list[Obj]
    classes: dict[str, Obj]
    claims: list[Obj]
    nodes: dict[str, Obj]
    taint_rules: list[Obj] = field(default_factory=list)

    @classmethod
    def read(cls, kube: Kube) -> ClusterView:
        rules = rest.device_taint_rules(kube)
        try:
            taint_rules = kube.list(rules) if rules else []
        except rest.ApiError as e:
            if e.status != 403:
                raise
            taint_rules = []  # a least-privilege role (deploy/rbac's everyday one) may not read them: slices' taints only
        return cls(
            slices=kube.list(rest.RESOURCE_SLICES),
            classes={c["metadata"]["name"]: c for c in kube.list(rest.DEVICE_CLASSES)},
            claims=kube.list(rest.RESOURCE_CLAIMS),
            nodes={n["metadata"]["name"]: n for n in kube.list(rest.NODES)},
            taint_rules=taint_rules,
        )

    @functools.cached_property
    def _slice_of(self) -> dict[int, str]:
        """id(device dict) -> the name of the slice publishing it: one pass, not one scan per device."""
        return {id(d): s["metadata"]["name"] for s in self.slices for d in s["spec"].get("devices") or []}

    def taints(self, device: tuple[str, str, str | None, Obj]) -> list[device_taints.Taint]:
        driver, pool, _, dev = device
        return device_taints.taints(driver, pool, self._slice_of.get(id(dev), "?"), dev, self.taint_rules)

    def devices(self) -> list[tuple[str, str, str | None, Obj]]:
        """(driver, pool, node, device) for every published device."""
        out = []
        for s in self.slices:
            spec = s["spec"]
            for d in spec.get("devices") or []:
                out.append((spec["driver"], spec["pool"]["name"], spec.get("nodeName"), d))
        return out

    def holders(self) -> dict[tuple[str, str, str], list[str]]:
        held: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for c in self.claims:
            for dev in allocated_devices(c):
                held[dev.key].append(f"{c['metadata']['namespace']}/{c['metadata']['name']}")
        return held


def selectors_of(obj: Obj) -> list[str]:
    return [s["cel"]["expression"] for s in obj.get("selectors") or [] if "cel" in s]


def requests_of(claim_spec: Obj) -> list[list[tuple[str, Obj]]]:
    """Each request as its alternatives: one for ``exactly``, several for ``firstAvailable``."""
    out = []
    for r in claim_spec.get("devices", {}).get("requests") or []:
        if "exactly" in r:
            out.append([(r["name"], r["exactly"])])
        else:
            out.append([(f"{r['name']}/{sub['name']}", sub) for sub in r.get("firstAvailable") or []])
    return out


def _pod_nodes(pod: Obj, nodes: dict[str, Obj]) -> set[str]:
    """Nodes the pod's nodeSelector allows (affinity is not evaluated: treated as any)."""
    selector = pod["spec"].get("nodeSelector") or {}
    return {n for n, obj in nodes.items() if all(obj["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())}


def misspelt(request: Obj, class_obj: Obj, candidates: list[tuple[str, str, str | None, Obj]]) -> str | None:
    """A selector reference that no candidate device publishes, with the closest published name."""
    published: dict[str, set[str]] = {"attributes": set(), "capacity": set()}
    for driver, _, _, d in candidates:
        for kind in published:
            for name in d.get(kind) or {}:
                domain, _, short = name.rpartition("/")
                published[kind].add(f"{domain or driver}/{short}")
    for expression in selectors_of(class_obj.get("spec", {})) + selectors_of(request):
        for kind, domain, name in cel.references(expression):
            qualified = f"{domain}/{name}"
            if qualified not in published[kind]:
                close = difflib.get_close_matches(qualified, sorted(published[kind]), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                noun = "attribute" if kind == "attributes" else "capacity"
                return (f"selector `{expression}` reads {noun} {qualified}, which no device of class "
                        f"{class_obj['metadata']['name']} publishes{hint}")
    return None


def diagnose_request(
    pod: Obj, request_name: str, request: Obj, cluster: ClusterView, held: dict
) -> tuple[str, str, dict] | None:
    class_name = request.get("deviceClassName", "")
    class_obj = cluster.classes.get(class_name)
    if class_obj is None:
        return "device-class-missing", f"request {request_name}: DeviceClass {class_name!r} does not exist", {}
    everything = cluster.devices()
    in_class = [d for d in everything if all(cel.evaluate(e, d[0], d[3]).matched for e in selectors_of(class_obj.get("spec", {})))]
    if not in_class:
        drivers = sorted({d[0] for d in everything})
        return ("no-devices-for-class",
                f"request {request_name}: no published device matches DeviceClass {class_name} "
                f"(ResourceSlices missing? drivers publishing: {', '.join(drivers) or 'none'})", {})
    typo = misspelt(request, class_obj, in_class)
    matching = [d for d in in_class if all(cel.evaluate(e, d[0], d[3]).matched for e in selectors_of(request))]
    if not matching:
        if typo:
            return "selector-typo", f"request {request_name}: {typo}", {}
        return ("no-device-matches",
                f"request {request_name}: none of the {len(in_class)} devices of class {class_name} satisfies "
                f"{' && '.join(selectors_of(request)) or 'the request'}", {})
    kept_off = {id(d): device_taints.blocking(cluster.taints(d), request) for d in matching}
    if all(kept_off.values()):
        seen = sorted({str(t) for ts in kept_off.values() for t in ts})
        return ("device-tainted",
                f"request {request_name}: all {len(matching)} matching devices carry a taint it does not tolerate: "
                f"{'; '.join(seen[:5])}{' ...' if len(seen) > 5 else ''} (add a toleration to the request, or remove the taint)",
                {"taints": seen})
    matching = [d for d in matching if not kept_off[id(d)]]
    need = len(matching) if request.get("allocationMode") == "All" else int(request.get("count", 1))
    if need > len(matching):  # never satisfiable, however much is freed
        return ("too-few-devices", f"request {request_name}: needs {need} devices; only {len(matching)} published "
                                   f"devices match it", {"matching": len(matching)})
    free = [d for d in matching if not held.get((d[0], d[1], d[3]["name"]))]
    if len(free) < need:
        holders = sorted({h for d in matching for h in held.get((d[0], d[1], d[3]["name"]), [])})
        return ("capacity-exhausted",
                f"request {request_name}: needs {need} of the {len(matching)} matching devices, "
                f"{len(free)} free; held by {', '.join(holders[:10])}{' ...' if len(holders) > 10 else ''}",
                {"matching": len(matching), "free": len(free), "holders": holders})
    per_node: dict[str | None, int] = defaultdict(int)
    for d in free:
        per_node[d[2]] += 1
    allowed = _pod_nodes(pod, cluster.nodes)
    usable = {n: c for n, c in per_node.items() if n is None or n in allowed}
    if not usable:
        return ("node-constraints",
                f"request {request_name}: free matching devices are only on {', '.join(sorted(str(n) for n in per_node))}, "
                "which the pod's nodeSelector excludes", {"free_per_node": dict(per_node)})
    if max(usable.values()) < need:
        best = max(usable, key=lambda n: usable[n])
        return ("no-node-has-enough",
                f"request {request_name}: needs {need} devices on one node; {len(free)} are free, "
                f"at most {usable[best]} on one node ({best})", {"free_per_node": {str(k): v for k, v in per_node.items()}})
    return None


#: The name a DeviceClass answers to without an extendedResourceName of its own (KEP-5004).
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def extended_requests(pod: Obj, nodes: dict[str, Obj]) -> dict[str, int]:
    """Extended resources the pod asks for that no node advertises (so only DRA can serve them): name -> count."""
    advertised = {k for n in nodes.values() for k in (n.get("status", {}).get("allocatable") or {})}
    out: dict[str, int] = {}
    for c in (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or []):
        res = c.get("resources") or {}
        for name, qty in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if "/" in name and not name.startswith(("kubernetes.io/", "requests.")) and name not in advertised:
                out[name] = max(out.get(name, 0), int(str(qty)) if str(qty).isdigit() else 1)
    return out


def diagnose_extended(pod: Obj, wanted: dict[str, int], cluster: ClusterView, held: dict) -> tuple[str, str, dict] | None:
    """A pod asking for DRA-backed extended resources: which class maps each name, or that none does."""
    for name, count in wanted.items():
        classes = sorted(c for c, obj in cluster.classes.items()
                         if (obj.get("spec") or {}).get("extendedResourceName") == name or name == f"{IMPLICIT_PREFIX}{c}")
        if not classes:
            return ("extended-resource-unmapped",
                    f"requests {count} {name}: no DeviceClass maps it (spec.extendedResourceName) and no node advertises it",
                    {"resource": name})
        cause = diagnose_request(pod, name, {"deviceClassName": classes[0], "count": count}, cluster, held)
        if cause:
            what, message, details = cause
            return what, f"{message} (extended resource {name}, DeviceClass {classes[0]})", details
    return None


def diagnose_pod(kube: Kube, pod: Obj, cluster: ClusterView, held: dict) -> Diagnosis:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    sched = scheduling_message(pod)

    def said(cause: str, message: str, details: dict | None = None) -> Diagnosis:
        return Diagnosis(ns, name, cause, message, sched, details or {})

    # The scheduler's node filters run before DRA's: a pod the cluster's rules keep off every device node never
    # reached the allocator, whatever its claims say.
    if refused := refusals.environment_refusal(pod, list(cluster.nodes.values()), cluster.slices):
        return said(refused.cause, refused.reason, {"option": refused.option} if refused.option else None)
    wanted = extended_requests(pod, cluster.nodes)
    if wanted and (found := diagnose_extended(pod, wanted, cluster, held)):
        return said(*found)

    names = claim_names(pod)
    for pod_claim in pod["spec"].get("resourceClaims") or []:
        claim_name = names.get(pod_claim["name"])
        if claim_name is None:
            failures = [e["message"] for e in events_for(kube, ns, name) if e.get("reason") == "FailedResourceClaimCreation"]
            if failures:
                return said("claim-not-created", f"claim {pod_claim['name']} was not created: {failures[-1]}")
            continue
        try:
            claim = kube.get(rest.RESOURCE_CLAIMS, claim_name, ns)
        except rest.NotFound:
            return said("claim-not-created", f"ResourceClaim {ns}/{claim_name} does not exist")
        if claim.get("status", {}).get("allocation"):
            continue
        for alternatives in requests_of(claim["spec"]):
            causes = [diagnose_request(pod, n, r, cluster, held) for n, r in alternatives]
            if any(c is None for c in causes):
                continue  # some alternative can be satisfied
            cause, message, details = causes[0]  # type: ignore[misc]
            return said(cause, f"claim {claim_name}: {message}", details)
    return said("unknown", f"no DRA cause found; the scheduler says: {sched}")


def diagnose(kube: Kube, namespace: str | None = None) -> list[Diagnosis]:
    """A diagnosis for every unscheduled pod with resource claims (in one namespace, or all)."""
    pods = kube.list(rest.PODS, namespace, field_selector="status.phase=Pending")
    unscheduled = [p for p in pods if not p["spec"].get("nodeName")]
    if not unscheduled:
        return []
    cluster = ClusterView.read(kube)
    waiting = [p for p in unscheduled if p["spec"].get("resourceClaims") or extended_requests(p, cluster.nodes)]
    held = cluster.holders()
    return [diagnose_pod(kube, p, cluster, held) for p in waiting]
