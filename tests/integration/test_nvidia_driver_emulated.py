"""NVIDIA's own GPU kubelet plugin (v0.5.0 and v0.4.1, built from its module) on a simulated node over emulated H100s.

What it proves, on a real API server and kube-scheduler: the driver publishes the emulated GPUs with the
attributes the nvidia profile names (read before from the chart and source only), the chart's own
DeviceClass allocates one of them, a selector for another model allocates nothing (the negative
control), and stopping it leaves no slice and no file of it behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from dra_harness.checks import config_webhook
from dra_harness.components import catalog, nvml
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import pod_claims, wait_running
from dra_harness.kube.waits import WaitTimeout, watch_until
from dra_harness.providers.embedded import driver_webhook, nvidia_driver
from dra_harness.providers.profiles import by_name
from dra_harness.components import nvidia_chart

pytestmark = pytest.mark.cluster
NVIDIA = by_name("nvidia")
#: Profile attributes the emulation cannot give: pcieRoot comes from sysfs (no PCI device here), the
#: other two belong to MIG devices, and none exists.
NOT_EMULATED = {"resource.kubernetes.io/pcieRoot", "parentUUID", "profile"}


def emulated_uuids(root, node_dev) -> set[str]:
    """The UUIDs the emulated library reports to a fresh process given the node's device nodes."""
    script = "import pynvml as n; n.nvmlInit(); print(' '.join(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_LIBRARY_PATH": str(root / nvidia_driver.LIB_DIR), "DRA_HARNESS_NVML_DEV_ROOT": str(node_dev)})
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def attribute(device: dict, name: str):
    value = device["attributes"][name]
    return next(iter(value.values()))


@pytest.mark.parametrize("version", catalog.NVIDIA_DRIVER_VERSIONS)
def test_nvidia_s_plugin_publishes_the_emulated_h100s_and_the_chart_s_class_allocates_one(small_cluster, version):
    kube = small_cluster.kube()
    node = small_cluster.state().spec.node_names()[0]
    run_id = uuid.uuid4().hex[:8]
    ns = f"nv-{run_id}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    created: list[str] = []
    root = nvidia_driver.start(small_cluster, node, version, "h100")
    try:
        def nvidia(items: list[dict]) -> list[dict]:
            return [s for s in items if s["spec"]["driver"] == nvidia_driver.DRIVER and s["spec"].get("nodeName") == node]

        found = nvidia(watch_until(kube, rest.RESOURCE_SLICES, lambda items: sum(len(s["spec"].get("devices") or [])
                                                                               for s in nvidia(items)) == 8,
                                   120, f"NVIDIA's plugin to publish {node}'s 8 GPUs"))
        devices = [d for s in found for d in s["spec"]["devices"]]
        uuids = {attribute(d, "uuid") for d in devices}
        assert uuids == emulated_uuids(root, root / "dev")
        for d in devices:
            assert attribute(d, "productName") == "NVIDIA H100 80GB HBM3" and attribute(d, "architecture") == "Hopper"
            assert attribute(d, "cudaComputeCapability") == "9.0.0" and attribute(d, "driverVersion") == "550.54.15"
            assert attribute(d, "type") == "gpu" and d["capacity"]["memory"]["value"] == "80Gi"
        published = set().union(*(d["attributes"] for d in devices))
        assert set(NVIDIA.attributes.values()) - published == NOT_EMULATED, published

        for cls in nvidia_chart.chart_device_classes(version):
            try:
                kube.create(rest.DEVICE_CLASSES, cls)
                created.append(cls["metadata"]["name"])
            except rest.Conflict:
                pass
        assert NVIDIA.device_class in {c["metadata"]["name"] for c in nvidia_chart.chart_device_classes(version)}
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one-gpu", run_id, [
            builders.exactly("gpu", NVIDIA.device_class)]), ns)
        kube.create(rest.PODS, builders.pod("uses-one", run_id, {"gpu": {"template": "one-gpu"}}, node_name=node), ns)
        pod = wait_running(kube, ns, "uses-one", timeout=120)
        claim = next(iter(pod_claims(kube, pod).values()))
        result = claim["status"]["allocation"]["devices"]["results"]
        assert len(result) == 1 and result[0]["driver"] == nvidia_driver.DRIVER and result[0]["pool"] == node, result
        chosen = next(d for d in devices if d["name"] == result[0]["device"])
        assert attribute(chosen, "uuid") in uuids

        # Negative control: the same class asked for an A100 by the profile's model attribute: nothing here is one.
        model = f"{NVIDIA.cel_attribute('model')} == 'NVIDIA A100-SXM4-80GB'"
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("an-a100", run_id, [
            builders.exactly("gpu", NVIDIA.device_class, selectors=[model])]), ns)
        kube.create(rest.PODS, builders.pod("wants-a100", run_id, {"gpu": {"template": "an-a100"}}, node_name=node), ns)
        with pytest.raises(WaitTimeout):
            wait_running(kube, ns, "wants-a100", timeout=15)
        unscheduled = kube.get(rest.PODS, "wants-a100", ns)
        message = json.dumps(unscheduled["status"].get("conditions") or [])
        assert "cannot allocate all claims" in message, message
    finally:
        kube.delete(rest.NAMESPACES, ns)
        nvidia_driver.stop(small_cluster, kube, node)
        for cls in created:  # only the classes this test made
            kube.delete(rest.DEVICE_CLASSES, cls)
    left = [s["metadata"]["name"] for s in kube.list(rest.RESOURCE_SLICES) if s["spec"]["driver"] == nvidia_driver.DRIVER]
    assert left == [] and not (small_cluster.state_dir / "nvidia" / node).exists()


def test_the_chart_s_device_classes_are_read_from_the_module():
    classes = {c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"] for c in nvidia_chart.chart_device_classes("0.5.0")}
    assert classes == {"gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
                       "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}
    assert nvml.PROFILES["h100"].startswith("8x")


@pytest.mark.parametrize("version", catalog.NVIDIA_DRIVER_VERSIONS)
def test_the_profile_names_the_daemonset_and_classes_the_chart_of_each_release_makes(version):
    """The profile's DaemonSet is a hint (preflight finds the one serving the driver by its host paths), but a
    stale hint is what a cluster without preflight rights falls back on: it must be the chart's."""
    assert NVIDIA.driver_daemonset[1] == nvidia_chart.chart_daemonset(version)
    assert {c["metadata"]["name"] for c in nvidia_chart.chart_device_classes(version)} == set(NVIDIA.device_classes.values())


def test_a_roll_from_v0_4_1_to_v0_5_0_keeps_a_running_pod_s_gpu_and_the_new_plugin_takes_the_slice_over(small_cluster):
    kube = small_cluster.kube()
    node = small_cluster.state().spec.node_names()[0]
    run_id = uuid.uuid4().hex[:8]
    ns = f"nv-{run_id}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})

    def mine(items: list[dict]) -> list[dict]:
        return [s for s in items if s["spec"]["driver"] == nvidia_driver.DRIVER and s["spec"].get("nodeName") == node]

    created: list[str] = []
    nvidia_driver.start(small_cluster, node, "0.4.1", "h100")
    try:
        slices = mine(watch_until(kube, rest.RESOURCE_SLICES, lambda items: len(nvidia_driver.identities(mine(items), node)) == 8,
                                  120, f"v0.4.1 to publish {node}'s 8 GPUs"))
        before, generation = nvidia_driver.identities(slices, node), slices[0]["metadata"]["generation"]
        for cls in nvidia_chart.chart_device_classes("0.5.0"):
            try:
                kube.create(rest.DEVICE_CLASSES, cls)
                created.append(cls["metadata"]["name"])
            except rest.Conflict:
                pass
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one-gpu", run_id, [
            builders.exactly("gpu", NVIDIA.device_class)]), ns)
        kube.create(rest.PODS, builders.pod("steady", run_id, {"gpu": {"template": "one-gpu"}}, node_name=node), ns)
        pod = wait_running(kube, ns, "steady", timeout=120)
        held = [r["device"] for c in pod_claims(kube, pod).values() for r in c["status"]["allocation"]["devices"]["results"]]

        started = time.monotonic()
        nvidia_driver.roll(small_cluster, node, "0.5.0")
        slices = mine(watch_until(kube, rest.RESOURCE_SLICES, lambda items: any(s["metadata"]["generation"] > generation for s in mine(items)),
                                  60, "v0.5.0 to take the node's slice over"))
        took = time.monotonic() - started
        print(f"v0.4.1 -> v0.5.0 on {node}: slice rewritten by v0.5.0 {took:.1f} s after the roll began")
        assert nvidia_driver.changed_identities(before, slices, node, held) == []
        assert kube.get(rest.PODS, "steady", ns)["status"]["phase"] == "Running"
        kube.create(rest.PODS, builders.pod("after", run_id, {"gpu": {"template": "one-gpu"}}, node_name=node), ns)
        wait_running(kube, ns, "after", timeout=120)  # the new plugin's slice serves new claims

        # Negative control: the same slots under other GPUs (another seed) — the held device's identity changed.
        nvidia_driver.driver_root(small_cluster, node, "h100", seed="other-gpus")
        nvidia_driver.roll(small_cluster, node, "0.5.0")
        swapped = mine(watch_until(kube, rest.RESOURCE_SLICES, lambda items: nvidia_driver.identities(mine(items), node) != before
                                   and len(nvidia_driver.identities(mine(items), node)) == 8, 60, "the other GPUs to be published"))
        problems = nvidia_driver.changed_identities(before, swapped, node, held)
        assert len(problems) == 1 and held[0] in problems[0], problems
    finally:
        kube.delete(rest.NAMESPACES, ns)
        nvidia_driver.stop(small_cluster, kube, node)
        for cls in created:  # only the classes this test made
            kube.delete(rest.DEVICE_CLASSES, cls)


def test_nvidia_s_webhook_refuses_an_unknown_interval_for_its_driver_only_and_admits_a_valid_one(handle):
    """The parity suite's webhook check on NVIDIA's webhook (v0.5.0, the chart's TimeSlicingSettings gate on).

    Negative controls: with no webhook the invalid claim is admitted; an example-driver config with the same
    bad interval is admitted too (NVIDIA's webhook judges only ``gpu.nvidia.com`` configs: the run that
    started the example driver's webhook for an NVIDIA cluster admitted everything)."""
    api = NVIDIA.sharing_config["apiVersion"]
    res, bad = config_webhook.config_object("ResourceClaim", "v1", NVIDIA.device_class, NVIDIA.driver, "InvalidInterval", api)
    _, good = config_webhook.config_object("ResourceClaim", "v1", NVIDIA.device_class, NVIDIA.driver, "Long", api)
    _, other = config_webhook.config_object("ResourceClaim", "v1", handle.device_class, handle.driver, "InvalidInterval")
    assert config_webhook.refusal(handle.kube, res, bad, "controls") is None, "admitted with no webhook: the check can fail"
    name = driver_webhook.start(handle.provider.embedded, "controls", "controls", driver=NVIDIA.driver)
    try:
        assert config_webhook.REFUSAL in (config_webhook.refusal(handle.kube, res, bad, "controls") or "")
        assert config_webhook.refusal(handle.kube, res, good, "controls") is None
        assert config_webhook.refusal(handle.kube, res, other, "controls") is None
    finally:
        driver_webhook.stop(handle.provider.embedded, name)
