"""Negative controls and safety for the disruption suites.

- a driver that does not come back fails the restart suite, saying so;
- a claim made while the driver is down that waits for another reason than its devices fails the check;
- a slice left behind by a driver that is gone is flagged as stale;
- a drain blocked by a PodDisruptionBudget is reported as blocked within its deadline;
- without --allow-disruptive, a run against an existing cluster touches no node or driver;
- a node cordoned before the run is never chosen and stays cordoned; only our cordons are undone;
- only the pods of the profile's driver DaemonSet are deleted, never another plugin's pods
  that carry the same generic labels.
"""

from __future__ import annotations

import json
import subprocess
import sys
import dataclasses
import time

import pytest

from dra_harness.providers.embedded.provider import EmbeddedProvider, local_hardware
from dra_harness.providers.existing import ExistingProvider
from dra_harness.providers.handle import ClusterHandle
from dra_harness.checks.disruption import DisruptionRefused, Disruptor
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import wait_running
from dra_harness.providers import node_changes
from dra_harness.providers.profiles import by_name
from dra_harness.labels import RUN_LABEL
from dra_harness.options import RunConfig


def run_suite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=600)


def test_a_driver_that_does_not_come_back_fails_the_restart_suite(small_cluster):
    state = json.loads(small_cluster.state_file.read_text())
    state["binaries"]["dra-example-kubeletplugin"] = "/bin/false"  # every later start exits at once
    small_cluster.state_file.write_text(json.dumps(state))
    out = run_suite("suites/test_driver_restart.py::test_a_restarted_driver_republishes_the_same_devices",
                    "--cluster=local", f"--cluster-name={small_cluster.name}")
    assert out.returncode == 1, out.stdout[-3000:]
    assert out.stdout.count("did not come back: its process exited") >= 2, out.stdout[-3000:]


def test_a_pod_pending_on_full_nodes_while_the_driver_is_down_fails_the_claim_check(small_cluster):
    """The scheduler's verdict must be the one the node's published devices call for, not any
    message that mentions a claim: nodes with room for no pod keep it pending for another reason.
    (Not a taint: the preflight rightly finds a tainted node unschedulable, and the check is then not
    established before it runs; a full node is nothing the preflight judges.)"""
    kube = small_cluster.kube()
    for node in small_cluster.state().spec.node_names():
        kube.patch(rest.NODES, node, {"status": {"allocatable": {"pods": "0"}}}, sub="status")
    out = run_suite("suites/test_driver_restart.py::test_a_claim_made_while_the_driver_is_down_is_allocated_or_waits_with_a_reason",
                    "--cluster=local", f"--cluster-name={small_cluster.name}")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "2 failed" in out.stdout, out.stdout[-3000:]
    assert ("with 2 devices of gpu-node-0 still published, the claim should be allocated one of them on gpu-node-0; "
            "the scheduler says: Unschedulable: 0/2 nodes are available: 1 Too many pods") in out.stdout, out.stdout[-3000:]
    assert ("with no device of gpu-node-0 published, the scheduler should say it cannot allocate the pod's claim; "
            "PodScheduled says: Unschedulable: 0/2 nodes are available: 1 Too many pods") in out.stdout, out.stdout[-3000:]


def test_slices_of_a_driver_that_is_gone_are_flagged_stale(small_cluster):
    small_cluster.stop_driver("gpu-node-1")
    out = run_suite("suites/test_inventory.py", "--cluster=local", f"--cluster-name={small_cluster.name}")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "slices of gpu-node-1 are stale: no gpu.example.com driver runs there" in out.stdout
    assert "FAILED suites/test_inventory.py::test_every_node_with_slices_has_a_running_driver" in out.stdout


def test_a_drain_blocked_by_a_pdb_is_reported_within_its_deadline(small_cluster):
    handle = ClusterHandle(EmbeddedProvider(RunConfig(cluster_name=small_cluster.name), "controls"), small_cluster.kube(), small_cluster.kubeconfig, "controls",
                           local_hardware(small_cluster.state().spec), by_name("example"))
    kube, ns = handle.kube, "controls"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": {RUN_LABEL: "controls"}}})
    kube.create(rest.NAMESPACES, {"metadata": {"name": "tenant"}})  # another team's: its pod is never evicted
    kube.create(rest.PODS, builders.pod("theirs", "tenant", node_name="gpu-node-0"), "tenant")
    handle.template(ns, "gpu")
    handle.pod(ns, "protected", template="gpu", node_name="gpu-node-0", labels={"app": "protected"})
    wait_running(kube, ns, "protected")
    wait_running(kube, "tenant", "theirs")
    kube.create(rest.PDBS, {"metadata": {"name": "keep-one"},
                            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}}, ns)
    time.sleep(1)  # the disruption controller computes the budget
    started = time.monotonic()
    with Disruptor(handle, allowed=True).restoring("gpu-node-0") as d:
        result = d.drain("gpu-node-0", timeout=5)
    took = time.monotonic() - started
    assert not result.complete and "controls/protected" in result.blocked, result
    assert result.left_alone == ["tenant/theirs"] and "tenant/theirs" not in result.evicted, result
    assert kube.get(rest.PODS, "theirs", "tenant")["metadata"].get("deletionTimestamp") is None, "a tenant's pod was evicted"
    assert "disruption budget" in result.blocked["controls/protected"], result.blocked
    assert took < 15, f"a blocked drain took {took:.1f}s"
    assert not kube.get(rest.NODES, "gpu-node-0")["spec"].get("unschedulable"), "the node was left cordoned"


def test_without_allow_disruptive_an_existing_cluster_is_not_touched(small_cluster):
    kube = small_cluster.kube()

    def snapshot():
        # node.kubernetes.io/* taints come and go with node health (the lifecycle controller's, not ours);
        # a cordon shows in spec.unschedulable.
        nodes = {n["metadata"]["name"]: (n["spec"].get("unschedulable"),
                                         [t for t in n["spec"].get("taints") or [] if not t["key"].startswith("node.kubernetes.io/")])
                 for n in kube.list(rest.NODES)}
        drivers = {t.name: t.pid for t in small_cluster.supervisor.tracked() if t.name.startswith("driver-")}
        slices = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in kube.list(rest.RESOURCE_SLICES)}
        return nodes, drivers, slices

    before = snapshot()
    out = run_suite("suites/test_driver_restart.py", "suites/test_node_drain.py", "--cluster=existing",
                    f"--kubeconfig={small_cluster.kubeconfig}")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "passed" not in out.stdout.splitlines()[-1], out.stdout[-2000:]
    assert "pass --allow-disruptive" in out.stdout
    assert snapshot() == before


#: The example chart's generic plugin label: our fake driver and the "other vendor's" plugin both carry it.
GENERIC = {"app.kubernetes.io/component": "kubeletplugin"}


def _daemonset(kube: rest.Kube, namespace: str, name: str) -> None:
    labels = {**GENERIC, "app": name}
    kube.create(rest.DAEMON_SETS, {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "plugin", "image": "registry.k8s.io/pause:3.10"}]}}},
    }, namespace)


def _fake_daemonset_driver(small_cluster, other_vendor: bool = False):
    """A DaemonSet standing for the driver's install, run by KWOK on every node (and, with
    ``other_vendor``, a second one with the same generic labels in another namespace).

    It publishes nothing (the real plugins still run as processes); it lets the
    existing-cluster restart path (delete the node's plugin pod, wait for its
    replacement) run against a real DaemonSet controller.
    """
    profile = dataclasses.replace(by_name("example"), driver_daemonset=("drivers", "fake-plugin"))
    handle = ClusterHandle(ExistingProvider(RunConfig(kubeconfig=str(small_cluster.kubeconfig)), "controls"), small_cluster.kube(), small_cluster.kubeconfig, "controls",
                           local_hardware(small_cluster.state().spec), profile)
    kube = handle.kube
    kube.create(rest.NAMESPACES, {"metadata": {"name": "drivers"}})
    _daemonset(kube, "drivers", "fake-plugin")
    if other_vendor:
        kube.create(rest.NAMESPACES, {"metadata": {"name": "other-vendor"}})
        _daemonset(kube, "other-vendor", "other-plugin")
    from dra_harness.kube.waits import watch_until

    watch_until(kube, rest.PODS, lambda ps: len([p for p in ps if handle.driver_running(p["spec"].get("nodeName", ""))]) == 2,
                60, "fake plugin pods Ready", namespace="drivers")
    return handle


def _uids(kube: rest.Kube, namespace: str, node: str) -> set[str]:
    return {p["metadata"]["uid"] for p in kube.list(rest.PODS, namespace, field_selector=f"spec.nodeName={node}")
            if not p["metadata"].get("deletionTimestamp")}


def test_on_an_existing_cluster_a_restart_replaces_the_drivers_daemonset_pod(small_cluster):
    handle = _fake_daemonset_driver(small_cluster)
    before = _uids(handle.kube, "drivers", "gpu-node-0")
    record = Disruptor(handle, allowed=True).restart_driver("gpu-node-0", kill=True, down_for=0, deadline=60)
    assert not record.failure, record.failure
    after = _uids(handle.kube, "drivers", "gpu-node-0")
    assert after and not after & before, "the plugin pod was not replaced"
    assert record.down_for is None, "a DaemonSet's driver is not held down by the harness"
    assert record.replacement_ready_after is not None and 0 < record.replacement_ready_after < 60, record


def test_another_plugins_pods_with_the_same_generic_labels_are_never_deleted(small_cluster):
    handle = _fake_daemonset_driver(small_cluster, other_vendor=True)
    kube = handle.kube
    from dra_harness.kube.waits import watch_until

    watch_until(kube, rest.PODS, lambda ps: len(ps) == 2, 60, "the other vendor's plugin pods", namespace="other-vendor")
    others = {ns: _uids(kube, ns, "gpu-node-0") for ns in ("other-vendor",)}
    ours = _uids(kube, "drivers", "gpu-node-0")
    generic = kube.list(rest.PODS, label_selector="app.kubernetes.io/component=kubeletplugin",
                        field_selector="spec.nodeName=gpu-node-0")
    assert len(generic) == 2, "the generic label should match both plugins' pods (the trap this guards against)"
    record = Disruptor(handle, allowed=True).restart_driver("gpu-node-0", kill=True, down_for=0, deadline=60)
    assert not record.failure, record.failure
    assert _uids(kube, "other-vendor", "gpu-node-0") == others["other-vendor"], "the other vendor's plugin pod was deleted"
    assert not _uids(kube, "drivers", "gpu-node-0") & ours, "our driver's pod was not replaced"


def test_on_an_existing_cluster_a_driver_pod_that_is_not_replaced_fails_the_restart(small_cluster):
    handle = _fake_daemonset_driver(small_cluster)

    def orphan() -> None:  # nobody will replace the deleted pod
        handle.kube.delete(rest.DAEMON_SETS, "fake-plugin", "drivers", propagation="Orphan")

    record = Disruptor(handle, allowed=True).restart_driver("gpu-node-0", kill=True, down_for=0, deadline=5,
                                                            while_down=orphan)
    assert "did not come back within 5s: no Ready replacement pod of DaemonSet drivers/fake-plugin" in record.failure, record


def _cordoned(kube: rest.Kube, node: str) -> bool:
    return bool(kube.get(rest.NODES, node)["spec"].get("unschedulable"))


def test_a_node_cordoned_before_the_run_is_never_chosen_and_stays_cordoned(small_cluster):
    handle = _fake_daemonset_driver(small_cluster)
    kube = handle.kube
    kube.patch(rest.NODES, "gpu-node-0", {"spec": {"unschedulable": True}})  # someone's maintenance
    disruptor = Disruptor(handle, allowed=True)
    assert disruptor.target_node() == "gpu-node-1"
    with disruptor.restoring("gpu-node-0", "gpu-node-1"):
        disruptor.cordon("gpu-node-0")  # already cordoned: left as found, not recorded as ours
        disruptor.cordon("gpu-node-1")
    assert _cordoned(kube, "gpu-node-0"), "a node cordoned for maintenance was uncordoned"
    assert not _cordoned(kube, "gpu-node-1"), "our own cordon was not undone"
    kube.patch(rest.NODES, "gpu-node-1", {"spec": {"unschedulable": True}})
    with pytest.raises(DisruptionRefused, match="already cordoned or tainted: gpu-node-0, gpu-node-1"):
        disruptor.target_node()


def test_restoring_every_node_would_uncordon_the_maintenance_node_without_the_record(small_cluster, monkeypatch):
    """Negative control: the maintenance check above fails if restore uncordons what it did not cordon."""
    handle = _fake_daemonset_driver(small_cluster)
    kube = handle.kube
    kube.patch(rest.NODES, "gpu-node-0", {"spec": {"unschedulable": True}})
    disruptor = Disruptor(handle, allowed=True)
    disruptor.cordoned.add("gpu-node-0")  # the old behaviour: every node named is treated as ours,
    monkeypatch.setattr(node_changes, "uncordon",  # and uncordoned with a blind patch, whatever the node records
                        lambda kube, node, run_id: kube.patch(rest.NODES, node, {"spec": {"unschedulable": False}}) and None)
    with disruptor.restoring("gpu-node-0"):
        pass
    assert not _cordoned(kube, "gpu-node-0")
