"""The embedded cluster is a real DRA cluster: version, gates, slices, allocation, loopback only."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from dra_harness.kube import builders as b
from dra_harness.kube import rest
from dra_harness.kube.pods import (
    allocated_devices,
    allocated_node,
    node_schedulable,
    pod_claims,
    wait_running,
)
from dra_harness.components import gates
from dra_harness.host.processes import listening_sockets


def kubectl(cluster, *args: str) -> str:
    """The kubectl built for the cluster's own version."""
    binary = cluster.provider.embedded.state().binaries["kubectl"]
    out = subprocess.run([binary, f"--kubeconfig={cluster.kubeconfig}", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kubectl_reports_the_requested_server_version(cluster):
    version = json.loads(kubectl(cluster, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v" + cluster.provider.embedded.state().spec.k8s_version
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"]


def test_kubectl_lists_every_nodes_slices_with_all_devices(cluster):
    slices = json.loads(kubectl(cluster, "get", "resourceslices", "-o", "json"))["items"]
    per_node: dict[str, int] = {}
    for s in slices:
        assert s["spec"]["driver"] == "gpu.example.com"
        per_node[s["spec"]["nodeName"]] = per_node.get(s["spec"]["nodeName"], 0) + len(s["spec"]["devices"])
    spec = cluster.provider.embedded.state().spec
    assert per_node == {n: spec.gpus_per_node for n in spec.node_names()}


def _enabled_gates(metrics: str) -> dict[str, bool]:
    found = {}
    for m in re.finditer(r'^kubernetes_feature_enabled\{name="(\w+)",stage="\w*"\} (\d)', metrics, re.M):
        found[m.group(1)] = m.group(2) == "1"
    return found


def test_every_dra_gate_of_the_version_table_is_enabled_in_every_component(cluster):
    row = gates.for_version(cluster.provider.embedded.state().spec.k8s_version)
    wanted = set(row["feature_gates"]) | set(row["dra_gates_locked_on"])
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        enabled = _enabled_gates(cluster.provider.embedded.metrics(component))
        off = sorted(g for g in wanted if not enabled.get(g))
        assert not off, f"{component}: gates not enabled: {off}"


def test_the_alpha_and_beta_resource_apis_of_the_table_are_served(cluster):
    row = gates.for_version(cluster.provider.embedded.state().spec.k8s_version)
    served = {v["groupVersion"] for v in cluster.kube.request("GET", "/apis/resource.k8s.io")["versions"]}
    assert {gv for gv in row["runtime_config"] if gv.startswith("resource.k8s.io/")} | {"resource.k8s.io/v1"} <= served


def test_a_template_pod_gets_an_allocation_from_the_scheduler_and_runs(cluster, namespace):
    kube = cluster.kube
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("gpu", cluster.run_id, [b.exactly("gpu", "gpu.example.com")]), namespace)
    kube.create(rest.PODS, b.pod("app", cluster.run_id, claims={"gpu": {"template": "gpu"}}), namespace)
    pod = wait_running(kube, namespace, "app", timeout=60)
    claim = pod_claims(kube, pod)["gpu"]
    devices = allocated_devices(claim)
    assert [d.driver for d in devices] == ["gpu.example.com"]
    assert allocated_node(claim) == pod["spec"]["nodeName"]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["app"]


def test_every_listener_is_on_loopback(cluster):
    sockets = listening_sockets(cluster.provider.embedded.pids())
    assert sockets, "the cluster's processes listen on nothing"
    exposed = [(a, p) for a, p, _ in sockets if a not in ("127.0.0.1", "::1")]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_the_api_server_admits_no_privileged_pod(cluster, namespace):
    privileged = b.pod("root", cluster.run_id)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(rest.ApiError) as refused:
        cluster.kube.create(rest.PODS, privileged, namespace)
    assert refused.value.status == 422 and "privileged" in refused.value.message
    # Control: the same pod without the privilege is admitted.
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": False}
    cluster.kube.create(rest.PODS, privileged, namespace)


def test_typed_clients_work_on_the_same_connection(cluster):
    from kubernetes import client

    slices = cluster.typed(client.ResourceV1Api).list_resource_slice()
    assert len(slices.items) == cluster.provider.embedded.state().spec.nodes


def test_the_scheduler_and_controller_manager_can_be_restarted(small_cluster):
    from dra_harness.kube.waits import wait_for_object

    kube = small_cluster.kube()
    for component in ("kube-scheduler", "kube-controller-manager"):
        before = small_cluster.supervisor.get(component).pid
        small_cluster.restart_component(component)
        assert small_cluster.supervisor.get(component).pid != before
    kube.create(rest.NAMESPACES, {"metadata": {"name": "after-restart"}})
    wait_for_object(kube, rest.SERVICE_ACCOUNTS, "default", lambda o: True, 60, "default SA", namespace="after-restart")
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, b.claim_template("gpu", "x", [b.exactly("gpu", "gpu.example.com")]), "after-restart")
    kube.create(rest.PODS, b.pod("app", "x", claims={"gpu": {"template": "gpu"}}), "after-restart")
    wait_running(kube, "after-restart", "app", timeout=90)


def test_up_returns_with_every_node_schedulable_not_still_carrying_the_not_ready_taint(small_cluster):
    """A new node is created with ``node.kubernetes.io/not-ready`` and the node lifecycle controller lifts it about
    a second after Ready; `up` returned inside that second (every time, 3 of 3, before it waited for it), and a
    test's first pod was then Unschedulable for "untolerated taint(s)" (the last CI's two failures)."""
    nodes = small_cluster.kube().list(rest.NODES)  # small_cluster's `up` has just returned
    assert len(nodes) == 2
    assert [(n["metadata"]["name"], n["spec"].get("taints")) for n in nodes if not node_schedulable(n)] == []
