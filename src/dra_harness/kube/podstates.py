"""Pod states that cannot turn good by waiting, and whose fault they are.

A wait that sees ``ErrImagePull`` and still waits out its 120 s, then reports FAIL,
blames the cluster's DRA for an image it could not pull (an air-gapped cluster: 7 false
FAILs in one staging run). Here a pod state is read once and sorted into two kinds:

- **environment**: the cluster does not let us test (the image cannot be pulled, the
  pod's configuration cannot be met there, e.g. ``runAsNonRoot`` against an image that
  runs as root under an enforced PodSecurity level). The check is *not established*.
- **product**: the container could not be created or started for a reason of the node's
  runtime or the driver (a CDI device the driver did not write). The check FAILs, at once.

The kubelet retries both kinds; what it says on the first try is what it says on the last,
so the first sighting decides. A pod being deleted decides nothing.

When a wait does time out, :func:`describe` says in one line where each pod it waited on stands.
"""

from __future__ import annotations

from dra_harness.kube.types import Obj

#: Waiting reasons of a container that mean the cluster cannot run our probe as written.
ENVIRONMENT = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                         "CreateContainerConfigError"})
#: Waiting reasons that mean the node's runtime or the driver failed the container.
PRODUCT = frozenset({"CreateContainerError", "RunContainerError"})


def _waiting(pod: Obj) -> list[tuple[str, str, str]]:
    """(container, reason, message) of every container and init container waiting."""
    status = pod.get("status") or {}
    out = []
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            out.append((c.get("name", "?"), waiting["reason"], (waiting.get("message") or "").strip()))
    return out


def blocked(pod: Obj, reasons: frozenset[str]) -> str | None:
    """Why ``pod`` cannot run, if one of its containers waits for one of ``reasons``; None otherwise."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return None
    for container, reason, message in _waiting(pod):
        if reason in reasons:
            name = f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name', '')}"
            return f"pod {name} container {container}: {reason}" + (f": {message[:300]}" if message else "")
    return None


def environment_blocker(pods: list[Obj]) -> str | None:
    """The first pod the cluster will not let run as written (see :data:`ENVIRONMENT`), said in one line."""
    return next((why for p in pods if (why := blocked(p, ENVIRONMENT))), None)


def product_failure(pod: Obj) -> str | None:
    """Why the node failed ``pod``'s container (see :data:`PRODUCT`), or None."""
    return blocked(pod, PRODUCT)


def describe(pod: Obj) -> str:
    """Where one pod stands, in a line: phase and node, the first condition not met, every container waiting.
    E.g. ``readers-1: Pending on w1; PodReadyToStartContainers False; container c: ContainerCreating``."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    text = f"{meta.get('name')}: {status.get('phase', '?')}" + (f" on {node}" if node else "")
    if meta.get("deletionTimestamp"):
        text += ", being deleted"
    unmet = next((c for c in status.get("conditions") or [] if c.get("status") != "True"), None)
    if unmet:
        said = ": ".join(x for x in (unmet.get("reason"), (unmet.get("message") or "")[:300]) if x)
        text += f"; {unmet.get('type')} {unmet.get('status')}" + (f" ({said})" if said else "")
    for container, reason, message in _waiting(pod):
        text += f"; container {container}: {reason}" + (f": {message[:300]}" if message else "")
    return text
