"""KWOK plays the kubelet's API role: pods run, pods that declare a duration complete, deleted pods go."""

from __future__ import annotations

import time

import pytest

from dra_harness.kube import builders as b
from dra_harness.kube import rest
from dra_harness.kube.pods import claim_names, wait_running
from dra_harness.kube.waits import wait_for_deletion, wait_for_object


def _phase(pod):
    return pod.get("status", {}).get("phase")


def test_a_pod_with_a_run_duration_completes_after_it_and_frees_its_claim(cluster, namespace):
    kube = cluster.kube
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("gpu", cluster.run_id, [b.exactly("gpu", "gpu.example.com")]), namespace)
    kube.create(rest.PODS, b.pod("batch", cluster.run_id, claims={"gpu": {"template": "gpu"}}, run_duration="3s"), namespace)
    pod = wait_running(kube, namespace, "batch")
    running_at = time.monotonic()
    done = wait_for_object(kube, rest.PODS, "batch", lambda p: _phase(p) == "Succeeded", 30, "pod to complete", namespace)
    ran_for = time.monotonic() - running_at
    assert 2.0 <= ran_for <= 15, f"declared 3s, completed after {ran_for:.1f}s"
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    # A finished pod no longer holds its device: the claim controller releases and deletes its generated claim.
    wait_for_deletion(kube, rest.RESOURCE_CLAIMS, claim_names(pod)["gpu"], 30, namespace)


def test_job_pods_complete_and_the_job_succeeds(cluster, namespace):
    kube = cluster.kube
    template = b.pod("unused", cluster.run_id, run_duration="1s")
    kube.create(rest.JOBS, {
        "metadata": b.meta("job", cluster.run_id),
        "spec": {"backoffLimit": 0, "template": {"metadata": {k: v for k, v in template["metadata"].items() if k != "name"}, "spec": template["spec"]}},
    }, namespace)
    job = wait_for_object(kube, rest.JOBS, "job", lambda j: (j.get("status", {}).get("succeeded") or 0) >= 1, 60,
                          "job to succeed", namespace)
    assert job["status"]["succeeded"] == 1


def test_a_deleted_pod_is_removed(cluster, namespace):
    kube = cluster.kube
    kube.create(rest.PODS, b.pod("doomed", cluster.run_id), namespace)
    wait_running(kube, namespace, "doomed")
    kube.delete(rest.PODS, "doomed", namespace, grace_seconds=30)
    wait_for_deletion(kube, rest.PODS, "doomed", 15, namespace)


def test_a_pod_deleted_at_once_is_left_to_the_api_server(cluster, namespace):
    """Grace 0 marks the pod and removes it a few ms later; a second DELETE from KWOK only meets a 404."""
    embedded = getattr(cluster.provider, "embedded", None)
    if embedded is None:
        pytest.skip("reads the embedded cluster's KWOK log")
    kube = cluster.kube
    kube.create(rest.PODS, b.pod("instant", cluster.run_id), namespace)
    wait_running(kube, namespace, "instant")
    kube.delete(rest.PODS, "instant", namespace, grace_seconds=0)
    wait_for_deletion(kube, rest.PODS, "instant", 15, namespace)
    # A graceful deletion on another pod, after this one: once KWOK has removed it, it has seen this one's events too.
    kube.create(rest.PODS, b.pod("marker", cluster.run_id), namespace)
    wait_running(kube, namespace, "marker")
    kube.delete(rest.PODS, "marker", namespace, grace_seconds=30)
    wait_for_deletion(kube, rest.PODS, "marker", 15, namespace)
    ours = f'"pod":"{namespace}/instant"'
    log = (embedded.state_dir / "logs" / "kwok.log").read_text(errors="replace")
    failed = [line for line in log.splitlines() if ours in line and "failed to apply stage" in line]
    assert not failed, f"KWOK played a stage on a pod the API server removed: {failed[0][:400]}"
