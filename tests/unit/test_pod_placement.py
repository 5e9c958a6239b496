"""Where a pod stands, read from its status alone: for a wait that accepts running or unschedulable, and in the
line a pod wait's timeout gives for each pod."""

from __future__ import annotations

from dra_harness.kube.podstates import describe
from dra_harness.kube.pods import only_conditions_block, placement


def _pod(phase: str, reason: str | None = None) -> dict:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": reason}] if reason else []
    return {"status": {"phase": phase, "conditions": conditions}}


def test_a_running_pod_an_unschedulable_one_and_one_still_waiting_are_told_apart():
    assert placement(_pod("Running")) == "running"
    assert placement(_pod("Pending", "Unschedulable")) == "unschedulable"
    # Negative controls: not yet seen by the scheduler, or bound and starting, is neither.
    assert placement(_pod("Pending")) == "pending"
    assert placement(_pod("Pending", "SchedulerError")) == "pending"
    assert placement({}) == "pending"


def test_a_pod_is_described_by_its_phase_node_first_unmet_condition_and_waiting_containers():
    starting = {"metadata": {"name": "readers-1"}, "spec": {"nodeName": "w1"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodReadyToStartContainers", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert describe(starting) == "readers-1: Pending on w1; PodReadyToStartContainers False; container c: ContainerCreating"
    refused = {"metadata": {"name": "x", "deletionTimestamp": "t"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available"}]}}
    assert describe(refused) == "x: Pending, being deleted; PodScheduled False (Unschedulable: 0/2 nodes are available)"
    assert describe({"metadata": {"name": "new"}}) == "new: ?"


def _node(ready: str, taints: list[str] = (), cordoned: bool = False) -> dict:
    return {"spec": {"unschedulable": cordoned, "taints": [{"key": k, "effect": e} for k, e in (t.split(":") for t in taints)]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_only_a_node_the_node_controller_alone_keeps_out_is_one_that_comes_back_by_itself():
    assert only_conditions_block(_node("False"))
    assert only_conditions_block(_node("True", ["node.kubernetes.io/not-ready:NoExecute"]))
    assert only_conditions_block(_node("Unknown", ["node.kubernetes.io/unreachable:NoSchedule", "nvidia.com/gpu:NoSchedule"])) is False
    assert not only_conditions_block(_node("True"))  # nothing keeps it out
    assert not only_conditions_block(_node("False", cordoned=True))  # the owner's cordon stays until lifted
    assert not only_conditions_block(_node("True", ["maintenance:NoExecute"]))
    assert not only_conditions_block(_node("True", ["node.kubernetes.io/not-ready:PreferNoSchedule"]))
