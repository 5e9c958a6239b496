"""A check's needs judged against the preflight's facts: missing facts name themselves, unknown ones refuse nothing."""

from __future__ import annotations

import pytest

from dra_harness.checks import needs
from dra_harness.checks.preflight import Facts, NodeFacts
from dra_harness.errors import NotEstablished


def _facts(**over) -> Facts:
    nodes = {
        "gpu-a": NodeFacts("gpu-a", simulated=False, schedulable=True, disruptable=True, published=8, image="usable"),
        "gpu-b": NodeFacts("gpu-b", simulated=True, schedulable=True, disruptable=False, published=8),
    }
    facts = Facts("run-1", "gpu.example.com", identity="system:serviceaccount:ci:dra-harness", nodes=nodes,
                  driver_daemonset="dra-driver/example-kubeletplugin", rights={"patch-nodes": True, "delete-driver-pods": True})
    for k, v in over.items():
        setattr(facts, k, v)
    return facts


def test_a_cluster_with_what_every_check_needs_meets_every_need():
    wanted = [needs.container_node, needs.pullable_image, needs.restartable_driver, needs.disruptable_node,
              needs.whole_node(), needs.free_devices(16), needs.free_devices(8, same_node=True), needs.right("patch-nodes")]
    assert needs.unmet(_facts(), wanted) is None


def test_devices_other_tenants_hold_and_a_cordon_leave_no_whole_node_and_say_where():
    f = _facts()
    f.nodes["gpu-a"].held_by_others = ["gpu-3"]
    f.nodes["gpu-b"].schedulable = False
    why = needs.unmet(f, [needs.whole_node()])
    assert why == "whole_node: no whole node is free: devices held by others on {'gpu-a': 1}; unschedulable: gpu-b"
    assert needs.unmet(f, [needs.free_devices(8, same_node=True)]) == (
        "free_devices(8, same_node): needs 8 free devices on one schedulable node; the preflight saw 7 (1 held by other workloads)")
    assert needs.unmet(f, [needs.free_devices(7, same_node=True)]) is None  # negative control: 7 are free


def test_a_driver_that_is_no_daemonset_pod_cannot_be_restarted_and_the_evidence_says_why():
    f = _facts(driver_daemonset="", driver_evidence="the plugin pods of gpu.example.com belong to no DaemonSet")
    assert needs.unmet(f, [needs.restartable_driver]) == (
        "restartable_driver: the driver is not a pod the harness can restart: the plugin pods of gpu.example.com belong to no DaemonSet")
    assert needs.unmet(_facts(driver_daemonset="", driver_controlled=True), [needs.restartable_driver]) is None


def test_a_right_denied_is_missing_and_a_right_never_asked_refuses_nothing():
    f = _facts(rights={"delete-driver-pods": False}, rights_evidence={"delete-driver-pods": "delete pods in dra-driver: denied"})
    assert needs.unmet(f, [needs.restartable_driver]).endswith("may not delete pods of dra-driver/example-kubeletplugin (delete pods in dra-driver: denied)")
    assert "lacks a right: delete pods in dra-driver: denied" in needs.unmet(f, [needs.right("delete-driver-pods")])
    assert needs.unmet(f, [needs.right("create-device-taint-rules")]) is None


def test_an_image_no_node_can_run_is_missing_but_an_undecided_pull_is_not():
    f = _facts()
    f.nodes["gpu-a"].image, f.nodes["gpu-a"].image_evidence = "unusable", "pod x container c: ErrImagePull: dial tcp"
    f.probe_image = "busybox:1.36"
    assert needs.unmet(f, [needs.pullable_image]) == (
        "pullable_image: the probe image busybox:1.36 cannot run on any node (gpu-a: pod x container c: ErrImagePull: dial tcp); "
        "pass --shell-image")
    f.nodes["gpu-a"].image = "unknown"
    assert needs.unmet(f, [needs.pullable_image]) is None


def test_no_disruptable_node_is_missing():
    f = _facts()
    f.nodes["gpu-a"].disruptable = False
    assert needs.unmet(f, [needs.disruptable_node]).startswith("disruptable_node: no schedulable node labelled")


def test_demand_raises_not_established_with_the_missing_fact():
    with pytest.raises(NotEstablished, match="needs 20 free devices"):
        needs.demand(_facts(), needs.free_devices(20))


def test_facts_survive_their_json_round_trip_with_free_counts():
    f = _facts()
    f.nodes["gpu-a"].held_by_others = ["gpu-0", "gpu-1"]
    raw = f.to_json()
    assert raw["nodes"]["gpu-a"]["free"] == 6 and raw["schema"] == 1
    back = Facts.from_json(raw)
    assert back == f and back.nodes["gpu-a"].free == 6


def test_the_report_shows_what_the_cluster_allowed_us_to_test(tmp_path):
    from dra_harness.checks import preflight
    from dra_harness.report import write_report
    from dra_harness.report.files import RunDirError, write_json
    from tests.unit.report_runs import make_run

    run = make_run(tmp_path / "run", contention_scale=None)
    md_without = (write_report(run), (run / "signoff.md").read_text())[1]
    assert "No preflight was recorded for this run." in md_without  # negative control: no file, no facts
    f = _facts(rights={"patch-nodes": False}, rights_evidence={"patch-nodes": "patch nodes: denied"}, seconds=4.2)
    f.nodes["gpu-a"].held_by_others = ["gpu-3"]
    write_json(run / preflight.FILE, f.to_json())
    html = write_report(run).read_text()
    md = (run / "signoff.md").read_text()
    assert "## What this cluster allowed us to test" in md and "Established by the preflight in 4.2 s" in md
    assert "| rights | 0 of 1 verbs the suites use allowed | patch nodes: denied |" in md
    assert "| node gpu-a | 7 of 8 devices free; schedulable, disruptable; probe image usable | held by others: gpu-3 |" in md
    assert 'id="preflight"' in html and "held by others: gpu-3" in html
    (run / preflight.FILE).write_text('{"nodes": 3}')
    with pytest.raises(RunDirError, match="not a preflight record"):
        write_report(run)


def _plugin_pod(name: str, node: str, owner: str | None, paths: tuple[str, ...], env: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": "acme-gpu",
                         "ownerReferences": [{"kind": "DaemonSet", "name": owner}] if owner else []},
            "spec": {"nodeName": node, "volumes": [{"hostPath": {"path": p}} for p in paths],
                     "containers": [{"env": [{"name": "DRIVER_NAME", "value": env}]}]}}


def _discover(pods: list[dict]) -> Facts:
    from types import SimpleNamespace

    from dra_harness.checks import preflight

    handle = SimpleNamespace(kube=SimpleNamespace(list=lambda res, *a, **k: pods), controls_driver=False,
                             profile=SimpleNamespace(driver_daemonset=("dra-example-driver", "dra-example-driver-kubeletplugin")))
    facts = _facts(driver_daemonset="")
    preflight._plugin_pods(handle, facts)  # type: ignore[arg-type]
    return facts


def test_the_drivers_daemonset_is_found_by_what_its_pods_mount_whatever_its_release_is_called():
    registry = ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
    other = _plugin_pod("other-x", "gpu-a", "other-dra-driver", registry, env="other.example.com")
    ours = _plugin_pod("acme-x", "gpu-a", "acme-dra-kubeletplugin", registry, env="gpu.example.com")
    facts = _discover([other, ours])
    assert facts.driver_daemonset == "acme-gpu/acme-dra-kubeletplugin"
    assert facts.nodes["gpu-a"].driver_pods == ["acme-gpu/acme-x"]
    assert "the profile's hint was dra-example-driver/dra-example-driver-kubeletplugin" in facts.driver_evidence


def test_a_plugin_pod_of_no_daemonset_and_a_second_daemonset_are_facts_not_guesses():
    path = ("/var/lib/kubelet/plugins/gpu.example.com",)
    bare = _discover([_plugin_pod("bare", "gpu-a", None, path)])
    assert bare.driver_daemonset == "" and "belong to no DaemonSet" in bare.driver_evidence
    two = _discover([_plugin_pod("a", "gpu-a", "one", path), _plugin_pod("b", "gpu-b", "two", path)])
    assert two.driver_daemonset == "" and "several DaemonSets serve gpu.example.com" in two.driver_evidence
    # Negative control: a pod with the generic registration mount but another driver's name is not ours.
    none = _discover([_plugin_pod("o", "gpu-a", "other", ("/var/lib/kubelet/plugins_registry",), env="other.example.com")])
    assert none.driver_daemonset == "" and "not a pod we can restart" in none.driver_evidence


def test_a_plugin_that_names_its_driver_nowhere_is_found_by_registering_from_the_profiles_daemonset():
    """NVIDIA's chart: the whole plugins directory mounted, `gpu-kubelet-plugin -v 4`, no driver name in env."""
    registry = ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
    chart = _plugin_pod("dra-example-driver-kubeletplugin-x", "gpu-a", "dra-example-driver-kubeletplugin", registry)
    chart["metadata"]["namespace"] = "dra-example-driver"
    facts = _discover([chart])
    assert facts.driver_daemonset == "dra-example-driver/dra-example-driver-kubeletplugin", facts.driver_evidence
    # Negative control: the same pod from a DaemonSet the profile does not name is not taken for the driver's.
    chart["metadata"]["ownerReferences"][0]["name"] = "someone-elses-plugin"
    assert _discover([chart]).driver_daemonset == ""


def test_a_device_quota_in_every_new_namespace_caps_what_one_check_may_ask_for():
    f = _facts(admission={"allowed": True, "resource_quotas": ["platform-device-quota"],
                          "device_quota": {"gpu.example.com": 6, "other.example.com": 1}},
               device_classes={"gpu.example.com": {"published": 16, "free": 16}})
    assert f.namespace_device_quota() == ("gpu.example.com", 6)  # another driver's class is not ours
    whole = needs.namespace_devices(needs.largest_node, "a node's devices")
    assert needs.unmet(f, [whole]) == (
        "namespace_devices(a node's devices): needs 8 devices in its namespace; a ResourceQuota the cluster puts in every "
        "new namespace allows 6 of DeviceClass gpu.example.com (platform-device-quota)")
    assert "allows 6" in needs.unmet(f, [needs.free_devices(7)])
    assert needs.unmet(f, [needs.namespace_devices(6), needs.free_devices(6, same_node=True)]) is None
    assert needs.unmet(_facts(), [whole, needs.free_devices(16)]) is None  # negative control: no quota, no cap


def test_a_pool_scaled_to_zero_says_no_device_is_published_and_one_device_is_enough():
    none = _facts(nodes={"gpu-a": NodeFacts("gpu-a", simulated=False, schedulable=True, disruptable=True, published=0)})
    assert "publishes no device on any node" in needs.unmet(none, [needs.any_device])
    assert needs.unmet(_facts(), [needs.any_device]) is None
    # Slices that could not be read are no zero: the check's own reads say what went wrong.
    assert needs.unmet(_facts(nodes={}, errors=["ResourceSlices: 403 forbidden"]), [needs.any_device]) is None
