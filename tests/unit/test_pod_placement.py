"""Where a pod stands for a wait that accepts running or unschedulable, read from its status alone."""

from __future__ import annotations

from dra_harness.kube.pods import placement


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
