"""Kueue v0.17.0 beside the embedded cluster: DRA devices count against a ClusterQueue's quota.

Kueue runs as a process with its release's CRDs and webhooks. A Job holding both devices of the
quota is admitted; a second Job asking for one more device stays suspended with Kueue's reason
until the first ends, then runs. A DeviceClass Kueue does not map keeps its Job out (with Kueue's
reason) rather than letting it in uncounted. A CRD a killed Kueue left behind is removed and
installed afresh at the next start. Negative control: with Kueue's DRA gate off it counts
no devices and admits the second Job at once, so the DRA quota is what held it.
"""

from __future__ import annotations

import uuid

import pytest

from dra_harness.kube import builders, kueue_api, rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_object, watch_until
from dra_harness.providers.embedded import kueue

pytestmark = pytest.mark.cluster
GPU = "example.com/gpu"
CLASS = "gpu.example.com"


def _queue(kube: Kube, ns: str, run_id: str) -> None:
    kube.create(kueue_api.RESOURCE_FLAVORS, {"apiVersion": kueue_api.API, "kind": "ResourceFlavor", "metadata": {"name": f"f-{ns}"}})
    kube.create(kueue_api.CLUSTER_QUEUES, {"apiVersion": kueue_api.API, "kind": "ClusterQueue", "metadata": {"name": f"cq-{ns}"}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": f"f-{ns}", "resources": [{"name": GPU, "nominalQuota": 2}]}]}],
    }})
    kube.create(kueue_api.LOCAL_QUEUES, {"apiVersion": kueue_api.API, "kind": "LocalQueue", "metadata": {"name": "lq"},
                                     "spec": {"clusterQueue": f"cq-{ns}"}}, ns)
    for devices in (1, 2):
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES,
                    builders.claim_template(f"gpus-{devices}", run_id, [builders.exactly("gpu", CLASS, devices)]), ns)


def _job(kube: Kube, ns: str, run_id: str, name: str, devices: int, run: str) -> None:
    pod = builders.pod(name, run_id, claims={"gpu": {"template": f"gpus-{devices}"}}, run_duration=run)
    kube.create(rest.JOBS, {"metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}}, "spec": {
        "backoffLimit": 0, "template": {"metadata": {k: v for k, v in pod["metadata"].items() if k != "name"},
                                        "spec": pod["spec"]}}}, ns)


def _admitted(kube: Kube, ns: str, job: str, timeout: float = 60) -> None:
    wait_for_object(kube, rest.JOBS, job, lambda j: j["spec"].get("suspend") is False, timeout,
                    f"Kueue to admit job {ns}/{job}", namespace=ns)


def _pending_reason(kube: Kube, ns: str, job: str, timeout: float = 30) -> str:
    """The message of the QuotaReserved=False condition of ``job``'s Workload, once Kueue has written it."""
    def mine(workloads: list[dict]) -> list[dict]:
        return [w for w in workloads if any(o.get("name") == job for o in w["metadata"].get("ownerReferences", []))]

    def pending(workloads: list[dict]) -> bool:
        return any(c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message")
                   for w in mine(workloads) for c in w.get("status", {}).get("conditions", []))

    found = watch_until(kube, kueue_api.WORKLOADS, pending, timeout, f"Kueue to say why {ns}/{job} waits", namespace=ns)
    return next(c["message"] for w in mine(found) for c in w["status"]["conditions"] if c["type"] == "QuotaReserved")


def _stop(cluster, kube: Kube, ns: str, running: kueue.Kueue) -> None:
    """The test's Jobs first, as a user would, so Kueue lets their Workloads go; then Kueue."""
    kube.delete_collection(rest.JOBS, ns)
    kueue.stop(cluster, kube, running)


@pytest.fixture
def queue_namespace(small_cluster):
    kube = small_cluster.kube()
    ns = f"kueue-{uuid.uuid4().hex[:6]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    yield kube, ns
    kube.delete(rest.NAMESPACES, ns)


def test_a_job_over_the_device_quota_waits_suspended_until_devices_are_returned(small_cluster, queue_namespace):
    kube, ns = queue_namespace
    running = kueue.start(small_cluster, kube, {GPU: [CLASS]})
    try:
        _queue(kube, ns, "kueue-test")
        _job(kube, ns, "kueue-test", "big", 2, "8s")
        _admitted(kube, ns, "big")
        _job(kube, ns, "kueue-test", "small", 1, "2s")
        # Held by quota, not by the scheduler: the Job stays suspended and its Workload says why.
        reason = _pending_reason(kube, ns, "small")
        print(f"Kueue on the job over quota: {reason}")
        assert "insufficient" in reason.lower() and GPU in reason, reason
        assert kube.get(rest.JOBS, "small", ns)["spec"]["suspend"] is True
        # Once the big job's pod has completed, its devices go back to the quota and the small job runs.
        _admitted(kube, ns, "small", timeout=60)
        big = kube.get(rest.JOBS, "big", ns)
        assert big["status"].get("succeeded") == 1, big["status"]
    finally:
        _stop(small_cluster, kube, ns, running)


def test_a_device_class_kueue_does_not_map_keeps_the_job_out_rather_than_uncounted(small_cluster, queue_namespace):
    kube, ns = queue_namespace
    running = kueue.start(small_cluster, kube, {})
    try:
        _queue(kube, ns, "kueue-test")
        _job(kube, ns, "kueue-test", "big", 2, "30s")
        reason = _pending_reason(kube, ns, "big")
        print(f"Kueue on the job with an unmapped class: {reason}")
        assert CLASS in reason, reason
        assert kube.get(rest.JOBS, "big", ns)["spec"]["suspend"] is True
    finally:
        _stop(small_cluster, kube, ns, running)


def test_negative_control_with_kueues_dra_gate_off_devices_are_not_counted(small_cluster, queue_namespace):
    kube, ns = queue_namespace
    running = kueue.start(small_cluster, kube, {}, dra=False)
    try:
        _queue(kube, ns, "kueue-test")
        _job(kube, ns, "kueue-test", "big", 2, "30s")
        _admitted(kube, ns, "big")
        _job(kube, ns, "kueue-test", "small", 1, "2s")
        _admitted(kube, ns, "small", timeout=30)  # over the device quota, yet admitted: nothing was counted
        assert kube.get(rest.JOBS, "big", ns)["spec"]["suspend"] is False
    finally:
        _stop(small_cluster, kube, ns, running)


def test_a_crd_a_killed_kueue_left_behind_is_replaced_at_the_next_start(small_cluster):
    kube = small_cluster.kube()
    name = "provisioningrequestconfigs.kueue.x-k8s.io"
    left = kube.create(kueue.CRDS, {"metadata": {"name": name}, "spec": {
        "group": "kueue.x-k8s.io", "scope": "Cluster",
        "names": {"plural": "provisioningrequestconfigs", "singular": "provisioningrequestconfig",
                  "kind": "ProvisioningRequestConfig", "listKind": "ProvisioningRequestConfigList"},
        "versions": [{"name": "v1beta2", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    running = kueue.start(small_cluster, kube, {GPU: [CLASS]})
    try:
        installed = kube.get(kueue.CRDS, name)
        assert installed["metadata"]["uid"] != left["metadata"]["uid"]
        assert len(installed["spec"]["versions"]) > 1, "the release's CRD (several versions), not the one left behind"
    finally:
        kueue.stop(small_cluster, kube, running)


def test_the_run_sweep_removes_the_queue_designs_kueue_objects_from_a_cluster_that_outlives_the_run(small_cluster):
    """A run killed on a kept cluster (``--cluster-name``) leaves its ResourceFlavor, ClusterQueue and
    WorkloadPriorityClasses behind; the sweep the run's watchdog performs removes exactly those of that run."""
    from dra_harness.labels import RUN_LABEL
    from dra_harness.providers.sweep import sweep_run

    kube = small_cluster.kube()
    run_id, other = f"kq-{uuid.uuid4().hex[:6]}", f"kq-{uuid.uuid4().hex[:6]}"
    running = kueue.start(small_cluster, kube, {GPU: [CLASS]})
    try:
        for run in (run_id, other):
            labels = {RUN_LABEL: run}
            kube.create(kueue_api.RESOURCE_FLAVORS, {"apiVersion": kueue_api.API, "kind": "ResourceFlavor",
                                                 "metadata": {"name": f"f-{run}", "labels": labels}})
            kube.create(kueue_api.CLUSTER_QUEUES, {"apiVersion": kueue_api.API, "kind": "ClusterQueue",
                                               "metadata": {"name": f"cq-{run}", "labels": labels}, "spec": {
                "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                    {"name": f"f-{run}", "resources": [{"name": GPU, "nominalQuota": 2}]}]}]}})
            kube.create(kueue_api.WORKLOAD_PRIORITY_CLASSES, {"apiVersion": kueue_api.API, "kind": "WorkloadPriorityClass",
                                                         "metadata": {"name": f"p-{run}", "labels": labels}, "value": 10})
        assert sweep_run(kube, run_id, timeout=60) == []
        for res, name in ((kueue_api.RESOURCE_FLAVORS, "f"), (kueue_api.CLUSTER_QUEUES, "cq"), (kueue_api.WORKLOAD_PRIORITY_CLASSES, "p")):
            names = {o["metadata"]["name"] for o in kube.list(res, label_selector=RUN_LABEL)}
            assert f"{name}-{run_id}" not in names and f"{name}-{other}" in names, (res.kind, names)  # the other run's stay
        assert sweep_run(kube, other, timeout=60) == []
    finally:
        kueue.stop(small_cluster, kube, running)


def test_a_start_right_after_a_stop_waits_for_the_terminating_namespace_instead_of_failing(small_cluster):
    """The queue design's probes stop Kueue and start it again at once: the namespace the stop deletes must be gone
    before the start writes into it (before: 403 "because it is being terminated", and `contention size` exited 2)."""
    kube = small_cluster.kube()
    running = kueue.start(small_cluster, kube, {GPU: [CLASS]})
    kueue.stop(small_cluster, kube, running)
    assert kube.get(rest.NAMESPACES, kueue_api.NAMESPACE)["metadata"].get("deletionTimestamp"), "the stop deletes it"
    again = kueue.start(small_cluster, kube, {GPU: [CLASS]})
    try:
        namespace = kube.get(rest.NAMESPACES, kueue_api.NAMESPACE)
        assert not namespace["metadata"].get("deletionTimestamp") and again.namespace_created
    finally:
        kueue.stop(small_cluster, kube, again)
