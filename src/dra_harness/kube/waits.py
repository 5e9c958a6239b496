"""Waits built on list+watch, with explicit deadlines and typed errors.

A wait never sleeps-and-polls an object the API server can watch: it lists once,
then follows the watch, so it sees every intermediate state (and can time the one it
waits for). On timeout it raises :class:`WaitTimeout` carrying the last state seen
and, when the caller can tell, *why* the object is still not there (for a pod: the
scheduler's message). A ``fail`` callback stops the wait early when a state can no
longer turn good, like lightkube's ``raise_for_conditions``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import urllib3

from .rest import Gone, Kube, Obj, Resource


class WaitError(AssertionError):
    """Base for wait failures; an AssertionError so pytest reports a failed check."""


class WaitTimeout(WaitError):
    def __init__(self, what: str, timeout: float, last: object, why: str = "") -> None:
        self.what, self.timeout, self.last, self.why = what, timeout, last, why
        msg = f"timed out after {timeout:.0f}s waiting for {what}"
        if why:
            msg += f": {why}"
        super().__init__(msg)


class WaitFailed(WaitError):
    def __init__(self, what: str, reason: str, last: object) -> None:
        self.what, self.reason, self.last = what, reason, last
        super().__init__(f"gave up waiting for {what}: {reason}")


@dataclass
class Snapshot:
    """Objects of one list+watch, keyed by namespace/name."""

    items: dict[str, Obj] = field(default_factory=dict)

    def apply(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if kind == "DELETED":
            self.items.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.items[key] = obj

    def values(self) -> list[Obj]:
        return list(self.items.values())


def watch_until(
    kube: Kube,
    res: Resource,
    done: Callable[[list[Obj]], bool],
    timeout: float,
    what: str,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    fail: Callable[[list[Obj]], str | None] | None = None,
    why: Callable[[list[Obj]], str] | None = None,
) -> list[Obj]:
    """Follow ``res`` until ``done(objects)`` holds; return the objects at that moment."""
    deadline = time.monotonic() + timeout
    snap = Snapshot()

    def relist() -> str:
        items, version = kube.list_with_version(res, namespace, label_selector, field_selector)
        snap.items.clear()
        for item in items:
            snap.apply("ADDED", item)
        return version

    def check() -> bool:
        current = snap.values()
        if done(current):
            return True
        if fail is not None:
            reason = fail(current)
            if reason:
                raise WaitFailed(what, reason, current)
        return False

    rv = relist()
    if check():
        return snap.values()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            current = snap.values()
            raise WaitTimeout(what, timeout, current, why(current) if why else _summary(current))
        try:
            for kind, obj in kube.watch(
                res, namespace, rv, label_selector, field_selector, timeout_seconds=max(1, int(remaining))
            ):
                if kind == "BOOKMARK":
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    continue
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                snap.apply(kind, obj)
                if check():
                    return snap.values()
                if time.monotonic() > deadline:
                    break
        except Gone:
            rv = relist()
            if check():
                return snap.values()
        except urllib3.exceptions.ReadTimeoutError:
            pass


def wait_for_object(
    kube: Kube,
    res: Resource,
    name: str,
    condition: Callable[[Obj], bool],
    timeout: float,
    what: str,
    namespace: str | None = None,
    fail: Callable[[Obj], str | None] | None = None,
    why: Callable[[Obj | None], str] | None = None,
) -> Obj:
    """Wait until the named object exists and ``condition(obj)`` holds."""
    objs = watch_until(
        kube,
        res,
        lambda items: bool(items) and condition(items[0]),
        timeout,
        what,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        fail=(lambda items: fail(items[0]) if items else None) if fail else None,
        why=(lambda items: why(items[0] if items else None)) if why else None,
    )
    return objs[0]


def wait_for_deletion(kube: Kube, res: Resource, name: str, timeout: float, namespace: str | None = None) -> None:
    watch_until(
        kube,
        res,
        lambda items: not items,
        timeout,
        f"{res.kind} {namespace + '/' if namespace else ''}{name} to be deleted",
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        why=lambda items: _summary(items),
    )


def _summary(items: list[Obj]) -> str:
    if not items:
        return "last state: nothing matched"
    names = [f"{o['metadata'].get('name')}" for o in items[:5]]
    return f"last state: {len(items)} object(s) ({', '.join(names)})"
