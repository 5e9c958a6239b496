"""Whether a pod may be placed on a node, judged as kube-scheduler's node filters judge it.

Why here, below the providers and the checks: the node guard asks it before adding simulated nodes,
a pod wait asks it to tell a pod the cluster's rules keep off every device node (a taint, a node
selector: not established) from one DRA refused (the check's verdict), and ``diagnose`` names the
same causes. Only taints, cordons, node selectors and required node affinity are judged here;
resources, volumes and ports are read from the scheduler's own message (:mod:`.refusals`).
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_harness.kube.types import Obj


def blocking_taints(node: Obj) -> list[Obj]:
    """The node's taints that keep a pod without a toleration off it (PreferNoSchedule only steers)."""
    return [t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint``, as the scheduler and the DaemonSet controller judge it."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":  # no key, Exists: every taint
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression(e: Obj, values: dict[str, str]) -> bool:
    key, op, wanted = e.get("key"), e.get("operator"), e.get("values") or []
    if op == "In":
        return key in values and values[key] in wanted
    if op == "NotIn":
        return key not in values or values[key] not in wanted
    if op == "Exists":
        return key in values
    if op == "DoesNotExist":
        return key not in values
    if op in ("Gt", "Lt") and key in values and wanted:
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if op == "Gt" else have < limit
    return False


def selects(pod_spec: Obj, node: Obj) -> bool:
    """Whether ``pod_spec``'s nodeSelector and required node affinity admit ``node``."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    # Terms are ORed; within a term every expression must hold; a term with none selects nothing.
    return any((term.get("matchExpressions") or term.get("matchFields"))
               and all(_expression(e, labels) for e in term.get("matchExpressions") or [])
               and all(_expression(e, fields) for e in term.get("matchFields") or [])
               for term in terms)


def lands(pod_spec: Obj, node: Obj) -> bool:
    """Whether a pod of ``pod_spec`` may be placed on ``node``: selected, and every taint tolerated."""
    tolerations = pod_spec.get("tolerations") or []
    return selects(pod_spec, node) and all(tolerates(tolerations, t) for t in blocking_taints(node))


#: What :func:`keeps_off` says of a node the pod's node selector or required affinity does not admit.
SELECTOR_MISMATCH = "node selector/affinity not matched"
#: The taint a cordon means to the scheduler (its NodeUnschedulable filter lets pods that tolerate it through).
CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def taint_text(taint: Obj) -> str:
    """``key=value:Effect`` as kubectl writes a taint (``key:Effect`` without a value)."""
    value = taint.get("value") or ""
    return f"{taint.get('key', '')}{'=' + value if value else ''}:{taint.get('effect', '')}"


def keeps_off(pod_spec: Obj, node: Obj) -> str | None:
    """What keeps a pod of ``pod_spec`` off ``node``, in the scheduler's order (cordon, taint, selector), or None.
    E.g. ``untolerated taint nvidia.com/gpu=present:NoSchedule``."""
    tolerations = pod_spec.get("tolerations") or []
    if node.get("spec", {}).get("unschedulable") and not tolerates(tolerations, CORDON):
        return "cordoned"
    for taint in blocking_taints(node):
        if not tolerates(tolerations, taint):
            return f"untolerated taint {taint_text(taint)}"
    if not selects(pod_spec, node):
        return SELECTOR_MISMATCH
    return None
