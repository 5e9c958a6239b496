"""The upgrade's pure logic: the plan's order, each invariant's comparison, storage reading, slice gaps.

Each invariant is shown to hold on identical snapshots and to break on the change it guards
(the live negative controls are in tests/integration/test_upgrade.py).
"""

from __future__ import annotations

import copy
import json

import pytest

from dra_harness.errors import InputError
from dra_harness.providers.embedded import commands
from dra_harness.providers.embedded.etcdstore import PROTOBUF_MAGIC, _prefix_end, stored_type
from dra_harness.providers.localstate import ClusterSpec, ClusterState
from dra_harness.upgrade import plan, record, runner, slices
from dra_harness.upgrade.runner import StepResult, UpgradeResult, UpgradeSpec
from dra_harness.upgrade.snapshot import Snapshot, differences


def _snapshot() -> Snapshot:
    return Snapshot(
        claims={"ns/shared": {"uid": "u1", "devices": ["gpu.example.com/n0/gpu-0"], "reserved_for": ["a", "b"]}},
        pods={"ns/a": {"uid": "p1", "node": "real-node-0", "phase": "Running",
                       "containers": {"ctr0": {"id": "containerd://1", "restarts": 0, "running": True}}}},
        cdi={"real-node-0/k8s.gpu.example.com-gpu_u1.yaml": "abc"},
    )


def test_identical_snapshots_break_no_invariant():
    assert not any(differences(_snapshot(), _snapshot()).values())


@pytest.mark.parametrize(("change", "invariant", "words"), [
    (lambda s: s.claims["ns/shared"].update(devices=["gpu.example.com/n0/gpu-1"]), "allocations", "changed devices"),
    (lambda s: s.claims["ns/shared"].update(uid="u2"), "allocations", "was replaced"),
    (lambda s: s.claims.pop("ns/shared"), "allocations", "is gone"),
    (lambda s: s.pods["ns/a"]["containers"]["ctr0"].update(restarts=1, id="containerd://2"), "containers", "restarted"),
    (lambda s: s.pods["ns/a"]["containers"]["ctr0"].update(running=False), "containers", "no longer running"),
    (lambda s: s.pods["ns/a"].update(uid="p2"), "containers", "was replaced"),
    (lambda s: s.pods["ns/a"].update(phase="Failed"), "containers", "went from Running to Failed"),
    (lambda s: s.cdi.clear(), "prepared", "was removed"),
    (lambda s: s.cdi.update({"real-node-0/k8s.gpu.example.com-gpu_u1.yaml": "def"}), "prepared", "other content"),
])
def test_each_invariant_breaks_on_the_change_it_guards_and_only_that_one(change, invariant, words):
    after = copy.deepcopy(_snapshot())
    change(after)
    found = differences(_snapshot(), after)
    assert len(found[invariant]) == 1 and words in found[invariant][0], found
    assert not any(v for k, v in found.items() if k != invariant), found


def test_objects_new_after_a_step_are_not_judged():
    after = _snapshot()
    after.claims["ns/probe"] = {"uid": "x", "devices": [], "reserved_for": []}
    after.cdi["real-node-0/new.yaml"] = "x"
    assert not any(differences(_snapshot(), after).values())


def _protobuf(api_version: str, kind: str) -> bytes:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return PROTOBUF_MAGIC + field(1, type_meta) + field(2, b"\x0a\x03raw") + bytes([3 << 3 | 0, 5])


def test_the_stored_version_is_read_from_protobuf_and_json_values():
    assert stored_type(_protobuf("resource.k8s.io/v1", "ResourceClaim")) == ("resource.k8s.io/v1", "ResourceClaim")
    assert stored_type(json.dumps({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass"}).encode()) == (
        "resource.k8s.io/v1beta2", "DeviceClass")
    assert _prefix_end(b"/registry/resourceclaims/") == b"/registry/resourceclaims0"


def _result(stored_after: dict, served: list[str], steps: list[StepResult] | None = None) -> UpgradeResult:
    r = UpgradeResult(UpgradeSpec("1.36.3", "1.37.2"), steps=steps or [])
    r.stored_after, r.served_after = stored_after, served
    return r


def test_the_timeline_is_drawn_as_a_png_with_a_row_per_step(tmp_path):
    steps = [StepResult(p, "control-plane", "1.37.2", 0.0, 0.5, 1.0, 2.0, {}, {}) for p in ("etcd", "kube-apiserver")]
    record.timeline(tmp_path / "t.png", _result({}, ["v1"], steps))
    assert (tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")


def test_storage_breaks_when_an_object_is_stored_in_a_version_the_new_server_does_not_serve():
    assert _result({"resourceclaims": {"resource.k8s.io/v1": 3}}, ["v1", "v1beta2"]).held
    broken = _result({"resourceclaims": {"resource.k8s.io/v1beta1": 3}}, ["v1", "v1beta2"])
    assert not broken.held and "v1beta1" in broken.invariants()["storage"][0]


def test_storage_is_not_established_when_etcd_yields_no_claim():
    r = _result({}, ["v1"])
    assert not r.held and "not established" in r.invariants()["storage"][0]


def test_a_breach_is_named_once_at_the_first_step_that_shows_it():
    def step(process: str, broken: list[str]) -> StepResult:
        return StepResult(process, "control-plane", "1.37.2", 0.0, 0.0, 1.0, 1.0, {}, {"containers": broken})

    r = _result({"resourceclaims": {"resource.k8s.io/v1": 1}}, ["v1"],
                [step("kube-apiserver", []), step("kube-scheduler", ["pod ns/a was replaced"]),
                 step("kubelet-real-node-0", ["pod ns/a was replaced"])])
    assert r.invariants()["containers"] == ["after kube-scheduler: pod ns/a was replaced"]


def test_allocation_failures_after_a_step_break_the_allocates_invariant():
    failed = StepResult("kube-scheduler", "control-plane", "1.37.2", 0.0, 0.0, 1.0, None, {},
                        {"allocates": ["a new claim's pod did not run: timed out"]})
    r = _result({"resourceclaims": {"resource.k8s.io/v1": 1}}, ["v1"], [failed])
    assert not r.held and r.invariants()["allocates"]


def test_the_plan_upgrades_the_control_plane_then_each_kubelet_then_each_driver():
    steps = plan.steps("1.36.3", "1.37.2", ["gpu-node-0"], ["real-node-0"])
    assert [s.process for s in steps] == ["kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                          "kubelet-real-node-0", "driver-gpu-node-0", "driver-real-node-0"]
    assert [s.kind for s in steps] == ["control-plane"] * 3 + ["kubelet", "driver", "driver"]
    assert steps[-1].version == plan.catalog.EXAMPLE_DRIVER_VERSION


def test_a_driver_roll_alone_swaps_only_drivers_there_and_back():
    steps = plan.steps("1.37.2", "1.37.2", ["gpu-node-0"], ["real-node-0"], "0.4.0", back_to="0.3.0")
    assert [(s.process, s.version) for s in steps] == [
        ("driver-gpu-node-0", "0.4.0"), ("driver-real-node-0", "0.4.0"),
        ("driver-gpu-node-0", "0.3.0"), ("driver-real-node-0", "0.3.0")]


def test_a_probe_pod_that_failed_before_it_ran_is_a_finding_with_its_event_and_dns_noise_is_not():
    warning = "probe-4-real-node-0: FailedPrepareDynamicResources: DRA driver gpu.example.com is not registered"
    slow = StepResult("driver-daemonset-real-node-0", "driver", "0.4.0", 1.2, 0.8, 0.4, 6.0, {"real-node-0": 13.9}, {},
                      [warning, "probe-4: MissingClusterDNS: kubelet does not have ClusterDNS IP configured"])
    quiet = StepResult("driver-gpu-node-0", "driver", "0.4.0", 0.0, 0.1, 0.0, 0.2, {}, {}, ["probe-0: MissingClusterDNS: x"])
    r = _result({"resourceclaims": {"resource.k8s.io/v1": 1}}, ["v1"], [quiet, slow])
    assert r.held and r.findings() == [
        "right after driver-daemonset-real-node-0 -> v0.4.0 (old one stopped in 0.8 s, new one up 0.4 s later) a new claim's "
        f"pod first failed, then ran on real-node-0 after 13.9 s: {warning}"]


def test_a_driver_daemonset_is_rolled_by_its_image_where_asked_and_the_other_drivers_are_swapped():
    steps = plan.steps("1.37.2", "1.37.2", ["gpu-node-0"], ["real-node-0"], "0.4.0", back_to="0.3.0",
                       pod_nodes=("real-node-0",))
    assert [(s.process, s.daemonset_node, s.kind) for s in steps[:2]] == [
        ("driver-gpu-node-0", None, "driver"), ("driver-daemonset-real-node-0", "real-node-0", "driver")]
    assert [s.version for s in steps] == ["0.4.0", "0.4.0", "0.3.0", "0.3.0"]


@pytest.mark.parametrize(("spec", "words"), [
    (dict(real_nodes=0, driver_daemonset="surge"), "--driver-daemonset needs a real node"),
    (dict(real_nodes=1, driver_daemonset="replace", inject=("driver-gone-at-unprepare",)), "under --driver-daemonset"),
    (dict(real_nodes=0, unsupported_skew=True), "--unsupported-skew needs"),
])
def test_an_upgrade_that_cannot_be_performed_is_refused_before_anything_starts(spec, words):
    args = {"from_version": "1.36.3", "to_version": "1.37.2", **spec}
    with pytest.raises(InputError, match=words):
        runner.check(runner.UpgradeSpec(**args))
    runner.check(runner.UpgradeSpec("1.36.3", "1.37.2", real_nodes=1, driver_daemonset="surge"))


@pytest.mark.parametrize(("args", "words"), [
    (("1.37.2", "1.37.2", "0.4.0", "0.4.0"), "nothing to upgrade"),
    (("1.37.2", "1.37.2", "0.2.0", "0.4.0"), "--driver-from 0.2.0: not an example-driver release"),
    (("1.36.3", "1.37.2", "0.4.0", "0.1.0"), "--driver-to 0.1.0"),
])
def test_an_upgrade_with_nothing_to_do_or_an_unknown_driver_is_refused(args, words):
    with pytest.raises(InputError, match=words):
        plan.check(*args)
    plan.check("1.37.2", "1.37.2", "0.3.0", "0.4.0")


def test_a_driver_before_v0_4_is_not_given_the_metrics_flag_it_lacks():
    st = ClusterState(spec=ClusterSpec(driver_version="0.3.0"), ports={}, binaries={"dra-example-kubeletplugin": "/d"})
    paths = commands.Paths(commands.Path("/s"), commands.Path("/s/kubeconfig"), commands.PKI(commands.Path("/s/pki")))
    dirs = {k: commands.Path(f"/x/{k}") for k in ("cdi", "registrar", "plugins")}
    assert not any(a.startswith("--metrics-port") for a in commands.driver(st, paths, "n0", dirs, "gpu.example.com"))
    st.swapped["driver-n0"] = {"version": "0.4.0", "binary": "/d4"}
    argv = commands.driver(st, paths, "n0", dirs, "gpu.example.com")
    assert argv[0] == "/d4" and "--metrics-port=-1" in argv


@pytest.mark.parametrize(("old", "new", "words"), [
    ("1.35.4", "1.37.2", "one minor at a time"),
    ("1.37.2", "1.36.3", "one minor at a time"),
    ("1.34.0", "1.35.4", "not a release"),
])
def test_only_an_upgrade_to_the_next_minor_is_planned(old, new, words):
    with pytest.raises(InputError, match=words):
        plan.check_pair(old, new)
    plan.check_pair("1.36.3", "1.37.2")


def test_a_swapped_process_runs_its_own_release_binary_and_gates():
    st = ClusterState(spec=ClusterSpec(k8s_version="1.36.3"), ports={"apiserver": 1, "etcd": 2, "scheduler": 3},
                      binaries={"kube-apiserver": "/old/kube-apiserver", "kube-scheduler": "/old/kube-scheduler"})
    st.swapped["kube-apiserver"] = {"version": "1.37.2", "binary": "/new/kube-apiserver"}
    paths = commands.Paths(commands.Path("/s"), commands.Path("/s/kubeconfig"), commands.PKI(commands.Path("/s/pki")))
    api, sched = commands.apiserver(st, paths), commands.scheduler(st, paths)
    assert api[0] == "/new/kube-apiserver" and sched[0] == "/old/kube-scheduler"
    gate = lambda argv: next(a for a in argv if a.startswith("--feature-gates="))  # noqa: E731
    assert gate(api) == f"--feature-gates={commands.gates.feature_gates_flag('1.37.2')}"
    assert gate(sched) == f"--feature-gates={commands.gates.feature_gates_flag('1.36.3')}"


def test_gaps_are_the_stretches_a_node_published_fewer_devices_than_it_has():
    samples = [(0.0, {"a": 8, "b": 8}), (1.0, {"a": 0, "b": 8}), (2.0, {"a": 4, "b": 8}), (3.0, {"a": 8, "b": 7})]
    found = slices.gaps(samples, 8)
    assert found == [slices.Gap("a", 1.0, 3.0, 0), slices.Gap("b", 3.0, None, 7)]
    assert "for 2.0 s" in found[0].describe(8) and "until the end" in found[1].describe(8)
    assert slices.gaps([(0.0, {"a": 8})], 8) == []


def test_an_upgrade_run_becomes_one_report_row_per_invariant_and_a_broken_one_fails(tmp_path):
    from dra_harness.report import rundir
    from dra_harness.report import upgrade as report_upgrade

    assert report_upgrade.rows(tmp_path) == []
    (tmp_path / "upgrade").mkdir()
    body = {"from": "1.36.3", "to": "1.37.2", "steps": [], "findings": ["a gap"], "invariants": [
        {"name": "allocations", "statement": "s", "held": True, "breaches": []},
        {"name": "containers", "statement": "s", "held": False, "breaches": ["after x: pod ns/a was replaced"]}]}
    (tmp_path / "upgrade" / "upgrade.json").write_text(json.dumps(body))
    rows = report_upgrade.rows(tmp_path)
    assert [(r["test"], r["outcome"]) for r in rows] == [("test_allocations", "passed"), ("test_containers", "failed")]
    assert "pod ns/a was replaced" in rows[1]["message"] and rows[0]["evidence"][1]["findings"] == ["a gap"]
    assert rundir.in_layout("upgrade/upgrade-timeline.png")
    (tmp_path / "upgrade" / "upgrade.json").write_text("{}")
    assert report_upgrade.rows(tmp_path)[0]["outcome"] == "error"


def test_findings_say_what_happened_under_the_unsupported_skew_and_after_a_reboot():
    from dra_harness.upgrade.reboot import RebootResult
    from dra_harness.upgrade.skew import SkewResult

    ran = SkewResult("real-node-0", "1.37.2", "1.36.3", ready_after_s=0.8, pod_after_s=40.0)
    assert "kubelet v1.37.2 under a v1.36.3 control plane" in ran.finding() and "ran in 40.0 s" in ran.finding()
    assert "running pods untouched" in ran.finding()
    refused = SkewResult("real-node-0", "1.37.2", "1.36.3", not_ready="node not Ready: kubelet exited")
    assert "did not become Ready (node not Ready: kubelet exited)" in refused.finding()
    stuck = RebootResult("real-node-0", 0.9, 1.3, {"a": "came back", "b": "CreateContainerError: CDI device injection failed"})
    assert "1 of 2 pods with claims came back; 1 did not: CreateContainerError: CDI" in stuck.finding()
