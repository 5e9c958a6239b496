"""Device taints: keep new claims off a device, evict what uses it, let tolerating claims through.

Where the version offers DeviceTaintRules (1.35 alpha, 1.36 beta, 1.37 GA), a taint is
how an admin takes one device out of service. NoSchedule keeps new claims off it;
NoExecute also evicts the pods using it (kube-controller-manager deletes them with a
DisruptionTarget condition, reason DeletionByDeviceTaintManager); a toleration in the
claim's request lets a pod use the device anyway.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.checks import needs
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    condition,
    pod_claims,
    wait_evicted,
    wait_running,
    wait_unschedulable,
)
from dra_harness.labels import RUN_LABEL

pytestmark = [pytest.mark.concern("device-taints", "Device taints"), pytest.mark.disruptive,
              pytest.mark.requires(needs.right("create-device-taint-rules"), needs.disruptable_node)]

TAINT_KEY = "dra-harness.io/out-of-service"


@pytest.fixture
def taint_rules(cluster) -> Iterator[rest.Resource]:
    """The DeviceTaintRule resource of the newest served version; skips where there is none."""
    res = cluster.device_taint_rules()
    if res is None:
        pytest.skip(f"Kubernetes {cluster.server_version()} serves no DeviceTaintRule API (needs DRADeviceTaintRules)")
    yield res
    for rule in cluster.kube.list(res, label_selector=f"{RUN_LABEL}={cluster.run_id}"):
        cluster.kube.delete(res, rule["metadata"]["name"])


def _taint(cluster, res, name: str, device: tuple[str, str, str], effect: str) -> None:
    driver, pool, dev = device
    cluster.kube.create(res, {
        "metadata": {"name": name, "labels": {RUN_LABEL: cluster.run_id}},
        "spec": {"deviceSelector": {"driver": driver, "pool": pool, "device": dev},
                 "taint": {"key": TAINT_KEY, "value": "maintenance", "effect": effect}},
    })


def _free_device(cluster, preflight, node: str) -> tuple[tuple[str, str, str], str]:
    """A device on ``node`` that no other workload holds (a tenant's device is not ours to taint), and its uuid:
    the one attribute every profile names (NVIDIA's driver publishes no index)."""
    held = set(preflight.nodes[node].held_by_others) if node in preflight.nodes else set()
    free = sorted((k, cluster.profile.device_attribute(v["device"], "uuid")) for k, v in cluster.published().items()
                  if v["node"] == node and k[2] not in held)
    if not free:
        raise NotEstablished(f"every device of {node} is held by another workload")
    return free[0]


def _just(cluster, uuid: str, **kw) -> dict:
    return cluster.request(selectors=[f"{cluster.profile.cel_attribute('uuid')} == '{uuid}'"], **kw)


def test_a_no_schedule_taint_keeps_new_claims_off_the_device(cluster, preflight, namespace, disruptor, taint_rules, evidence):
    node = disruptor.target_node()
    device, uuid = _free_device(cluster, preflight, node)
    _taint(cluster, taint_rules, f"{namespace}-noschedule", device, "NoSchedule")
    cluster.template(namespace, "that-device", _just(cluster, uuid))
    cluster.pod(namespace, "kept-off", template="that-device", node_name=node)
    pod = wait_unschedulable(cluster.kube, namespace, "kept-off", timeout=60)
    message = condition(pod, "PodScheduled")["message"]
    evidence.record(device="/".join(device), scheduler_message=message)
    cluster.kube.delete(taint_rules, f"{namespace}-noschedule")
    wait_running(cluster.kube, namespace, "kept-off", timeout=60)  # and it is the taint that kept it off


def test_a_no_execute_taint_evicts_the_pods_using_the_device(cluster, preflight, namespace, disruptor, taint_rules, evidence):
    kube = cluster.kube
    node = disruptor.target_node()
    cluster.template(namespace, "that-device", _just(cluster, _free_device(cluster, preflight, node)[1]))
    cluster.pod(namespace, "victim", template="that-device", node_name=node)
    pod = wait_running(kube, namespace, "victim")
    device = allocated_devices(pod_claims(kube, pod)["gpu"])[0]

    # The taint is made once the wait watches: on a KWOK node the pod may be gone within milliseconds.
    took, cond = wait_evicted(kube, namespace, "victim", 60,
                              cause=lambda: _taint(cluster, taint_rules, f"{namespace}-noexecute", device.key, "NoExecute"))
    assert took is not None, f"the pod using {device} still exists 60 s after its device was tainted NoExecute ({cond})"
    evidence.record(device=str(device), evicted_after_s=round(took, 3), condition=cond)
    assert (cond or {}).get("reason") == "DeletionByDeviceTaintManager", cond


def test_a_toleration_in_the_claim_request_lets_a_pod_through(cluster, preflight, namespace, disruptor, taint_rules, evidence):
    node = disruptor.target_node()
    device, uuid = _free_device(cluster, preflight, node)
    _taint(cluster, taint_rules, f"{namespace}-tolerated", device, "NoSchedule")
    toleration = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
    cluster.template(namespace, "tolerating", _just(cluster, uuid, tolerations=[toleration]))
    cluster.pod(namespace, "tolerant", template="tolerating", node_name=node)
    pod = wait_running(cluster.kube, namespace, "tolerant", timeout=60)
    got = allocated_devices(pod_claims(cluster.kube, pod)["gpu"])
    assert [d.key for d in got] == [device], f"allocated {got}, expected the tainted {device}"
    results = pod_claims(cluster.kube, pod)["gpu"]["status"]["allocation"]["devices"]["results"]
    evidence.record(device="/".join(device), tolerations=results[0].get("tolerations"))
