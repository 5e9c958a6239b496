"""An in-memory stand-in for the API server's object store, for the node-change and sweep tests.

Why a fake rather than a cluster: the cases that matter (an operator's edit landing between
a read and a patch, a 429 storm on deletes) are timing accidents on a real API server;
here they are scripted. It keeps what those code paths read: resourceVersions that move
on every write, JSON patches with ``test`` ops that fail as the API server's do (422,
nothing changed), and the managedFields owner of ``spec.unschedulable``.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

from dra_harness.kube import rest


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict] = {}  # (kind, namespace, name) -> object
        self.version = 100
        self.calls: list[tuple[str, str, str]] = []  # (verb, kind, name)
        #: Called before each request as (verb, kind, name); what it raises is the request's answer.
        self.before: Callable[[str, str, str], None] = lambda verb, kind, name: None
        #: Called after each successful read of a node, before the caller can act on it (an operator's edit).
        self.after_read: Callable[[str], None] = lambda name: None
        #: Discovery paths (``/apis/group/version``) the fake serves, with their plurals; any other serves nothing.
        self.served: dict[str, list[str]] = {}
        #: The API server's clock (:meth:`server_date`); objects added are created at it unless told otherwise.
        self.now = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)

    # -- setting up ---------------------------------------------------------------------
    def add(self, res: rest.Resource, name: str, namespace: str | None = None, labels: dict | None = None,
            annotations: dict | None = None, spec: dict | None = None, age_s: float = 0.0) -> dict:
        created = (self.now - dt.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "creationTimestamp": created}
        if namespace:
            meta["namespace"] = namespace
        if annotations:
            meta["annotations"] = dict(annotations)
        obj = {"metadata": meta, "spec": dict(spec or {})}
        self.objects[(res.kind, namespace, name)] = obj
        self._bump(obj)
        return obj

    def node(self, name: str) -> dict:
        return self.objects[("Node", None, name)]

    def operator_sets_unschedulable(self, name: str, value: bool, manager: str = "kubectl-cordon") -> None:
        """What ``kubectl cordon``/``uncordon`` does: one write, whose manager then owns the field."""
        node = self.node(name)
        if value:
            node["spec"]["unschedulable"] = True
        else:
            node["spec"].pop("unschedulable", None)
        self._own(node, manager)
        self._bump(node)

    # -- the verbs the code under test calls ------------------------------------------------
    def get(self, res: rest.Resource, name: str, namespace: str | None = None) -> dict:
        self._call("GET", res, name)
        try:
            obj = copy.deepcopy(self.objects[(res.kind, namespace, name)])
        except KeyError:
            raise rest.NotFound(404, "NotFound", f"{res.kind} {name} not found") from None
        if res is rest.NODES:
            self.after_read(name)
        return obj

    def list(self, res: rest.Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict]:
        self._call("LIST", res, label_selector or "")
        return [copy.deepcopy(o) for (kind, ns, _), o in self.objects.items()
                if kind == res.kind and (namespace is None or ns == namespace) and _selects(label_selector, o)]

    def list_with_version(self, res: rest.Resource, namespace: str | None = None, label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[dict], str]:
        return self.list(res, namespace, label_selector, field_selector), str(self.version)

    def watch(self, *_: Any, **__: Any) -> Any:
        return iter(())  # nothing changes while nobody writes: the store is changed only by the test's own calls

    def request(self, method: str, path: str, *_: Any, **__: Any) -> dict:
        """Discovery only: the fake serves the optional API groups in :attr:`served` (by default none)."""
        self.calls.append((method, "discovery", path))
        self.before(method, "discovery", path)
        return {"resources": [{"name": plural} for plural in self.served.get(path, [])]}

    def server_date(self) -> dt.datetime:
        return self.now

    def delete(self, res: rest.Resource, name: str, namespace: str | None = None, **_: Any) -> None:
        self._call("DELETE", res, name)
        self.objects.pop((res.kind, namespace, name), None)

    def patch(self, res: rest.Resource, name: str, patch: Any, namespace: str | None = None, kind: str = "merge",
              sub: str | None = None, field_manager: str | None = None) -> dict:
        self._call("PATCH", res, name)
        key = (res.kind, namespace, name)
        if key not in self.objects:
            raise rest.NotFound(404, "NotFound", f"{res.kind} {name} not found")
        obj = copy.deepcopy(self.objects[key])
        before = obj["spec"].get("unschedulable")
        if kind == "json":
            for op in patch:
                _apply(obj, op)
        else:  # a merge patch, as the harness's blind cordon used to send (the negative controls run it)
            _merge(obj, patch)
        if obj["spec"].get("unschedulable") != before:
            self._own(obj, field_manager or "unknown")
        self._bump(obj)
        self.objects[key] = obj
        return copy.deepcopy(obj)

    # -- internals --------------------------------------------------------------------------
    def _call(self, verb: str, res: rest.Resource, name: str) -> None:
        self.calls.append((verb, res.kind, name))
        self.before(verb, res.kind, name)

    def _bump(self, obj: dict) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    @staticmethod
    def _own(obj: dict, manager: str) -> None:
        """Ownership of ``spec.unschedulable`` moves to its last writer; the field unset, nobody owns it."""
        fields = [m for m in obj["metadata"].get("managedFields", [])
                  if "f:unschedulable" not in m["fieldsV1"].get("f:spec", {})]
        if obj["spec"].get("unschedulable"):
            fields.append({"manager": manager, "operation": "Update", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:spec": {"f:unschedulable": {}}}})
        obj["metadata"]["managedFields"] = fields


def _selects(selector: str | None, obj: dict) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=")
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=")
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _apply(obj: dict, op: dict) -> None:
    *parents, last = [_unescape(t) for t in op["path"].lstrip("/").split("/")]
    target = obj
    for token in parents:
        if not isinstance(target, dict) or token not in target:
            raise rest.ApiError(422, "", f"the path {op['path']!r} does not exist")
        target = target[token]
    if op["op"] == "test":
        if target.get(last, object()) != op["value"]:
            raise rest.ApiError(422, "", f"testing value {op['path']} failed")
    elif op["op"] in ("add", "replace"):
        target[last] = copy.deepcopy(op["value"])
    elif op["op"] == "remove":
        if last not in target:
            raise rest.ApiError(422, "", f"the path {op['path']!r} does not exist")
        del target[last]
    else:
        raise AssertionError(f"op {op['op']} not faked")
