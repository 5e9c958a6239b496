"""The preflight names the option that would let the cluster's rules admit the run's checks, with the fact behind it."""

from __future__ import annotations

from dra_harness.checks.preflight import Facts, NodeFacts
from dra_harness.checks.preflight_hints import hints

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, taints=(), labels=None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": list(taints)}}


def facts(schedulable: bool, published=(4, 4, 0)) -> Facts:
    f = Facts("run1", "gpu.example.com")
    for i, count in enumerate(published):
        f.nodes[f"n{i}"] = NodeFacts(f"n{i}", simulated=False, schedulable=schedulable or not count, disruptable=False,
                                     published=count)
    return f


def test_a_taint_on_every_node_with_devices_names_the_toleration():
    nodes = [node("n0", [TAINT]), node("n1", [TAINT, {"key": "other", "effect": "NoExecute"}]), node("n2")]
    assert hints(facts(False), nodes) == [
        "--toleration nvidia.com/gpu:NoSchedule (every node with devices is tainted nvidia.com/gpu=present:NoSchedule)"]


def test_no_hint_where_a_node_with_devices_is_schedulable_or_the_taint_is_the_node_controllers():
    assert hints(facts(True), [node("n0", [TAINT]), node("n1"), node("n2")]) == []
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    assert hints(facts(False), [node("n0", [not_ready]), node("n1", [not_ready]), node("n2")]) == []


def test_a_refused_probe_pod_names_the_options_its_refusal_speaks_of():
    f = facts(True)
    f.admission = {"allowed": False, "evidence": "admission webhook denied: pods must set a runtimeClassName"}
    assert hints(f, [])[0].startswith("--runtime-class NAME (admission refused the probe pod: ")


def test_a_refused_namespace_names_the_namespace_options():
    f = facts(True)
    f.errors.append('probe image: 403 Forbidden: namespaces "drh-pre-1" is forbidden: label team is required')
    assert hints(f, [])[0].startswith("--namespace-label KEY=VALUE or --namespace-annotation KEY=VALUE")


def test_a_device_holder_refused_where_the_shell_image_is_admitted_names_the_pause_image_option():
    f = facts(True)
    f.admission = {"allowed": True, "pause_allowed": False,
                   "pause_evidence": "ValidatingAdmissionPolicy 'images-from-the-mirror' denied: images must come from mirror/"}
    assert hints(f, []) == ["--pause-image MIRROR (admission refused a pod that only holds devices, which most checks "
                            "make: ValidatingAdmissionPolicy 'images-from-the-mirror' denied: images must come from mirror/)"]
    f.admission = {"allowed": True, "pause_allowed": True}
    assert hints(f, []) == []
