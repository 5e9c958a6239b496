"""A staging cluster's namespace policies, for the staging twins: every new namespace gets a LimitRange and a
ResourceQuota on devices, moments after it is created.

Platform teams furnish each new namespace with defaults and limits through a policy engine
(Kyverno's generate rules, OpenShift's project template, Rancher's project quotas), and they
arrive a moment *after* the namespace, racing whatever its owner creates first. The harness
creates its own namespaces, so a twin must furnish them the way those engines do: from a
watch, without asking. :func:`furnishing` runs such a controller for as long as a twin is up.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

LIMIT_RANGE_NAME = "platform-defaults"
QUOTA_NAME = "platform-device-quota"
#: Container defaults and bounds as platform teams commonly set them.
LIMITS: Obj = {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
               "defaultRequest": {"cpu": "50m", "memory": "64Mi"}, "max": {"cpu": "2", "memory": "2Gi"}}


def furnishings(device_class: str, limit_range: bool, device_quota: int) -> list[tuple[rest.Resource, Obj]]:
    """What the policy puts in each new namespace: the LimitRange, and a quota of ``device_quota`` devices
    of ``device_class`` (0: none)."""
    out: list[tuple[rest.Resource, Obj]] = []
    if limit_range:
        out.append((rest.LIMIT_RANGES, {"metadata": {"name": LIMIT_RANGE_NAME}, "spec": {"limits": [LIMITS]}}))
    if device_quota:
        key = f"{device_class}.deviceclass.resource.k8s.io/devices"
        out.append((rest.RESOURCE_QUOTAS, {"metadata": {"name": QUOTA_NAME}, "spec": {"hard": {key: str(device_quota)}}}))
    return out


@contextmanager
def furnishing(kube: Kube, objects: list[tuple[rest.Resource, Obj]]) -> Iterator[None]:
    """Furnish every namespace created from now on with ``objects`` until the block ends. What it could not
    create is raised as :class:`ClusterError` when the block ends: a twin whose policy did not hold proves nothing."""
    if not objects:
        yield
        return
    stop = threading.Event()
    items, version = kube.list_with_version(rest.NAMESPACES)
    existing = {n["metadata"]["name"] for n in items}
    errors: list[str] = []

    def furnish(name: str) -> None:
        for res, body in objects:
            try:
                kube.create(res, body, name)
            except rest.ApiError as e:
                if e.status not in (403, 404, 409):  # 403/404: the namespace is terminating or gone already
                    errors.append(f"{res.kind} in {name}: {e}")

    def controller() -> None:
        rv = version
        while not stop.is_set():
            try:
                for kind, ns in kube.watch(rest.NAMESPACES, resource_version=rv, timeout_seconds=2):
                    rv = ns["metadata"].get("resourceVersion", rv)
                    name = ns["metadata"]["name"]
                    if kind == "ADDED" and name not in existing:
                        existing.add(name)
                        furnish(name)
                    if stop.is_set():
                        return
            except rest.Gone:
                fresh, rv = kube.list_with_version(rest.NAMESPACES)
                for ns in fresh:
                    if ns["metadata"]["name"] not in existing:
                        existing.add(ns["metadata"]["name"])
                        furnish(ns["metadata"]["name"])
            except (rest.ApiError, rest.Unreachable):
                stop.wait(0.5)

    thread = threading.Thread(target=controller, name="twin-namespace-policy", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
    if errors:
        raise ClusterError("the twin's namespace policy could not furnish: " + "; ".join(errors[:5]))
