"""``dra-harness lint``: DRA manifests checked by the API server they will meet, then against its devices.

A selector that does not compile is refused only when the object is written, often in a
pipeline far from its author; one that compiles but matches nothing looks like a full
cluster. So each DeviceClass, ResourceClaim, ResourceClaimTemplate and workload is sent to
a real API server as a server-side dry run (what it refuses is an error, quoted, with the fix
for known mistakes), and each request of an accepted claim is evaluated against the devices
the target publishes: which match, and what can never work (a missing class, a selector that
errors on every device, more devices than any node has) is a warning with the reason.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from dra_harness.checks import cel
from dra_harness.checks.diagnose import ClusterView, misspelt, requests_of, selectors_of
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

#: Where a workload keeps its pod template.
WORKLOADS = {"Deployment": "spec.template", "StatefulSet": "spec.template", "DaemonSet": "spec.template",
             "ReplicaSet": "spec.template", "Job": "spec.template", "CronJob": "spec.jobTemplate.spec.template"}
_ORDERED_OPS = r">=|<=|>|<"
_OPAQUE_CALL = r"(?:quantity|semver)\((?:'[^']*'|\"[^\"]*\")\)"
_COMPARISON = re.compile(rf"(?P<lhs>[\w.\[\]'\"-]+?|{_OPAQUE_CALL})\s*(?P<op>{_ORDERED_OPS})\s*(?P<rhs>{_OPAQUE_CALL}|[\w.\[\]'\"-]+)")


@dataclass
class Finding:
    level: str  # error | warning | info
    where: str  # file#index Kind/name[ request]
    message: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.level}: {self.where}: {self.message}" + (f"\n  fix: {self.fix}" if self.fix else "")


@dataclass
class Document:
    file: str
    index: int
    obj: Obj

    @property
    def where(self) -> str:
        meta = self.obj.get("metadata") or {}
        return f"{self.file}#{self.index} {self.obj.get('kind', '?')}/{meta.get('name', '?')}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.level == "error")


#: kind -> (plural, namespaced) of what lint sends; the group and version are the document's own.
CHECKED = {"DeviceClass": ("deviceclasses", False), "ResourceClaim": ("resourceclaims", True),
           "ResourceClaimTemplate": ("resourceclaimtemplates", True), "Pod": ("pods", True),
           "Deployment": ("deployments", True), "StatefulSet": ("statefulsets", True), "DaemonSet": ("daemonsets", True),
           "ReplicaSet": ("replicasets", True), "Job": ("jobs", True), "CronJob": ("cronjobs", True)}


def resource_for(obj: Obj) -> rest.Resource | None:
    """The resource to send ``obj`` to, at the apiVersion it is written in (which the server may not serve)."""
    kind, api_version = obj.get("kind", ""), str(obj.get("apiVersion", ""))
    if kind not in CHECKED or not api_version:
        return None
    group, _, version = api_version.rpartition("/")
    plural, namespaced = CHECKED[kind]
    return rest.Resource(group, version, plural, kind, namespaced)


def fix_for(expression: str, message: str) -> str:
    """The rewrite of a known mistake: an ordering operator on quantities or versions becomes compareTo."""
    if "no matching overload" not in message or not re.search(_ORDERED_OPS, expression):
        return ""

    def rewrite(m: re.Match) -> str:
        lhs, op, rhs = m.group("lhs"), m.group("op"), m.group("rhs")
        if not re.fullmatch(_OPAQUE_CALL, rhs) and not re.fullmatch(_OPAQUE_CALL, lhs):
            return m.group(0)
        return f"{lhs}.compareTo({rhs}) {op} 0"
    fixed = _COMPARISON.sub(rewrite, expression)
    return fixed if fixed != expression else ""


def _expressions(obj: Obj) -> list[str]:
    """Every CEL selector an object holds (class, claim or template)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    out = selectors_of(spec)
    for alternatives in requests_of(spec):
        for _, request in alternatives:
            out += selectors_of(request)
    return out


def dry_run(kube: Kube, doc: Document, namespace: str, report: Report) -> bool:
    """Send one object to the API server as a dry run; its refusal is an error finding."""
    res = resource_for(doc.obj)
    if res is None:
        return False
    body = {**doc.obj, "metadata": {**(doc.obj.get("metadata") or {})}}
    ns = None
    if res.namespaced:
        ns = body["metadata"].get("namespace") or namespace
        body["metadata"]["namespace"] = ns
    try:
        kube.request("POST", res.path(ns), body, params={"dryRun": "All"})
        return True
    except rest.ApiError as e:
        if e.status == 409:  # it exists already: what the server thinks of it is known
            return True
        if e.status == 404:
            report.findings.append(Finding("error", doc.where, f"the API server does not serve {res.kind} in "
                                           f"{doc.obj['apiVersion']} ({e.message})"))
            return False
        fixes = [f for expr in _expressions(doc.obj) if (f := fix_for(expr, e.message))]
        report.findings.append(Finding("error", doc.where, f"rejected by the API server: {e.message}",
                                       "; ".join(fixes)))
        return False


def match_requests(doc: Document, view: ClusterView, classes: dict[str, Obj], report: Report) -> None:
    """For each request of a claim or template: the devices it matches, or why it never can."""
    spec = doc.obj.get("spec") or {}
    if doc.obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    devices = view.devices()
    for alternatives in requests_of(spec):
        for name, request in alternatives:
            where = f"{doc.where} request {name}"
            class_name = request.get("deviceClassName", "")
            cls = classes.get(class_name)
            if cls is None:
                report.findings.append(Finding("warning", where, f"DeviceClass {class_name!r} exists neither on the target "
                                               "nor in the files: the claim will never be allocated"))
                continue
            exprs = selectors_of(cls.get("spec") or {}) + selectors_of(request)
            matched, errors = [], set()
            for driver, pool, node, device in devices:
                outcomes = [cel.evaluate(e, driver, device) for e in exprs]
                errors |= {o.error for o in outcomes if o.error}
                if all(o.matched for o in outcomes):
                    matched.append((node or pool, device["name"]))
            if not matched:
                typo = misspelt(request, cls, [d for d in devices])
                why = typo or (f"the selector errors on every device: {sorted(errors)[0]}" if errors else
                               f"no device of the {len(devices)} published satisfies {' && '.join(exprs) or 'the class'}")
                report.findings.append(Finding("warning", where, f"matches no device: {why}"))
                continue
            per_node: dict[str, int] = defaultdict(int)
            for node, _ in matched:
                per_node[node] += 1
            need = int(request.get("count", 1)) if request.get("allocationMode", "ExactCount") == "ExactCount" else 1
            if need > max(per_node.values()):
                report.findings.append(Finding("warning", where, f"asks for {need} devices on one node; at most "
                                               f"{max(per_node.values())} match on any node: the allocator will never satisfy it"))
            shown = ", ".join(f"{n}/{d}" for n, d in matched[:8]) + (" ..." if len(matched) > 8 else "")
            report.findings.append(Finding("info", where, f"matches {len(matched)} devices on {len(per_node)} nodes: {shown}"))


def lint(kube: Kube, docs: list[Document], namespace: str = "default", slices: list[Obj] | None = None) -> Report:
    """Dry-run every document on ``kube``; then match the accepted claims' requests against its devices,
    or against ``slices`` (the expected hardware's) when given."""
    report = Report()
    view = ClusterView.read(kube)
    if slices is not None:
        view.slices = slices
    classes = dict(view.classes)
    accepted: list[Document] = []
    known = [d for d in docs if resource_for(d.obj)]
    for doc in docs:
        if doc not in known:
            report.findings.append(Finding("info", doc.where, "not a kind lint checks; skipped"))
    for doc in sorted(known, key=lambda d: d.obj.get("kind") != "DeviceClass"):  # classes first: claims use them
        if dry_run(kube, doc, namespace, report):
            accepted.append(doc)
            if doc.obj.get("kind") == "DeviceClass":
                classes[doc.obj["metadata"]["name"]] = doc.obj
    for doc in accepted:
        if doc.obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
            match_requests(doc, view, classes, report)
    _claims_referenced(docs, view, kube, namespace, report)
    return report


def _claims_referenced(docs: list[Document], view: ClusterView, kube: Kube, namespace: str, report: Report) -> None:
    """A pod or workload naming a claim or template that neither the files nor the target hold."""
    have: dict[str, set[str]] = {"ResourceClaim": set(), "ResourceClaimTemplate": set()}
    for d in docs:
        if d.obj.get("kind") in have:
            have[d.obj["kind"]].add(d.obj["metadata"].get("name", ""))
    for doc in docs:
        pod_spec = _pod_spec(doc.obj)
        if pod_spec is None:
            continue
        ns = (doc.obj.get("metadata") or {}).get("namespace") or namespace
        for ref in pod_spec.get("resourceClaims") or []:
            kind, name = (("ResourceClaimTemplate", ref["resourceClaimTemplateName"]) if ref.get("resourceClaimTemplateName")
                          else ("ResourceClaim", ref.get("resourceClaimName", "")))
            if name in have[kind]:
                continue
            res = rest.RESOURCE_CLAIM_TEMPLATES if kind == "ResourceClaimTemplate" else rest.RESOURCE_CLAIMS
            try:
                kube.get(res, name, ns)
            except rest.ApiError:
                report.findings.append(Finding("warning", doc.where, f"claim {ref.get('name')!r} names {kind} {ns}/{name}, "
                                               "which neither the files nor the target hold: the pod stays Pending"))


def _pod_spec(obj: Obj) -> Any:
    if obj.get("kind") == "Pod":
        return obj.get("spec") or {}
    path = WORKLOADS.get(obj.get("kind", ""))
    if not path:
        return None
    node: Any = obj
    for part in path.split("."):
        node = (node or {}).get(part)
    return (node or {}).get("spec")
