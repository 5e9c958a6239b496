"""Negative controls for the partition suite: each injected fault flips the check aimed at it.

- a slice that publishes every counter at twice the hardware's value: slices over-committed;
- a profile the layout has but the slices leave out: requests wait while a placement is free;
- a tenant without its ResourceQuota: the tenant holds more than its quota.
"""

from __future__ import annotations

from dra_harness.partitions import checks, stream
from dra_harness.partitions.layout import parse
from dra_harness.partitions.objects import PartitionCluster

PROFILES = {"1g": {"slices": 1, "starts": [0, 1, 2, 3, 4, 5, 6]}, "2g": {"slices": 2, "starts": [0, 2, 4]},
            "3g": {"slices": 3, "starts": [0, 4]}, "7g": {"slices": 7, "starts": [0]}}


def _layout(mix: dict[str, int], requests: int, tenants: dict | None = None):
    return parse({"name": "control", "seed": 3, "nodes": 1, "gpus_per_node": 2, "memory_slices": 7,
                  "profiles": PROFILES, "tenants": tenants or {"a": {}},
                  "stream": {"fill": {"requests": requests, "mix": mix}}}, "<control>")


def _run(small_cluster, layout, fault: str, stall_s: float = 60.0) -> dict:
    kube = small_cluster.kube()
    pc = PartitionCluster(kube, layout, "controls", faults=(fault,))
    pc.create()
    try:
        return stream.run(kube, pc, stall_s=stall_s)
    finally:
        pc.delete()


def test_a_slice_that_double_counts_its_counters_is_caught_over_committing(small_cluster):
    result = _run(small_cluster, _layout({"1g": 2, "2g": 1, "3g": 1}, 30), "double-count")
    bad = checks.overcommitted(result)
    assert bad and all("memory slice" in b and " and " in b for b in bad), bad
    assert result["phases"][0]["scheduled"] > 14, "the doubled counters should let more partitions in than fit"
    assert not checks.left_waiting(result)  # the fault shows in the check aimed at it, not elsewhere


def test_a_profile_the_slices_leave_out_is_caught_waiting_while_its_placement_is_free(small_cluster):
    result = _run(small_cluster, _layout({"7g": 1}, 2), "no-7g", stall_s=8.0)
    bad = checks.left_waiting(result)
    assert len(bad) == 2 and all("(7g) refused while" in b for b in bad), bad
    assert result["phases"][0]["settled"] is False
    assert not checks.overcommitted(result)


def test_a_tenant_without_its_resource_quota_is_caught_over_its_quota(small_cluster):
    result = _run(small_cluster, _layout({"1g": 1}, 4, {"a": {"quota": {"1g": 1}}}), "no-quota")
    assert checks.over_quota(result) == ["fill: tenant a holds 4 claims of 1g, its quota is 1"]
    assert checks.quota_untested(result) == "no tenant ever reached its quota, so no refusal was seen"


def test_with_its_quota_the_same_tenant_is_refused_at_claim_creation(small_cluster):
    kube = small_cluster.kube()
    pc = PartitionCluster(kube, _layout({"1g": 1}, 4, {"a": {"quota": {"1g": 1}}}), "controls")
    pc.create()
    try:
        result = stream.run(kube, pc)
    finally:
        pc.delete()
    assert not checks.over_quota(result) and checks.quota_untested(result) is None
    assert result["phases"][0]["tenants"]["a"] == {"claims": {"1g": 1}, "allocated": {"1g": 1}, "quota": {"1g": 1},
                                                   "refused_by_quota": 3}
