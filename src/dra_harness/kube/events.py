"""Events about one object or one namespace's objects, oldest first.

Why a module of its own: pod waits quote the warnings of the pods they time out on, and the
waits sit below the pod helpers that had this list.
"""

from __future__ import annotations

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj


def events_in(kube: Kube, namespace: str, field_selector: str) -> list[Obj]:
    """The namespace's events that ``field_selector`` selects (``type=Warning``...), oldest first."""
    events = kube.list(rest.EVENTS, namespace, field_selector=field_selector)
    return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def events_for(kube: Kube, namespace: str, name: str, kind: str = "Pod") -> list[Obj]:
    return events_in(kube, namespace, f"involvedObject.name={name},involvedObject.kind={kind}")


def warnings(kube: Kube, namespace: str, name: str, last: int = 3) -> list[str]:
    """``reason: message`` of the object's last ``last`` Warning events."""
    return [f"{e.get('reason')}: {e.get('message')}" for e in events_for(kube, namespace, name)
            if e.get("type") == "Warning"][-last:]
