"""The partition layout's model, computed from plain data: placements, over-commit, fragmentation, slice bodies."""

from __future__ import annotations

import pytest

from dra_harness import data
from dra_harness.partitions import checks
from dra_harness.partitions.layout import LayoutError, Request, fragmentation, free_placements, load, overcommits, parse
from dra_harness.partitions.objects import PartitionCluster

MIG = load(data.path("partitions") / "mig-7.yaml")


def _data(**over) -> dict:
    base = {"name": "t", "nodes": 1, "gpus_per_node": 1, "memory_slices": 7,
            "profiles": {"1g": {"slices": 1, "starts": [0, 1, 2, 3, 4, 5, 6]}, "3g": {"slices": 3, "starts": [0, 4]},
                         "7g": {"slices": 7, "starts": [0]}},
            "tenants": {"a": {}}, "stream": {"fill": {"requests": 3, "mix": {"1g": 1}}}}
    base.update(over)
    return base


def test_the_shipped_layout_has_the_mig_placements_of_an_h100():
    assert MIG.total_slices == 224 and len(MIG.partitions()) == 8 * 4 * (7 + 3 + 2 + 1 + 1)
    assert MIG.profiles["3g"] == (3, [0, 4]) and MIG.profiles["2g"] == (2, [0, 2, 4])


@pytest.mark.parametrize(("over", "message"), [
    ({"profiles": {"4g": {"slices": 4, "starts": [0, 4]}}}, "profiles.4g.starts: [4] run past memory slice 6"),
    ({"tenants": {"a": {"quota": {"9g": 1}}}}, "tenants.a.quota: no profile named 9g"),
    ({"stream": {"fill": {"requests": 1, "mix": {"2g": 1}}}}, "stream.fill.mix: no profile named 2g"),
    ({"gpus_per_node": 9}, "gpus_per_node"),
    ({"nodes": "eight"}, "nodes"),
])
def test_a_layout_that_cannot_be_built_is_one_line_naming_the_field(over, message):
    with pytest.raises(LayoutError) as e:
        parse(_data(**over), "f.yaml")
    assert str(e.value).startswith("layout file f.yaml") and message in str(e.value) and "\n" not in str(e.value)


def test_two_partitions_over_one_memory_slice_are_over_committed_and_disjoint_ones_are_not():
    layout = parse(_data(), "f")
    assert overcommits(layout, {(0, "gpu0-3g-0"): "x", (0, "gpu0-1g-3"): "y", (0, "gpu0-3g-4"): "z"}) == []
    bad = overcommits(layout, {(0, "gpu0-3g-0"): "x", (0, "gpu0-1g-2"): "y"})
    assert bad == ["node 0 gpu 0 memory slice 2 used by gpu0-1g-2 (y) and gpu0-3g-0 (x)"]
    assert overcommits(layout, {(0, "gpu0-5g-0"): "x"}) == ["x holds node 0 device gpu0-5g-0, which the layout does not have"]


def test_a_free_placement_needs_every_slice_of_it_free():
    layout = parse(_data(), "f")
    held = {(0, "gpu0-1g-3"): "x"}
    assert [p.name for p in free_placements(layout, held, "3g")] == ["gpu0-3g-0", "gpu0-3g-4"]
    assert free_placements(layout, held, "7g") == []
    assert [p.name for p in free_placements(layout, {(0, "gpu0-1g-0"): "x"}, "3g")] == ["gpu0-3g-4"]


def test_fragmentation_counts_requests_that_wait_although_enough_slices_are_free():
    layout = parse(_data(), "f")
    held = {(0, "gpu0-1g-1"): "x", (0, "gpu0-1g-5"): "y"}  # 5 free slices, in holes of 1, 3 and 1
    waiting = [Request(0, "a", "3g"), Request(1, "a", "7g")]
    f = fragmentation(layout, held, waiting)
    assert (f["free_slices"], f["largest_free_on_one_gpu"], f["waiting_with_enough_free_slices"]) == (5, 5, 1)
    assert f["fragmented_share"] == 0.5


def test_the_request_stream_is_seeded_and_gives_tenants_turns():
    assert MIG.requests("fill") == MIG.requests("fill")
    first = MIG.requests("fill")[:3]
    assert [r.tenant for r in first] == ["research", "batch", "inference"]
    churn = MIG.requests("churn", first=140)
    assert churn[0].index == 140 and {r.profile for r in churn} <= {"3g", "4g", "7g"}


def test_the_slices_keep_counters_apart_from_devices_and_under_64_devices_each():
    pc = PartitionCluster(None, parse(_data(gpus_per_node=8), "f"), "run1")  # type: ignore[arg-type]
    bodies = [b for b in pc.slices_and_nodes() if b["kind"] == "ResourceSlice"]
    counters, devices = bodies[0]["spec"], [b["spec"] for b in bodies[1:]]
    assert "devices" not in counters and len(counters["sharedCounters"]) == 8
    assert all(len(d["devices"]) <= 64 for d in devices) and sum(len(d["devices"]) for d in devices) == 8 * 10
    assert {b["spec"]["pool"]["resourceSliceCount"] for b in bodies} == {len(bodies)}
    assert counters["sharedCounters"][0]["counters"]["slice-0"] == {"value": "1"}
    doubled = PartitionCluster(None, parse(_data(), "f"), "run1", faults=("double-count",))  # type: ignore[arg-type]
    assert doubled.slices_and_nodes()[1]["spec"]["sharedCounters"][0]["counters"]["slice-0"] == {"value": "2"}


def test_a_quota_no_tenant_reached_proves_nothing():
    phase = {"phase": "fill", "tenants": {"a": {"quota": {"1g": 2}}}, "quota_violations": []}
    assert checks.quota_untested({"phases": [phase], "quota_refusals": 0}) == \
        "no tenant ever reached its quota, so no refusal was seen"
    assert checks.quota_untested({"phases": [phase], "quota_refusals": 1}) is None
    none = {"phase": "fill", "tenants": {"a": {"quota": {}}}}
    assert checks.quota_untested({"phases": [none], "quota_refusals": 0}) == "the layout gives no tenant a quota"
