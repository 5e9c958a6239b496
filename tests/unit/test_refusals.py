"""Scheduling refusals judged on plain data: the cluster's rules are named (not established), DRA's stay the check's.

Each case pairs a scheduler message, as kube-scheduler writes it, with the nodes and slices it was about; the
negative controls are the same shapes with a refusal of DRA on a node that could take the pod.
"""

from __future__ import annotations

from dra_harness.checks.diagnose import ClusterView, diagnose_pod
from dra_harness.kube import refusals

DRIVER = "gpu.example.com"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(name: str, taints=(), labels=None, cordoned=False) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": list(taints), **({"unschedulable": True} if cordoned else {})}}


def slice_on(name: str, driver: str = DRIVER) -> dict:
    return {"metadata": {"name": f"{name}-{driver}"},
            "spec": {"driver": driver, "nodeName": name, "pool": {"name": name}, "devices": [{"name": "gpu-0"}]}}


def pod(message: str, tolerations=(), node_selector=None) -> dict:
    spec: dict = {"tolerations": list(tolerations)}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"namespace": "ns", "name": "p", "uid": "u1"}, "spec": spec,
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}


PREEMPTION = " preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
GKE_NODES = [node("sys-0"), node("sys-1"), *[node(f"gpu-{i}", [GPU_TAINT], {"pool": "gpu"}) for i in range(3)]]
GKE_SLICES = [slice_on(f"gpu-{i}") for i in range(3)]


def test_the_scheduler_message_is_read_as_counted_reasons_with_braces_kept_whole():
    message = ("0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
               "4 node(s) had untolerated taint {nvidia.com/gpu: present}." + PREEMPTION)
    assert refusals.counted(message) == [(1, "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"),
                                         (4, "node(s) had untolerated taint {nvidia.com/gpu: present}")]
    assert refusals.counted("0/8 nodes are available: 8 cannot allocate all claims. still not schedulable, "
                            "preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.") == [
        (8, "cannot allocate all claims")]
    assert refusals.counted("resourceclaim not found") == []


def test_a_managed_pools_taint_on_every_gpu_node_is_the_environment_and_names_the_toleration():
    said = pod("0/5 nodes are available: 2 cannot allocate all claims, 3 node(s) had untolerated taint "
               "{nvidia.com/gpu: present}." + PREEMPTION)
    refused = refusals.environment_refusal(said, GKE_NODES, GKE_SLICES, frozenset({DRIVER}))
    assert refused is not None and refused.cause == "untolerated-taint" and not refused.passing
    assert refused.option == "--toleration nvidia.com/gpu:NoSchedule"
    assert "untolerated taint nvidia.com/gpu=present:NoSchedule on all 3 of the 3 nodes with devices" in refused.reason


def test_a_dra_refusal_on_tolerated_gpu_nodes_stays_the_checks_to_judge():
    """Negative control: the same pool, the pod tolerates the taint, and DRA refuses on the GPU nodes."""
    said = pod("0/5 nodes are available: 5 cannot allocate all claims." + PREEMPTION, tolerations=[TOLERATE_GPU])
    assert refusals.environment_refusal(said, GKE_NODES, GKE_SLICES, frozenset({DRIVER})) is None


def test_a_control_plane_taint_beside_a_dra_refusal_is_no_environment_refusal():
    nodes = [node("cp", [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             *[node(f"gpu-{i}") for i in range(4)]]
    said = pod("0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
               "4 cannot allocate all claims." + PREEMPTION)
    assert refusals.environment_refusal(said, nodes, [slice_on(f"gpu-{i}") for i in range(4)]) is None


def test_a_pod_pinned_to_a_gpu_node_that_dra_refuses_is_not_blamed_on_the_other_nodes():
    """A system node without devices must not absorb the DRA refusal of the one node the pod may use."""
    nodes = [node("sys-0"), node("gpu-0"), node("gpu-1")]
    said = pod("0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 cannot allocate all "
               "claims." + PREEMPTION, node_selector={"kubernetes.io/hostname": "gpu-0"})
    assert refusals.environment_refusal(said, nodes, [slice_on("gpu-0"), slice_on("gpu-1")]) is None


def test_a_node_selector_that_admits_no_device_node_is_named():
    said = pod("0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector." + PREEMPTION,
               tolerations=[TOLERATE_GPU], node_selector={"pool": "gpus"})
    refused = refusals.environment_refusal(said, GKE_NODES, GKE_SLICES)
    assert refused is not None and refused.cause == "node-selector-mismatch" and refused.option is None


def test_too_little_cpu_on_every_node_that_could_take_the_pod_is_the_environment():
    said = pod("0/5 nodes are available: 2 cannot allocate all claims, 3 Insufficient cpu." + PREEMPTION,
               tolerations=[TOLERATE_GPU])
    refused = refusals.environment_refusal(said, GKE_NODES, GKE_SLICES, frozenset({DRIVER}))
    assert refused is not None and refused.cause == "environment" and "3 Insufficient cpu" in refused.reason
    assert not refused.passing


def test_the_node_controllers_not_ready_taint_passes_by_itself_and_ends_no_wait_at_once():
    nodes = [node(f"gpu-{i}", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]) for i in range(2)]
    said = pod("0/2 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }." + PREEMPTION)
    refused = refusals.environment_refusal(said, nodes, [slice_on("gpu-0"), slice_on("gpu-1")])
    assert refused is not None and refused.passing


def test_another_vendors_untainted_node_does_not_hide_the_taint_on_every_node_of_the_driver():
    nodes = [*GKE_NODES, node("nic-0")]
    slices = [*GKE_SLICES, slice_on("nic-0", "nic.vendor.example")]
    said = pod("0/6 nodes are available: 3 cannot allocate all claims, 3 node(s) had untolerated taint "
               "{nvidia.com/gpu: present}." + PREEMPTION)
    assert refusals.environment_refusal(said, nodes, slices, frozenset({DRIVER})) is not None
    # Without knowing the driver, the other vendor's node could take the pod: no verdict for the environment.
    assert refusals.environment_refusal(said, nodes, slices) is None


def test_a_taint_lifted_since_the_schedulers_try_is_not_judged_now():
    said = pod("0/5 nodes are available: 2 cannot allocate all claims, 3 node(s) had untolerated taint "
               "{nvidia.com/gpu: present}." + PREEMPTION)
    lifted = [node("sys-0"), node("sys-1"), *[node(f"gpu-{i}") for i in range(3)]]
    assert refusals.environment_refusal(said, lifted, GKE_SLICES, frozenset({DRIVER})) is None


def test_a_pod_the_scheduler_has_not_refused_is_not_judged():
    scheduled = pod("")
    scheduled["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert refusals.environment_refusal(scheduled, GKE_NODES, GKE_SLICES) is None


def test_diagnose_names_an_untolerated_taint_and_the_option_instead_of_unknown():
    said = pod("0/5 nodes are available: 2 cannot allocate all claims, 3 node(s) had untolerated taint "
               "{nvidia.com/gpu: present}." + PREEMPTION)
    view = ClusterView(slices=GKE_SLICES, classes={}, claims=[], nodes={n["metadata"]["name"]: n for n in GKE_NODES})
    found = diagnose_pod(None, said, view, {})  # type: ignore[arg-type]  # no read of the cluster is needed
    assert found.cause == "untolerated-taint" and found.details == {"option": "--toleration nvidia.com/gpu:NoSchedule"}


def test_diagnose_names_a_node_selector_mismatch():
    said = pod("0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector." + PREEMPTION,
               tolerations=[TOLERATE_GPU], node_selector={"pool": "gpus"})
    view = ClusterView(slices=GKE_SLICES, classes={}, claims=[], nodes={n["metadata"]["name"]: n for n in GKE_NODES})
    assert diagnose_pod(None, said, view, {}).cause == "node-selector-mismatch"  # type: ignore[arg-type]


def test_a_pod_pinned_to_a_node_that_is_not_ready_for_a_moment_waits_for_it():
    """The other nodes' labels do not make the pinned node's passing taint final: the wait goes on."""
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
    nodes = [node("real-0", [not_ready]), *[node(f"gpu-{i}") for i in range(3)]]
    said = pod("0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 3 node(s) "
               "didn't match Pod's node affinity/selector." + PREEMPTION, node_selector={"kubernetes.io/hostname": "real-0"})
    refused = refusals.environment_refusal(said, nodes, [slice_on(n["metadata"]["name"]) for n in nodes])
    assert refused is not None and refused.passing and refused.cause == "untolerated-taint"
    assert "on all 1 of the 1 nodes with devices the pod selects" in refused.reason


def test_a_pod_pinned_to_a_node_with_a_providers_taint_is_kept_off_for_good():
    nodes = [node("gpu-0", [GPU_TAINT]), node("gpu-1")]
    said = pod("0/2 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) didn't "
               "match Pod's node affinity/selector." + PREEMPTION, node_selector={"kubernetes.io/hostname": "gpu-0"})
    refused = refusals.environment_refusal(said, nodes, [slice_on("gpu-0"), slice_on("gpu-1")])
    assert refused is not None and not refused.passing and refused.option == "--toleration nvidia.com/gpu:NoSchedule"


def test_a_pod_for_another_drivers_nodes_is_judged_on_those_nodes_not_called_a_selector_mismatch():
    """The run's own simulated drivers (partitions, contention) have nodes of their own: a pod selecting them and
    refused there by DRA is DRA's to judge, not a node selector that admits none of the profile driver's nodes."""
    nodes = [node("gpu-0"), node("part-0", labels={"part": "a"})]
    slices = [slice_on("gpu-0"), slice_on("part-0", "partition.dra-harness.io")]
    said = pod("0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't match Pod's node "
               "affinity/selector." + PREEMPTION, node_selector={"part": "a"})
    assert refusals.environment_refusal(said, nodes, slices, frozenset({DRIVER})) is None


def test_a_pod_pinned_to_a_node_whose_slices_are_gone_for_a_moment_waits_for_them():
    """A kubelet restarted during an upgrade wipes its node's slices: the pinned pod's node is no device node for a
    moment, which is DRA's to judge (the upgrade's pod ran 2.4 s later; a driver that never republishes is a FAIL),
    and a not-ready taint there passes; a selector that admits no node at all is the cluster's for good."""
    nodes = [node("real-0"), *[node(f"gpu-{i}") for i in range(3)]]
    said = pod("0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 1 cannot allocate all "
               "claims." + PREEMPTION, node_selector={"kubernetes.io/hostname": "real-0"})
    assert refusals.environment_refusal(said, nodes, [slice_on(f"gpu-{i}") for i in range(3)]) is None
    not_ready = [node("real-0", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]), *nodes[1:]]
    tainted = pod("0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 3 node(s) "
                  "didn't match Pod's node affinity/selector." + PREEMPTION, node_selector={"kubernetes.io/hostname": "real-0"})
    refused = refusals.environment_refusal(tainted, not_ready, [slice_on(f"gpu-{i}") for i in range(3)])
    assert refused is not None and refused.passing and "node.kubernetes.io/not-ready" in refused.reason
    typo = pod("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector." + PREEMPTION,
               node_selector={"pool": "gpus"})
    refused = refusals.environment_refusal(typo, nodes, [slice_on(f"gpu-{i}") for i in range(3)])
    assert refused is not None and not refused.passing and refused.cause == "node-selector-mismatch"


def test_a_cordon_from_before_the_run_beside_a_taint_is_maintenance_and_ends_the_wait_at_once():
    """The twin's shape: the pool's taint on three device nodes, the fourth cordoned for maintenance before the run.
    Its negative controls: the same cordon made during the run, or recorded by a run's drain, may lift: it passes."""
    nodes = [node(f"gpu-{i}", [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]) for i in range(3)]
    nodes.append(node("gpu-3", cordoned=True))
    slices = [slice_on(f"gpu-{i}") for i in range(4)]
    said = pod("0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) had untolerated taint(s).")
    before = refusals.environment_refusal(said, nodes, slices, frozenset({DRIVER}), frozenset({"gpu-3"}))
    assert before is not None and not before.passing and "cordoned for maintenance" in before.reason
    during = refusals.environment_refusal(said, nodes, slices, frozenset({DRIVER}))
    assert during is not None and during.passing
    nodes[3]["metadata"]["annotations"] = {"dra-harness.io/cordoned-by": "run-x"}
    drained = refusals.environment_refusal(said, nodes, slices, frozenset({DRIVER}), frozenset({"gpu-3"}))
    assert drained is not None and drained.passing
