"""A cordon the harness puts on a node it does not own, recorded on the node and undone only while still its own.

Why on the node: a run killed outright (the OOM killer, a CI timeout, a lost runner) keeps
nothing it remembered in memory, so a cordon remembered only there stayed for good, and
every later run took the node for someone's maintenance. :func:`cordon` sets
:data:`~dra_harness.labels.CORDONED_BY_ANNOTATION` (the run id) in the same patch as
``spec.unschedulable``, so no node is ever cordoned by the harness without the record;
the test's restore, the end-of-run sweep and the kill watchdog all undo it through
:func:`uncordon`.

Why guarded: between the cordon and its undo an operator may have taken the node over
(uncordoned it, or uncordoned and cordoned it again for their own maintenance). The
undo is one JSON patch whose ``test`` ops require the node exactly as the read that
judged it (its resourceVersion), with the annotation naming the run and the node still
unschedulable; the read also requires the harness to be the last writer of
``spec.unschedulable`` (managedFields, where the server keeps them). Anything else
leaves the node as it is and says why. What cannot be seen is a ``kubectl cordon`` of a
node already cordoned (kubectl sends nothing): an operator keeps such a node by removing
the annotation.

No other change to a node the harness does not own exists today: its taints and labels
go only on the simulated nodes it creates, and leave with them.
"""

from __future__ import annotations

import logging

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import CORDONED_BY_ANNOTATION

log = logging.getLogger(__name__)

#: The cordon's writer in managedFields: its own name, not the client's default (``dra-harness``, from its
#: User-Agent), so no other write of the harness's passes for it.
FIELD_MANAGER = "dra-harness-cordon"
#: Reads and guarded patches per change: a test op fails only when the node changed since its read (a kubelet's
#: status update), and each retry judges the node afresh.
ATTEMPTS = 5
_ANNOTATION_PATH = "/metadata/annotations/" + CORDONED_BY_ANNOTATION.replace("~", "~0").replace("/", "~1")


class NodeKeptChanging(ClusterError):
    """The node changed between every read and patch; it was left as it was."""


def cordoned_by(node: Obj) -> str | None:
    """The run whose cordon the node records, or None."""
    return (node["metadata"].get("annotations") or {}).get(CORDONED_BY_ANNOTATION)


def cordon(kube: Kube, node: str, run_id: str) -> bool:
    """Cordon ``node`` with the run's record on it; False (nothing done) when it is cordoned already."""
    for _ in range(ATTEMPTS):
        obj = kube.get(rest.NODES, node)
        if obj["spec"].get("unschedulable"):
            return False
        record = ({"op": "add", "path": _ANNOTATION_PATH, "value": run_id} if "annotations" in obj["metadata"] else
                  {"op": "add", "path": "/metadata/annotations", "value": {CORDONED_BY_ANNOTATION: run_id}})
        ops = [_same_version(obj), record, {"op": "add", "path": "/spec/unschedulable", "value": True}]
        if _patched(kube, node, ops):
            return True
    raise NodeKeptChanging(f"node {node} changed between each of {ATTEMPTS} reads and its cordon: not cordoned")


def uncordon(kube: Kube, node: str, run_id: str) -> str | None:
    """Undo ``run_id``'s cordon of ``node``: None when done, else why the node was left as it is."""
    for _ in range(ATTEMPTS):
        try:
            obj = kube.get(rest.NODES, node)
        except rest.NotFound:
            return f"node {node} is gone"
        why = _not_ours(obj, run_id)
        if why:
            _forget(kube, obj, run_id)
            return why
        ops = [_same_version(obj),
               {"op": "test", "path": _ANNOTATION_PATH, "value": run_id},
               {"op": "test", "path": "/spec/unschedulable", "value": True},
               {"op": "remove", "path": _ANNOTATION_PATH},
               {"op": "remove", "path": "/spec/unschedulable"}]
        if _patched(kube, node, ops):
            return None
    return f"node {node} changed between each of {ATTEMPTS} reads and its uncordon: left cordoned"


def undo_run(kube: Kube, run_id: str) -> list[str]:
    """Uncordon every node whose record names ``run_id`` (after a kill, by the sweep or the watchdog); what was
    left cordoned, and why, for each node an operator took over meanwhile (also logged)."""
    kept = []
    for node in kube.list(rest.NODES):
        if cordoned_by(node) == run_id:
            why = uncordon(kube, node["metadata"]["name"], run_id)
            if why:
                log.warning("left node %s as it is: %s", node["metadata"]["name"], why)
                kept.append(why)
            else:
                log.info("uncordoned node %s, cordoned by run %s", node["metadata"]["name"], run_id)
    return kept


def _not_ours(node: Obj, run_id: str) -> str:
    """Why the node's cordon is no longer ``run_id``'s to undo; "" when it is."""
    name = node["metadata"]["name"]
    if cordoned_by(node) != run_id:
        return f"node {name} does not record a cordon of run {run_id} (someone removed the record): left as it is"
    if not node["spec"].get("unschedulable"):
        return f"node {name} was uncordoned by someone else meanwhile: left schedulable"
    writers = [m.get("manager", "?") for m in node["metadata"].get("managedFields") or []
               if "f:unschedulable" in ((m.get("fieldsV1") or {}).get("f:spec") or {})]
    others = [w for w in writers if w != FIELD_MANAGER]
    if others:
        return f"node {name} was cordoned again by {', '.join(others)} meanwhile: left cordoned"
    return ""


def _forget(kube: Kube, node: Obj, run_id: str) -> None:
    """Remove the run's record from a node it no longer owns the cordon of (only if the record is still the run's)."""
    if cordoned_by(node) != run_id:
        return
    try:
        kube.patch(rest.NODES, node["metadata"]["name"], [{"op": "test", "path": _ANNOTATION_PATH, "value": run_id},
                                                          {"op": "remove", "path": _ANNOTATION_PATH}],
                   kind="json", field_manager=FIELD_MANAGER)
    except rest.ApiError as e:
        if e.status not in (404, 409, 422):  # gone, or the record changed: nothing of ours to remove
            raise


def _same_version(node: Obj) -> Obj:
    return {"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]}


def _patched(kube: Kube, node: str, ops: list[Obj]) -> bool:
    """Apply ``ops``; False when a test op failed or a write conflicted (the node changed since it was read)."""
    try:
        kube.patch(rest.NODES, node, ops, kind="json", field_manager=FIELD_MANAGER)
    except rest.ApiError as e:
        if e.status in (409, 422):
            return False
        raise
    return True
