"""A real node rebooted with pods holding claims on it: does each come back, and if not, why not.

Why a finding and not an invariant: after a reboot the kubelet's checkpoint says the claims are
prepared, so it does not ask the driver again, while the CDI specs the driver wrote are gone with
/run; containerd then cannot resolve the claim's CDI devices (upstream kubernetes issue 141433).
That is upstream behaviour a team must plan for (drain before reboot), so it is reported with the
pod's own words and events, whichever way it goes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dra_harness.kube import rest
from dra_harness.kube.events import events_for
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import watch_until
from dra_harness.providers.local import LocalClusterApi
from dra_harness.upgrade.workloads import wait_published

#: Waiting reasons that mean the container will not start as things stand.
STUCK = ("CreateContainerError", "RunContainerError", "CreateContainerConfigError", "ContainerCannotRun")
SETTLE_DEADLINE_S = 120.0


@dataclass
class RebootResult:
    node: str
    ready_after_s: float
    devices_after_s: float
    #: pod -> "came back" or "<reason>: <message>".
    pods: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def finding(self) -> str:
        back = [p for p, o in self.pods.items() if o == "came back"]
        stuck = {p: o for p, o in self.pods.items() if o != "came back"}
        text = (f"after a reboot of {self.node} (containers killed, /run emptied, containerd, kubelet and driver started): "
                f"node Ready in {self.ready_after_s:.1f} s, its devices published in {self.devices_after_s:.1f} s; "
                f"{len(back)} of {len(self.pods)} pods with claims came back")
        if stuck:
            first = next(iter(stuck.values()))
            text += f"; {len(stuck)} did not: {first[:240]}"
        return text


def _container(pod: Obj) -> Obj:
    container: Obj = (pod["status"].get("containerStatuses") or [{}])[0]
    return container


def _outcome(pod: Obj, restarts_before: int) -> str | None:
    c = _container(pod)
    state = c.get("state") or {}
    if "running" in state and c.get("restartCount", 0) > restarts_before:
        return "came back"
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in STUCK:
        return f"{waiting['reason']}: {waiting.get('message', '')}"
    return None


def observe(cluster: LocalClusterApi, kube: Kube, namespace: str, pods: list[str], node: str, devices: int) -> RebootResult:
    """Reboot ``node`` and wait until each of ``pods`` (on it, in ``namespace``) comes back or is stuck."""
    restarts = {p: _container(kube.get(rest.PODS, p, namespace)).get("restartCount", 0) for p in pods}
    ready = cluster.reboot(node)
    booted = time.monotonic() - ready
    wait_published(kube, node, devices, time.monotonic() + SETTLE_DEADLINE_S)
    result = RebootResult(node, round(ready, 3), round(time.monotonic() - booted, 3))
    settled = watch_until(
        kube, rest.PODS,
        lambda ps: all(_outcome(p, restarts[p["metadata"]["name"]]) for p in ps if p["metadata"]["name"] in restarts),
        SETTLE_DEADLINE_S, f"pods on {node} to run again or to be stuck creating their containers", namespace=namespace,
        environment=False)  # a stuck container is this wait's finding, not a reason to stop it
    for p in settled:
        name = p["metadata"]["name"]
        if name in restarts:
            result.pods[name] = _outcome(p, restarts[name]) or "unsettled"
            result.warnings += [f"{name}: {e.get('reason')}: {e.get('message', '')[:200]}"
                                for e in events_for(kube, namespace, name) if e.get("type") == "Warning"][-2:]
    return result
