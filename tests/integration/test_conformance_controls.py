"""Negative controls for the conformance suites: each injected fault flips the check aimed at it.

- a typo'd selector: `dra-harness diagnose` names the misspelt attribute;
- a full cluster: diagnose says capacity is exhausted and names the holders;
- a typo and a full cluster side by side: two different causes for one identical scheduler message;
- a device allocated twice (forced into a claim's status) or published twice: the uniqueness checks fail;
- a failing test leaves its namespace as evidence (and keeps it with --keep-on-failure);
- a tenant audit over no claims is not established; over a claim two tenants share, it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dra_harness.checks.diagnose import diagnose
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import (
    allocated_devices,
    scheduling_message,
    wait_running,
    wait_unschedulable,
)
from dra_harness.kube.policy import policy_refusal
from dra_harness.kube.waits import WaitTimeout, watch_until
from dra_harness.labels import KEPT_LABEL, RUN_LABEL
from dra_harness.checks.sharing import NOTHING_AUDITED
from dra_harness.report import failure_evidence
from dra_harness.report.results import NOT_ESTABLISHED, read_results


def run_suite(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--cluster=existing", f"--kubeconfig={cluster.kubeconfig}",
         "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=600,
    )


def test_a_typo_and_a_full_cluster_look_the_same_to_the_scheduler_but_not_to_diagnose(handle):
    ns = "controls"
    total = handle.expected.total_devices
    handle.template(ns, "all-of-a-node", handle.request(count=min(handle.expected.nodes.values())))
    for i in range(len(handle.expected.nodes)):
        handle.pod(ns, f"hog-{i}", template="all-of-a-node")
        wait_running(handle.kube, ns, f"hog-{i}")
    handle.template(ns, "typo", handle.request(selectors=["device.attributes['gpu.example.com'].modle == 'LATEST-GPU-MODEL'"]))
    handle.template(ns, "one", handle.request())
    handle.pod(ns, "typo", template="typo")
    handle.pod(ns, "starved", template="one")
    typo_msg = scheduling_message(wait_unschedulable(handle.kube, ns, "typo"))
    starved_msg = scheduling_message(wait_unschedulable(handle.kube, ns, "starved"))
    assert "cannot allocate all claims" in typo_msg and "cannot allocate all claims" in starved_msg
    # A pod wait that times out says where each pod stands and what it was warned of (it once said "2 object(s)").
    with pytest.raises(WaitTimeout) as timeout:
        watch_until(handle.kube, rest.PODS, lambda pods: False, 2, "the typo'd pod Running", namespace=ns,
                    field_selector="metadata.name=typo")
    said = str(timeout.value)
    assert "typo: Pending; PodScheduled False (Unschedulable: 0/" in said and "\n  warning FailedScheduling: 0/" in said, said

    by_pod = {d.pod: d for d in diagnose(handle.kube, ns)}
    assert by_pod["typo"].cause == "selector-typo", by_pod["typo"]
    assert "gpu.example.com/modle" in by_pod["typo"].message and "did you mean gpu.example.com/model" in by_pod["typo"].message
    assert by_pod["starved"].cause == "capacity-exhausted", by_pod["starved"]
    assert "0 free" in by_pod["starved"].message and "controls/hog-0-gpu-" in by_pod["starved"].message
    assert by_pod["starved"].details["matching"] == total

    cli = subprocess.run([sys.executable, "-m", "dra_harness.cli", "diagnose", "-n", ns, f"--kubeconfig={handle.kubeconfig}"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    lines = sorted(cli.stdout.splitlines())
    assert lines[0].startswith("controls/starved: capacity-exhausted:") and lines[1].startswith("controls/typo: selector-typo:")


def test_a_pod_wait_that_the_namespaces_quota_ran_out_names_the_refusal_so_the_check_is_not_established(handle):
    """A wait with no explanation of its own quotes the warnings of every pod it waited on: two claims refused by
    the quota make it the cluster's policy, not the product's failure (a twin's run once FAILed such a wait)."""
    ns = "controls"
    handle.kube.create(rest.RESOURCE_QUOTAS, {"metadata": {"name": "one-device"}, "spec": {"hard": {
        f"{handle.device_class}.deviceclass.resource.k8s.io/devices": "1"}}}, ns)
    handle.template(ns, "one", handle.request())
    for i in range(3):
        handle.pod(ns, f"q-{i}", template="one")
    with pytest.raises(WaitTimeout) as timeout:
        watch_until(handle.kube, rest.PODS, lambda pods: len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods),
                    8, "3 pods Running", namespace=ns)
    said = str(timeout.value)
    assert "warning FailedResourceClaimCreation: " in said and "(on 2 pod(s), the last said)" in said, said
    refused = policy_refusal(timeout.value)
    assert refused and refused.startswith("the cluster's ResourceQuota refused a claim") and "one-device" in refused, said


def test_a_missing_device_class_and_missing_slices_are_named(handle):
    ns = "controls"
    handle.template(ns, "ghost", handle.request(device_class="gpu.exmaple.com"))
    handle.pod(ns, "ghost", template="ghost")
    wait_unschedulable(handle.kube, ns, "ghost")
    # Every driver down and its slices gone: the class matches nothing that is published.
    for node in handle.provider.embedded.state().spec.node_names():
        handle.provider.embedded.stop_driver(node)
    for s in handle.kube.list(rest.RESOURCE_SLICES):
        handle.kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
    handle.pod(ns, "no-slices", template=handle.template(ns, "plain")["metadata"]["name"])
    wait_unschedulable(handle.kube, ns, "no-slices")
    by_pod = {d.pod: d for d in diagnose(handle.kube, ns)}
    assert by_pod["ghost"].cause == "device-class-missing" and "gpu.exmaple.com" in by_pod["ghost"].message
    assert by_pod["no-slices"].cause == "no-devices-for-class", by_pod["no-slices"]


def test_a_device_kept_off_by_a_taint_and_an_unmapped_extended_resource_are_named(handle):
    """Both read "cannot allocate" or nothing at all to the scheduler's message; diagnose names each.
    Control: the same request with a toleration for the taint runs, so the taint was the cause."""
    ns, kube = "controls", handle.kube
    res = rest.device_taint_rules(kube)
    if res is None:
        pytest.skip("this Kubernetes serves no DeviceTaintRule")
    taint = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    kube.create(res, {"metadata": {"name": "ctl-maintenance"},
                      "spec": {"deviceSelector": {"driver": handle.driver}, "taint": taint}})
    try:
        handle.template(ns, "one", handle.request())
        handle.pod(ns, "kept-off", template="one")
        wait_unschedulable(kube, ns, "kept-off")
        body = builders.pod("wants-extended", handle.run_id)
        body["spec"]["containers"][0]["resources"] = {"limits": {"example.com/gpu": "1"}}
        kube.create(rest.PODS, body, ns)
        wait_unschedulable(kube, ns, "wants-extended")

        by_pod = {d.pod: d for d in diagnose(kube, ns)}
        assert by_pod["kept-off"].cause == "device-tainted", by_pod["kept-off"]
        assert "example.com/maintenance=true:NoSchedule (DeviceTaintRule ctl-maintenance)" in by_pod["kept-off"].message
        assert by_pod["wants-extended"].cause == "extended-resource-unmapped", by_pod["wants-extended"]
        assert "example.com/gpu: no DeviceClass maps it" in by_pod["wants-extended"].message

        # Without --kubeconfig or --name, diagnose reads KUBECONFIG, as kubectl does.
        cli = subprocess.run([sys.executable, "-m", "dra_harness.cli", "diagnose", "-n", ns], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "KUBECONFIG": str(handle.kubeconfig)})
        assert "controls/kept-off: device-tainted:" in cli.stdout, cli.stdout + cli.stderr

        handle.template(ns, "tolerant", handle.request(tolerations=[{**taint, "operator": "Equal"}]))
        handle.pod(ns, "tolerant", template="tolerant")
        wait_running(kube, ns, "tolerant")
    finally:
        kube.delete(res, "ctl-maintenance")


def test_a_device_forced_into_two_claims_fails_the_uniqueness_check(handle):
    ns = "controls"
    handle.template(ns, "one", handle.request())
    handle.pod(ns, "owner", template="one")
    pod = wait_running(handle.kube, ns, "owner")
    victim = handle.kube.get(rest.RESOURCE_CLAIMS, pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"], ns)
    # A second claim whose status (written as the scheduler would) points at the same device.
    intruder = handle.claim(ns, "intruder")
    intruder["status"] = {"allocation": victim["status"]["allocation"]}
    handle.kube.replace_status(rest.RESOURCE_CLAIMS, intruder)
    assert allocated_devices(handle.kube.get(rest.RESOURCE_CLAIMS, "intruder", ns)) == allocated_devices(victim)

    out = run_suite(handle.provider.embedded, "suites/test_sharing.py::test_pods_using_templates_never_share_a_device")
    assert out.returncode == 1, out.stdout[-2000:]
    assert "is allocated to 2 claims" in out.stdout and "controls/intruder" in out.stdout


def test_a_failed_test_leaves_its_namespace_as_evidence_and_keeps_it_on_request(handle, tmp_path):
    failing = tmp_path / "test_fails.py"
    failing.write_text(
        "def test_waits_forever(cluster, namespace):\n"
        "    cluster.template(namespace, 't', cluster.request(selectors=[\"device.attributes['gpu.example.com'].modle == 'x'\"]))\n"
        "    cluster.pod(namespace, 'stuck', template='t')\n"
        "    from dra_harness.kube.pods import wait_running\n"
        "    wait_running(cluster.kube, namespace, 'stuck', timeout=3)\n"
    )
    report = tmp_path / "report"
    out = run_suite(handle.provider.embedded, str(failing), f"--report-dir={report}", "--keep-on-failure", "--rootdir=.")
    assert out.returncode == 1, out.stdout[-2000:]
    assert "timed out after 3s waiting for pod" in out.stdout, out.stdout[-3000:]
    dumps = list((report / "failures").glob("*.json"))
    assert len(dumps) == 1, out.stdout[-2000:]
    dump = json.loads(dumps[0].read_text())
    assert [p["metadata"]["name"] for p in dump["pods"]] == ["stuck"]
    assert dump["pending_diagnosis"][0]["cause"] == "selector-typo"
    # The pod never ran on a node: the driver logs are those of the nodes publishing devices. Reached as an
    # existing cluster whose driver is no known DaemonSet, the dump says it cannot tell, rather than guessing.
    assert dump["driver_logs"] == dict.fromkeys(["gpu-node-0", "gpu-node-1"], failure_evidence.NO_DRIVER_LOG)
    kept = handle.kube.list(rest.NAMESPACES, label_selector=f"{KEPT_LABEL}=true")
    assert [n["metadata"]["name"] for n in kept] == [dump["namespace"]]
    assert RUN_LABEL in kept[0]["metadata"]["labels"]


TENANT_AUDIT = "suites/test_sharing.py::test_no_existing_claim_is_shared_across_tenants"


def _tenant_audit(handle, report) -> tuple[subprocess.CompletedProcess, dict]:
    out = run_suite(handle.provider.embedded, TENANT_AUDIT, f"--report-dir={report}", f"--junitxml={report}/junit.xml")
    rows = [r for r in read_results(report) if r["nodeid"] == TENANT_AUDIT]
    assert len(rows) == 1, out.stdout[-2000:]
    return out, rows[0]


def test_a_tenant_audit_over_no_claims_is_not_established_and_over_a_crossing_fails(handle, tmp_path):
    ns = "controls"  # not a harness run's namespace: its claims are the cluster's, and audited
    out, row = _tenant_audit(handle, tmp_path / "nothing")
    assert out.returncode == 0, out.stdout[-2000:]
    assert row["outcome"] == NOT_ESTABLISHED and row["message"] == f"not established: {NOTHING_AUDITED}", row
    assert row["evidence"][0]["claims_audited"] == 0

    handle.claim(ns, "shared")
    for name in ("a-1", "a-2"):
        handle.pod(ns, name, claim="shared", labels={"tenant": "team-a"})
        wait_running(handle.kube, ns, name)
    out, row = _tenant_audit(handle, tmp_path / "one-tenant")
    assert out.returncode == 0 and row["outcome"] == "passed", (row, out.stdout[-2000:])
    assert row["evidence"][0]["claims_audited"] == 1

    handle.pod(ns, "b-1", claim="shared", labels={"tenant": "team-b"})
    wait_running(handle.kube, ns, "b-1")
    out, row = _tenant_audit(handle, tmp_path / "crossing")
    assert out.returncode == 1 and row["outcome"] == "failed", (row, out.stdout[-2000:])
    assert f"claim {ns}/shared" in out.stdout and "is shared across tenants (team-a: a-1, a-2; team-b: b-1)" in out.stdout
