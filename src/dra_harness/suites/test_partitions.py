"""Partitionable devices: a MIG-style layout as shared counters, under a mixed stream of requests.

A GPU split into partitions is published as counters (one per memory slice) that its
partition devices consume; kube-scheduler must never hand out two partitions that share a
slice. The layout file (``data/partitions/mig-7.yaml``: 32 GPUs on 8 simulated nodes, 448
partition devices, three tenants) is the hardware's truth; the stream fills it past
capacity, frees 40 % at random and asks for large profiles
(:mod:`dra_harness.partitions.stream`). Checked at each settled point, from the file and
not from the slices: no slice held twice, no request left waiting while a placement for it
is free, no tenant over its quota. Fragmentation (requests refused while enough slices are
free in all) is measured and reported as a finding, not failed: it is what the hardware's
placement rules do, and a design reviewer should see how much.

``DRA_HARNESS_PARTITIONS`` names other layouts (shipped names or files, comma-separated),
e.g. ``mig-7-large`` (512 GPUs on 64 nodes, 7,168 devices). On a cluster the run did not
create the simulated nodes need ``--allow-contention --simulated-nodes N``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_harness import data
from dra_harness.partitions import checks, stream
from dra_harness.partitions.layout import load
from dra_harness.partitions.objects import PartitionCluster
from dra_harness.plugin.simulated import on_simulated_nodes

LAYOUTS = data.path("partitions")
pytestmark = [pytest.mark.concern("partitions", "Partitionable devices"), pytest.mark.exclusive]  # the simulated nodes must not meet other suites' node audits


def _layouts() -> list[Path]:
    wanted = os.environ.get("DRA_HARNESS_PARTITIONS", "mig-7").split(",")
    out = []
    for name in wanted:
        path = Path(name) if name.endswith((".yaml", ".yml")) else LAYOUTS / f"{name}.yaml"
        if not path.is_file():  # never an empty parameter set that passes for want of a layout
            raise FileNotFoundError(f"DRA_HARNESS_PARTITIONS names {name}: neither a layout file nor among "
                                    f"{', '.join(sorted(p.stem for p in LAYOUTS.glob('*.yaml')))}")
        out.append(path.resolve())
    return out


LAYOUT_FILES = _layouts()
_RESULTS: dict[Path, dict] = {}


@pytest.fixture(params=LAYOUT_FILES, ids=[p.stem for p in LAYOUT_FILES])
def result(request: pytest.FixtureRequest, cluster, run_id: str) -> Iterator[dict]:
    """The stream's result over one layout: run by the first test that asks, shared by the others."""
    if request.param not in _RESULTS:
        layout = load(request.param)
        pc = PartitionCluster(cluster.kube, layout, run_id)
        with on_simulated_nodes(request.config, cluster, pc, "the partition suite"):
            _RESULTS[request.param] = stream.run(cluster.kube, pc)
    yield _RESULTS[request.param]


def _figures(result: dict) -> dict:
    return {"layout": result["layout"], "gpus": result["gpus"], "partition_devices": result["partition_devices"],
            "phases": {p["phase"]: {k: p[k] for k in ("requests", "scheduled", "waiting", "refused_by_quota", "wall_s",
                                                      "pods_per_s")} for p in result["phases"]}}


def test_no_memory_slice_is_given_to_two_partitions(result, evidence):
    evidence.record(allocations_checked=result["allocations_checked"], **_figures(result))
    assert result["allocations_checked"], "no partition was allocated: nothing was checked"
    bad = checks.overcommitted(result)
    assert not bad, f"{len(bad)} memory slices over-committed, e.g. {bad[:3]}"


def test_no_partition_request_waits_while_a_placement_for_it_is_free(result, evidence):
    finding = checks.fragmentation_finding(result)
    evidence.record(fragmentation={p["phase"]: p["fragmentation"] for p in result["phases"]},
                    waiting_by_profile={p["phase"]: p["waiting_by_profile"] for p in result["phases"]},
                    findings=[finding] if finding else [])
    bad = checks.left_waiting(result)
    assert not bad, f"{len(bad)} requests left waiting with a placement free, e.g. {bad[:3]}"


def test_each_tenant_stays_within_its_device_quota(result, evidence):
    untested = checks.quota_untested(result)
    evidence.record(quota_refusals=result["quota_refusals"],
                    tenants={t: {"quota": v["quota"], "claims": v["claims"], "refused_by_quota": v["refused_by_quota"]}
                             for t, v in result["phases"][-1]["tenants"].items()},
                    **({"not_established": untested} if untested else {}))
    bad = checks.over_quota(result)
    assert not bad, f"tenants over their quota: {bad[:3]}"
