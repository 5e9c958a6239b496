"""A gang that does not fit: N pods of one PodGroup whose claims can take N devices of a node, one held elsewhere.

Why its own module: the suite's check (no member binds while the gang cannot all fit) and its
negative control (the same pods without a PodGroup: N-1 bind) must build the same situation,
or the control proves nothing about the check. The devices are pinned by a CEL selector on an
attribute unique per device (``uuid`` where the profile has one, else ``index``), so other
tests' claims on the same cluster cannot make the gang fit or not fit by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_harness.errors import NotEstablished
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_running
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitTimeout, watch_until
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.handle import ClusterHandle

HOLDER = "holder"
TEMPLATE = "gang-gpu"
GROUP = "gang"


@dataclass(frozen=True)
class Gang:
    node: str
    devices: list[Obj]  # the N devices the members may take; the last is the holder's
    members: list[str]


def free_devices(cluster: ClusterHandle, count: int) -> tuple[str, list[Obj]]:
    """A node the harness's pods may use (not cordoned, no taint its rules do not tolerate) with ``count`` devices nobody
    holds, and those devices (lowest names first). A drawn staging shape cordoned the node with the most free devices."""
    usable = set(cluster.schedulable_nodes())
    for node, devices in sorted(cluster.free_devices().items()):
        if node in usable and len(devices) >= count:
            return node, devices[:count]
    raise NotEstablished(f"no schedulable node has {count} free devices of {cluster.driver} for the gang check")


def _only(cluster: ClusterHandle, devices: list[Obj]) -> list[str]:
    key = "uuid" if "uuid" in cluster.profile.attributes else "index"
    values = [cluster.profile.device_attribute(d, key) for d in devices]
    if any(v is None for v in values):
        raise NotEstablished(f"the devices publish no {key} attribute to pin the gang's claims to")
    return [f"{cluster.profile.cel_attribute(key)} in [{', '.join(repr(v) for v in values)}]"]


def start(cluster: ClusterHandle, namespace: str, size: int, podgroups: rest.Resource | None) -> Gang:
    """The holder running on the last of ``size`` free devices, then ``size`` members (of a PodGroup with gang
    minCount ``size`` when ``podgroups`` is given, else plain pods: the negative control)."""
    node, devices = free_devices(cluster, size)
    cluster.claim(namespace, HOLDER, cluster.request(selectors=_only(cluster, devices[-1:])))
    cluster.pod(namespace, HOLDER, claim=HOLDER, node_name=node)
    wait_running(cluster.kube, namespace, HOLDER, timeout=60)
    cluster.template(namespace, TEMPLATE, cluster.request(selectors=_only(cluster, devices)))
    if podgroups is not None:
        cluster.kube.create(podgroups, {"apiVersion": podgroups.api_version, "kind": "PodGroup",
                                        "metadata": {"name": GROUP, "labels": {RUN_LABEL: cluster.run_id}},
                                        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}, namespace)
    members = [f"member-{i}" for i in range(size)]
    for name in members:
        body = builders.pod(name, cluster.run_id, claims={"gpu": {"template": TEMPLATE}}, node_name=node)
        if podgroups is not None:
            body["spec"]["schedulingGroup"] = {"podGroupName": GROUP}
        cluster.kube.create(rest.PODS, body, namespace)
    return Gang(node, devices, members)


def bound_within(cluster: ClusterHandle, namespace: str, gang: Gang, seconds: float) -> list[str]:
    """The members bound to a node as soon as one is, or none after ``seconds``."""
    def bound(pods: list[Obj]) -> list[str]:
        return sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"] in gang.members and p["spec"].get("nodeName"))

    try:
        return bound(watch_until(cluster.kube, rest.PODS, lambda pods: bool(bound(pods)), seconds,
                                 "a member of the gang to bind", namespace=namespace, environment=False))
    except WaitTimeout:
        return []  # had any bound, the wait would have ended
