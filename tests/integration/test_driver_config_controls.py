"""Negative controls for the driver-configuration suite, on a private cluster's KWOK node.

- a driver never switched to the configuration a test asked for: the wait for its slices
  fails and says what was published instead;
- the two capacity shares of the suite's check, against a driver in its default configuration
  (no allowMultipleAllocations): the second share is refused, so the check would fail;
- configure and back: the node's slices hold the partitions, then exactly the whole GPUs again;
- the cpu profile's CPUs where the API server drops their node-allocatable mapping (1.37, the
  example driver v0.4.0): nothing is charged, so a pod asking for the node's free cpu runs
  beside the claim, and the suite's refusal would fail.
"""

from __future__ import annotations

import pytest

from dra_harness.checks.driver_configs import free_cpu
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import scheduling_message, wait_running, wait_unschedulable
from dra_harness.kube.waits import WaitTimeout
from dra_harness.providers.driver_configs import by_name, wait_published

NODE = "gpu-node-0"


def test_a_driver_left_in_its_default_configuration_is_caught_by_the_wait_for_its_slices(handle):
    with pytest.raises(WaitTimeout) as e:
        wait_published(handle.kube, NODE, by_name("multiple-allocations"), 2, timeout=5)
    assert "not published as multiple-allocations: ['gpu-0', 'gpu-1']" in str(e.value), str(e.value)


def test_without_multiple_allocations_a_second_share_of_the_device_is_refused(handle):
    only = ["device.attributes['gpu.example.com'].index == 0"]
    for pod in ("share-0", "share-1"):
        handle.claim("controls", pod, builders.exactly("gpu", handle.device_class, 1, only, capacity={"memory": "4Gi"}))
        handle.pod("controls", pod, claim=pod, node_name=NODE)
    wait_running(handle.kube, "controls", "share-0")
    message = scheduling_message(wait_unschedulable(handle.kube, "controls", "share-1", timeout=60))
    assert "cannot allocate all claims" in message, message


def test_a_driver_configured_and_put_back_publishes_its_partitions_then_its_whole_gpus_again(handle):
    handle.provider.configure_driver(NODE, "partitions-4")
    slices = wait_published(handle.kube, NODE, by_name("partitions-4"), 2)
    assert sorted(c["name"] for s in slices for c in s["spec"].get("sharedCounters") or []) == ["gpu-0-counters", "gpu-1-counters"]
    handle.provider.configure_driver(NODE, "default")
    wait_published(handle.kube, NODE, by_name("default"), 2)
    assert handle.provider.embedded.state().driver_configs == {}
    assert handle.driver_log(NODE, 200).strip(), "the restarted plugin's log, as a failure dump would carry it"


def test_cpus_whose_node_allocatable_mapping_the_server_dropped_are_not_charged_so_a_crowding_pod_runs(handle):
    assert handle.server_version().startswith("v1.37."), "this control needs the default 1.37, which drops 1.36's field"
    handle.provider.configure_driver(NODE, "cpu")
    try:
        slices = wait_published(handle.kube, NODE, by_name("cpu"), 2)
        devices = [d for s in slices for d in s["spec"]["devices"]]
        assert not any(d.get("nodeAllocatableResourceMappings") or d.get("nodeAllocatableResources") for d in devices), devices
        handle.kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": "controls-cpu"},
                                                 "spec": {"selectors": [builders.cel("device.driver == 'cpu.example.com'")]}})
        handle.template("controls", "two-cpus", *(builders.exactly(r, "controls-cpu", 1, capacity={"cpu.example.com/cpu": "1"})
                                                  for r in ("cpu0", "cpu1")))
        handle.pod("controls", "pod0", template="two-cpus", node_name=NODE)
        pod = wait_running(handle.kube, "controls", "pod0")
        assert not pod["status"].get("nodeAllocatableResourceClaimStatuses"), pod["status"]
        crowd = builders.pod("crowd", handle.run_id, node_name=NODE)
        crowd["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{int((free_cpu(handle.kube, NODE) - 1) * 1000)}m"}
        handle.kube.create(rest.PODS, crowd, "controls")
        wait_running(handle.kube, "controls", "crowd")
    finally:
        for name in ("pod0", "crowd"):
            handle.kube.delete(rest.PODS, name, "controls", grace_seconds=0)
        handle.kube.delete(rest.DEVICE_CLASSES, "controls-cpu")
        handle.provider.configure_driver(NODE, "default")
