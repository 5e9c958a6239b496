"""Server-side apply of arbitrary manifests (the driver's DaemonSet, RBAC, DeviceClass) over the REST core.

Why not kubectl: the kind provider must work where only Python, Docker and kind are
installed, and the REST core already carries the connection. Kinds are resolved
through discovery, so any object the server serves can be applied; an unknown kind
is a one-line error naming it.
"""

from __future__ import annotations

from functools import cache

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.errors import ClusterError
from dra_harness.kube.types import Obj

FIELD_MANAGER = "dra-harness"


class ApplyError(ClusterError):
    """A manifest names a kind the server does not serve, or is malformed (one line).

    Not ``ManifestError``: :class:`dra_harness.providers.driver_manifests.ManifestError`
    is the driver manifest file that could not be rendered.
    """


@cache
def _discovery(kube: Kube, api_version: str) -> tuple[tuple[str, str, bool], ...]:
    path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    try:
        found = kube.request("GET", path)
    except rest.NotFound:
        return ()
    return tuple(
        (r["kind"], r["name"], bool(r.get("namespaced")))
        for r in found.get("resources", [])
        if "/" not in r["name"]
    )


def resource_for(kube: Kube, api_version: str, kind: str) -> rest.Resource:
    for k, plural, namespaced in _discovery(kube, api_version):
        if k == kind:
            group, _, version = api_version.rpartition("/")
            return rest.Resource(group, version, plural, kind, namespaced)
    raise ApplyError(f"the cluster serves no {kind} in {api_version}")


def apply(kube: Kube, obj: Obj, namespace: str | None = None) -> Obj:
    """Create or update ``obj`` by server-side apply (we own the fields we set)."""
    try:
        api_version, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    except (KeyError, TypeError) as e:
        raise ApplyError(f"manifest object without apiVersion, kind or metadata.name: {str(obj)[:80]}") from e
    res = resource_for(kube, api_version, kind)
    ns = (obj["metadata"].get("namespace") or namespace) if res.namespaced else None
    if res.namespaced and not ns:
        raise ApplyError(f"{kind} {name} needs a namespace")
    return kube.request(
        "PATCH", res.path(ns, name), kube.rules.shape(kind, obj),
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
        content_type="application/apply-patch+yaml",
    )


def apply_all(kube: Kube, objects: list[Obj]) -> list[str]:
    """Apply in dependency order (namespaces and CRDs first); returns ``Kind/name`` of each."""
    first = {"Namespace": 0, "CustomResourceDefinition": 0, "ServiceAccount": 1, "ClusterRole": 1, "Role": 1}
    done = []
    for obj in sorted((o for o in objects if o), key=lambda o: first.get(o.get("kind", ""), 2)):
        apply(kube, obj)
        done.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return done
