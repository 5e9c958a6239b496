"""Negative controls and safety for the disruption suites.

- a driver that does not come back fails the restart suite, saying so;
- a slice left behind by a driver that is gone is flagged as stale;
- a drain blocked by a PodDisruptionBudget is reported as blocked within its deadline;
- without --allow-disruptive, a run against an existing cluster touches no node or driver.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from dra_harness.cluster_handle import ClusterHandle, local_hardware
from dra_harness.disruption import Disruptor
from dra_harness.kube import rest
from dra_harness.kube.pods import wait_running
from dra_harness.profiles import by_name


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


def test_slices_of_a_driver_that_is_gone_are_flagged_stale(small_cluster):
    small_cluster.stop_driver("gpu-node-1")
    out = run_suite("suites/test_inventory.py", "--cluster=local", f"--cluster-name={small_cluster.name}")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "slices of gpu-node-1 are stale: no gpu.example.com driver runs there" in out.stdout
    assert "FAILED suites/test_inventory.py::test_every_node_with_slices_has_a_running_driver" in out.stdout


def test_a_drain_blocked_by_a_pdb_is_reported_within_its_deadline(small_cluster):
    handle = ClusterHandle("local", small_cluster.kube(), small_cluster.kubeconfig, "controls",
                           local_hardware(small_cluster.state().spec), by_name("example"), local=small_cluster)
    kube, ns = handle.kube, "controls"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns}})
    handle.template(ns, "gpu")
    handle.pod(ns, "protected", template="gpu", node_name="gpu-node-0", labels={"app": "protected"})
    wait_running(kube, ns, "protected")
    kube.create(rest.PDBS, {"metadata": {"name": "keep-one"},
                            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}}, ns)
    time.sleep(1)  # the disruption controller computes the budget
    started = time.monotonic()
    with Disruptor(handle, allowed=True).restoring("gpu-node-0") as d:
        result = d.drain("gpu-node-0", timeout=5)
    took = time.monotonic() - started
    assert not result.complete and "controls/protected" in result.blocked, result
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


def _fake_daemonset_driver(small_cluster):
    """A DaemonSet carrying the example chart's plugin label, run by KWOK on every node.

    It publishes nothing (the real plugins still run as processes); it lets the
    existing-cluster restart path (delete the node's plugin pod, wait for its
    replacement) run against a real DaemonSet controller.
    """
    handle = ClusterHandle("existing", small_cluster.kube(), small_cluster.kubeconfig, "controls",
                           local_hardware(small_cluster.state().spec), by_name("example"))
    kube = handle.kube
    kube.create(rest.NAMESPACES, {"metadata": {"name": "drivers"}})
    labels = {"app.kubernetes.io/component": "kubeletplugin", "app": "fake-plugin"}
    kube.create(rest.DAEMON_SETS, {
        "metadata": {"name": "fake-plugin"},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "plugin", "image": "registry.k8s.io/pause:3.10"}]}}},
    }, "drivers")
    from dra_harness.kube.waits import watch_until

    watch_until(kube, rest.PODS, lambda ps: len([p for p in ps if handle.driver_running(p["spec"].get("nodeName", ""))]) == 2,
                60, "fake plugin pods Ready", namespace="drivers")
    return handle


def test_on_an_existing_cluster_a_restart_replaces_the_drivers_daemonset_pod(small_cluster):
    handle = _fake_daemonset_driver(small_cluster)
    before = {p["metadata"]["uid"] for p in handle.kube.list(rest.PODS, "drivers", field_selector="spec.nodeName=gpu-node-0")}
    record = Disruptor(handle, allowed=True).restart_driver("gpu-node-0", kill=True, down_for=0, deadline=60)
    assert not record.failure, record.failure
    after = {p["metadata"]["uid"] for p in handle.kube.list(rest.PODS, "drivers", field_selector="spec.nodeName=gpu-node-0")
             if not p["metadata"].get("deletionTimestamp")}
    assert after and not after & before, "the plugin pod was not replaced"


def test_on_an_existing_cluster_a_driver_pod_that_is_not_replaced_fails_the_restart(small_cluster):
    handle = _fake_daemonset_driver(small_cluster)
    handle.kube.delete(rest.DAEMON_SETS, "fake-plugin", "drivers", propagation="Orphan")
    record = Disruptor(handle, allowed=True).restart_driver("gpu-node-0", kill=True, down_for=0, deadline=5)
    assert "did not come back within 5s: no Ready plugin pod on the node" in record.failure, record
