"""What a check needs from the cluster, declared where the check is, judged against the preflight.

A check says ``@pytest.mark.requires(needs.container_node, needs.free_devices(8, same_node=True))``;
before it creates anything, the plugin asks each need of the preflight's facts
(:mod:`dra_harness.checks.preflight`) and, when one is missing, reports the check as
"not established" with that fact. A fact the preflight could not gather is no reason to
refuse: the check then runs, and its own waits say what they see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dra_harness.checks.preflight import Facts
from dra_harness.errors import NotEstablished

#: Image states that say the probe image runs (or may: an undecided pull is no refusal).
_RUNNABLE = ("usable", "imported by the harness", "unknown", "not probed")


@dataclass(frozen=True)
class Need:
    name: str
    judge: Callable[[Facts], str | None]  # why it is missing, or None

    def missing(self, facts: Facts) -> str | None:
        return self.judge(facts)

    def __repr__(self) -> str:
        return self.name


def _container_node(f: Facts) -> str | None:
    if f.container_nodes():
        return None
    real = [n.name for n in f.nodes.values() if not n.simulated and n.published]
    if real:
        return f"no node that runs containers is schedulable ({', '.join(real)}: cordoned or tainted)"
    return f"no node runs real containers with {f.driver}'s devices (simulated nodes only)"


def _image(f: Facts) -> str | None:
    nodes = f.container_nodes()
    if not nodes or any(n.image in _RUNNABLE for n in nodes):
        return None
    return f"the probe image {f.probe_image} cannot run on any node ({nodes[0].name}: {nodes[0].image_evidence}); pass --shell-image"


def _restartable(f: Facts) -> str | None:
    if f.driver_controlled:
        return None
    if not f.driver_daemonset:
        return f"the driver is not a pod the harness can restart: {f.driver_evidence}"
    if f.rights.get("delete-driver-pods") is False:
        return f"the identity may not delete pods of {f.driver_daemonset} ({f.rights_evidence.get('delete-driver-pods', '')})"
    return None


def _disruptable(f: Facts) -> str | None:
    if any(n.disruptable and n.published for n in f.nodes.values()):
        return None
    return "no schedulable node labelled dra-harness.io/disruptable=true publishes the driver's devices"


container_node = Need("container_node", _container_node)
#: Where no node runs containers there is nothing to pull: the check's own skip says so.
pullable_image = Need("pullable_image", _image)
restartable_driver = Need("restartable_driver", _restartable)
disruptable_node = Need("disruptable_node", _disruptable)


def _any_device(f: Facts) -> str | None:
    if any(n.published for n in f.nodes.values()) or any("slice" in e.lower() for e in f.errors):
        return None  # devices, or the slices could not be read (the check's own reads say so)
    return (f"{f.driver} publishes no device on any node (a GPU pool scaled to zero, or a driver that publishes "
            "nothing); the inventory checks judge that against --expected-hardware")


any_device = Need("any_device", _any_device)


def free_devices(count: int, same_node: bool = False, on: str | None = None, besides: str | None = None) -> Need:
    """``count`` devices nobody else holds, on schedulable nodes: on one node with ``same_node``, on node ``on``,
    or on nodes other than ``besides`` (where a drained node's pods must go)."""
    def judge(f: Facts) -> str | None:
        if over := namespace_devices(count).missing(f):
            return over
        nodes = [n for n in f.nodes.values() if n.schedulable and (on is None or n.name == on) and n.name != besides]
        free = max((n.free for n in nodes), default=0) if same_node or on else sum(n.free for n in nodes)
        if free >= count:
            return None
        where = (f"on {on}" if on else "on one schedulable node" if same_node else "on schedulable nodes") + (
            f" other than {besides}" if besides else "")
        held = sum(len(n.held_by_others) for n in f.nodes.values())
        return f"needs {count} free devices {where}; the preflight saw {free} ({held} held by other workloads)"
    scope = ", same_node" if same_node else f", on={on}" if on else ""
    return Need(f"free_devices({count}{scope}{f', besides={besides}' if besides else ''})", judge)


def namespace_devices(count: int | Callable[[Facts], int], what: str = "") -> Need:
    """``count`` devices requested in the check's own namespace (or as many as ``count(facts)`` says, e.g. a
    node's size), within what a ResourceQuota the cluster puts in every new namespace allows."""
    def judge(f: Facts) -> str | None:
        quota = f.namespace_device_quota()
        wanted = count(f) if callable(count) else count
        if quota is None or wanted <= quota[1]:
            return None
        return (f"needs {wanted} devices in its namespace; a ResourceQuota the cluster puts in every new namespace "
                f"allows {quota[1]} of DeviceClass {quota[0]} ({', '.join(f.admission.get('resource_quotas', []))})")
    return Need(f"namespace_devices({what or count})", judge)


def largest_node(f: Facts) -> int:
    """Devices the largest node publishes (a request for a whole node asks that many)."""
    return max((n.published for n in f.nodes.values()), default=0)


def whole_node() -> Need:
    """A schedulable node none of whose devices anyone else holds."""
    def judge(f: Facts) -> str | None:
        if f.whole_free_nodes():
            return None
        busy = {n.name: len(n.held_by_others) for n in f.nodes.values() if n.published and n.held_by_others}
        closed = [n.name for n in f.nodes.values() if n.published and not n.schedulable]
        return (f"no whole node is free: devices held by others on {busy or 'none'}; "
                f"unschedulable: {', '.join(closed) or 'none'}")
    return Need("whole_node", judge)


def right(name: str) -> Need:
    """A right of :data:`dra_harness.checks.preflight.RIGHTS` (not asked, or unknown: no refusal)."""
    def judge(f: Facts) -> str | None:
        if f.rights.get(name) is False:
            return f"the identity {f.identity or '(unknown)'} lacks a right: {f.rights_evidence.get(name, name)}"
        return None
    return Need(f"right({name})", judge)


def unmet(facts: Facts, needs: list[Need]) -> str | None:
    """The first need ``facts`` do not meet, said in one line; None when all are met."""
    return next((f"{n.name}: {why}" for n in needs if (why := n.missing(facts))), None)


def demand(facts: Facts, *wanted: Need) -> None:
    """Inside a check whose needs depend on what it reads first: not established at once unless all are met."""
    why = unmet(facts, list(wanted))
    if why:
        raise NotEstablished(why)
