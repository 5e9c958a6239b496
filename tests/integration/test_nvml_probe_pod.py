"""The NVML probe's objects against a real API server and scheduler (embedded cluster, example driver).

NVML itself cannot run here (KWOK nodes, no GPU); what can be checked for real is that
the ConfigMap and the unprivileged pod are accepted as built, that the pod gets its
claim allocated, and that the allocated device's ``uuid`` is read from the real slices.
"""

from __future__ import annotations

from dra_harness.checks import nvml_probe
from dra_harness.kube import rest
from dra_harness.kube.pods import pod_claims, wait_running


def test_the_probe_pod_is_accepted_scheduled_and_its_device_uuid_found(cluster, namespace):
    kube = cluster.kube
    kube.create(rest.CONFIG_MAPS, nvml_probe.configmap("nvml-probe", cluster.run_id), namespace)
    cluster.template(namespace, "one-gpu")
    kube.create(rest.PODS, nvml_probe.pod("probe", cluster.run_id, "python:3-slim", "nvml-probe", {"gpu": {"template": "one-gpu"}}), namespace)
    pod = wait_running(kube, namespace, "probe")
    assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is False
    held = list(pod_claims(kube, pod).values())
    gpus = nvml_probe.allocated_gpus(held, cluster.published(), cluster.profile)
    assert len(gpus) == 1 and gpus[0].uuid and gpus[0].uuid.startswith("gpu-"), gpus
    # A report naming that device passes; one naming another device fails, for each way it can.
    report = nvml_probe.parse('{"format": "%s", "devices": [{"uuid": "%s"}]}' % (nvml_probe.FORMAT, gpus[0].uuid))
    assert nvml_probe.compare(report, gpus) == []
    other = nvml_probe.parse('{"format": "%s", "devices": [{"uuid": "gpu-other"}]}' % nvml_probe.FORMAT)
    assert len(nvml_probe.compare(other, gpus)) == 2


def test_a_finished_probe_without_output_is_one_line_not_a_hang(cluster, namespace):
    """KWOK completes the pod but serves no logs and writes no termination message: the run says so."""
    import pytest

    from dra_harness.kube.builders import RUN_DURATION_ANNOTATION

    kube = cluster.kube
    kube.create(rest.CONFIG_MAPS, nvml_probe.configmap("nvml-probe", cluster.run_id), namespace)
    body = nvml_probe.pod("probe", cluster.run_id, "python:3-slim", "nvml-probe")
    body["metadata"]["annotations"] = {RUN_DURATION_ANNOTATION: "1s"}
    with pytest.raises(nvml_probe.ProbeOutputError, match=r"^no NVML probe report in the pod's output \(last line: 'empty output'\)$"):
        nvml_probe.run(kube, namespace, body, timeout=60)
    assert kube.get(rest.PODS, "probe", namespace)["status"]["phase"] == "Succeeded"
