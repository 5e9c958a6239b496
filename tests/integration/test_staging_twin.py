"""The harness on a cluster it did not build: same verdicts, nothing of others touched, two runs at once.

The staging twin (:mod:`dra_harness.providers.embedded.twin`) is the embedded cluster with a
DaemonSet driver, another vendor's plugin with the same generic labels, two tenants'
pods holding claims, their PriorityClass and DeviceClass, a node cordoned for
maintenance, and a ServiceAccount holding only the roles in deploy/rbac. The main
job runs against it through that ServiceAccount's kubeconfig, as a user's CI would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.providers.embedded import twin as twin_mod
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster
from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.report.results import read_results

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
#: Tests whose verdict on the twin differs from the embedded cluster's (all pass there), and why.
DIFFERS = {
    "test_a_claim_made_while_the_driver_is_down_is_allocated_or_waits_with_a_reason":
        "skipped: a DaemonSet replaces the stopped driver within seconds; the harness cannot hold it down",
    "test_slices_wiped_while_the_driver_is_down_come_back_with_it":
        "skipped: as above, and the driver's slices are not the harness's to delete",
    "test_a_kubelet_wipes_the_slices_of_a_driver_gone_30_s_and_running_containers_keep_running":
        "skipped: the driver does not stay gone 30 s under a DaemonSet",
    "test_a_pod_whose_driver_is_gone_stays_terminating_until_the_driver_unprepares_it":
        "skipped: the DaemonSet brings the driver back while the pod terminates",
    # Driver configurations restart the harness's own plugin processes; a DaemonSet's settings are its installation's.
    **dict.fromkeys([
        "test_partitions_draw_on_their_gpus_counters_so_the_whole_gpu_waits_until_they_are_freed",
        "test_a_device_that_takes_several_allocations_gives_each_a_share_id_and_its_consumed_capacity",
        "test_nics_of_the_net_profile_share_their_bandwidth_as_consumable_capacity",
        "test_the_driver_writes_device_status_data_into_the_claim_at_prepare",
        "test_a_device_with_binding_conditions_binds_its_pod_only_once_they_are_met",
        "test_a_numa_node_of_the_cpu_profile_is_shared_by_two_requests_and_its_cpus_are_charged_to_the_node",
    ], "skipped: the driver is a DaemonSet the harness does not configure"),
    "test_the_drivers_webhook_refuses_an_invalid_opaque_config_before_any_pod_waits_on_it":
        "skipped: the driver's installation decides whether its webhook runs (chart webhook.enabled)",
    "test_pods_asking_for_an_extended_resource_get_one_gpu_each_through_a_generated_claim":
        "skipped: it needs a DeviceClass of its own, which the ServiceAccount's roles do not grant",
    # The partition layout runs on simulated nodes; the twin run does not pass --allow-contention --simulated-nodes.
    **dict.fromkeys([
        "test_no_memory_slice_is_given_to_two_partitions",
        "test_no_partition_request_waits_while_a_placement_for_it_is_free",
        "test_each_tenant_stays_within_its_device_quota",
        "test_a_claim_matched_on_pcie_root_gets_devices_under_one_root",
        "test_more_devices_than_one_root_holds_stay_pending_with_the_reason",
        "test_a_claim_matched_on_root_and_nvlink_domain_gets_devices_sharing_both",
        "test_a_noexecute_taint_the_driver_publishes_evicts_the_pod_holding_that_device",
        "test_a_noschedule_taint_the_driver_publishes_keeps_new_claims_off_that_device",
        "test_replicas_that_fell_back_to_another_model_are_found_with_each_replicas_model",
        "test_replicas_that_all_got_the_model_they_asked_for_raise_no_finding",
    ], "skipped: no simulated nodes allowed on the twin"),
    "test_a_namespace_limited_to_one_device_class_is_refused_any_other":
        "skipped: installing a ValidatingAdmissionPolicy is not in the ServiceAccount's roles",
    "test_the_drivers_service_account_may_do_no_more_than_publish_its_nodes_slices_and_read_claims":
        "skipped: the ServiceAccount's roles grant no SubjectAccessReview",
    "test_the_schedulers_and_claim_controllers_dra_metrics_move_with_claims_and_pods":
        "skipped: only the API server's /metrics is reachable on a cluster the run did not create",
    "test_each_kubelet_that_prepared_a_claim_counts_it_in_its_dra_metrics":
        "skipped: the ServiceAccount's roles do not grant nodes/proxy (or no real node)",
    "test_on_the_drivers_own_devices_a_claim_matched_on_pcie_root_stays_under_one_root":
        "skipped: the example driver publishes no PCIe root (skipped on the embedded cluster too)",
}


@pytest.fixture(scope="module")
def twin(binaries, tmp_path_factory):
    name = f"it-twin-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    real = 1 if unavailable_reason() is None else 0
    cluster.up(ClusterSpec(name=name, nodes=3, gpus_per_node=8, real_nodes=real, owner_pid=os.getpid()), timeout=240)
    try:
        started = time.monotonic()
        made = twin_mod.build(cluster, tmp_path_factory.mktemp("twin"))
        print(f"staging twin built in {time.monotonic() - started:.1f}s (real nodes: {real})")
        yield cluster, made
    finally:
        cluster.down()


def _run(made: twin_mod.Twin, report_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "dra_harness.cli", "run", "--cluster", "existing", "--kubeconfig", str(made.kubeconfig),
         "--expected-hardware", str(made.expected_hardware), "--allow-disruptive", "--report-dir", str(report_dir),
         "--min-established=0",  # judged here: false FAILs and harm, not how much the twin lets a run establish
         "--ignore=suites/test_contention.py", f"--shell-image={WORKLOAD_IMAGE}", *extra],
        capture_output=True, text=True, timeout=1500, cwd=ROOT)
    return out, time.monotonic() - started


def _verdicts(report_dir: Path) -> dict[str, str]:
    """``suite::test`` -> outcome."""
    return {f"{r['suite']}::{r['test']}": r["outcome"] for r in read_results(report_dir)}


#: Tests that can only be "not established" with the example driver, on the twin as on the embedded cluster, and why.
NOT_ESTABLISHED = {
    "test_a_real_nodes_kubelet_reports_the_health_of_each_claimed_device_to_the_pod":
        "the example driver serves no DRA health service: the kubelet reports every device Unknown",
}


def _check_verdicts(verdicts: dict[str, str], log: str) -> None:
    failed = {t: o for t, o in verdicts.items() if o in ("failed", "error")}
    assert not failed, f"failed on the twin: {failed}\n{log[-3000:]}"
    # Skipped (the user's choice) or not established (the cluster did not allow it): either only where listed.
    # The GPU visibility suite needs the nvidia profile and a probe image: it skips on the embedded cluster too.
    unexpected = {t: o for t, o in verdicts.items() if o in ("skipped", "not established")
                  and t.split("::")[1].split("[")[0] not in {**DIFFERS, **NOT_ESTABLISHED}
                  and not t.startswith("gpu_visibility::")}
    assert not unexpected, f"not passed on the twin but not listed in DIFFERS: {unexpected}"


def test_the_twin_check_catches_a_run_that_uncordons_and_deletes_what_is_not_its_own(twin):
    """Negative control: the same comparisons flag the harm the old code did."""
    cluster, made = twin
    kube = cluster.kube()
    before = twin_mod.others(kube)
    pods = kube.list(rest.PODS, twin_mod.OTHER_NAMESPACE)
    kube.patch(rest.NODES, made.maintenance_node, {"spec": {"unschedulable": False}})
    kube.delete(rest.PODS, pods[0]["metadata"]["name"], twin_mod.OTHER_NAMESPACE, grace_seconds=0)
    try:
        changes = twin_mod.changed(before, twin_mod.others(kube))
        assert f"changed: Node/{made.maintenance_node}" in changes
        assert f"gone: Pod/{twin_mod.OTHER_NAMESPACE}/{pods[0]['metadata']['name']}" in changes
    finally:
        kube.patch(rest.NODES, made.maintenance_node, {"spec": {"unschedulable": True}})


def test_two_runs_at_once_through_the_serviceaccount_each_give_the_embedded_verdicts_and_touch_nothing_of_others(
        twin, tmp_path):
    """Each run must give what one run alone gives (a run alone had a test of its own, folded here: the two
    checked the same verdicts, and the staging shapes run one alone every day)."""
    cluster, made = twin
    kube = cluster.kube()
    before = twin_mod.others(kube)
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda i: _run(made, tmp_path / f"run-{i}"), range(2)))
    both = time.monotonic() - started
    print(f"two concurrent runs: {both:.1f}s wall ({runs[0][1]:.1f}s and {runs[1][1]:.1f}s)")
    for i, (out, _) in enumerate(runs):
        verdicts = _verdicts(tmp_path / f"run-{i}")
        print(f"run {i}: {sum(o == 'passed' for o in verdicts.values())} passed, "
              f"{sum(o == 'skipped' for o in verdicts.values())} skipped")
        for r in read_results(tmp_path / f"run-{i}"):  # what a DaemonSet driver's restart looked like
            for e in r["evidence"]:
                if "replacement_ready_after_s" in e:
                    print(f"  restart on {e['node']} (kill={e['kill']}): replacement Ready {e['replacement_ready_after_s']}s, "
                          f"slices whole {e['back_after_s']}s, slices missing {e['slices_missing_s']}s")
        _check_verdicts(verdicts, out.stdout + out.stderr)
        assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
        assert any(v == "passed" and t.startswith("driver_restart::") for t, v in verdicts.items()), f"run {i}: no driver restart ran"
    assert kube.get(rest.NODES, made.maintenance_node)["spec"].get("unschedulable"), "the maintenance node was uncordoned"
    assert not twin_mod.changed(before, twin_mod.others(kube)), twin_mod.changed(before, twin_mod.others(kube))
    assert not twin_mod.leftovers(kube), twin_mod.leftovers(kube)
