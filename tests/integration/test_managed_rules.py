"""A managed GPU pool's rules on a real API server and kube-scheduler: a refusal of the cluster's is not established
at once, named with the option that lets the run through; with that option the run's pods run; DRA's own refusals
on the same tainted cluster stay failures (the negative control)."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest

from dra_harness.checks.diagnose import diagnose
from dra_harness.kube import rest
from dra_harness.kube.pods import wait_running
from dra_harness.kube.rules import build
from dra_harness.kube.waits import WaitBlocked, WaitTimeout, watch_until
from dra_harness.labels import RUN_LABEL, run_selector

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _taint_every_device_node(handle) -> list[str]:
    nodes = sorted({where["node"] for where in handle.published().values()})
    for name in nodes:
        node = handle.kube.get(rest.NODES, name)
        handle.kube.patch(rest.NODES, name, {"spec": {"taints": [*(node["spec"].get("taints") or []), GPU_TAINT]}})
    return nodes


def test_a_managed_pools_taint_is_not_established_at_once_and_its_toleration_lets_the_pods_run(handle):
    kube = handle.kube
    kube.device_drivers = frozenset({handle.driver})
    nodes = _taint_every_device_node(handle)
    handle.template("controls", "one", handle.request())
    handle.pod("controls", "untolerated", template="one")
    started = time.monotonic()
    with pytest.raises(WaitBlocked) as blocked:
        wait_running(kube, "controls", "untolerated", timeout=60)
    assert time.monotonic() - started < 30, "judged at once, not at the deadline"
    said = str(blocked.value)
    assert f"on all {len(nodes)} of the {len(nodes)} nodes with devices" in said
    assert "pass --toleration nvidia.com/gpu:NoSchedule" in said
    (found,) = diagnose(kube, "controls")
    assert found.cause == "untolerated-taint" and found.details["option"] == "--toleration nvidia.com/gpu:NoSchedule"

    kube.rules = build({"toleration": ["nvidia.com/gpu:NoSchedule"]})  # what the preflight and the line above named
    handle.pod("controls", "tolerated", template="one")
    pod = wait_running(kube, "controls", "tolerated", timeout=60)
    assert pod["spec"]["nodeName"] in nodes and GPU_TAINT["key"] in {t.get("key") for t in pod["spec"]["tolerations"]}

    # The pool's label the user named, which no node carries: the cluster's rules again, named as such.
    kube.rules = build({"toleration": ["nvidia.com/gpu:NoSchedule"], "node_selector": ["pool=gpus"]})
    handle.pod("controls", "elsewhere", template="one")
    with pytest.raises(WaitBlocked, match="node selector/affinity not matched on all"):
        wait_running(kube, "controls", "elsewhere", timeout=60)
    causes = {found.pod: found.cause for found in diagnose(kube, "controls")}
    assert causes.get("elsewhere") == "node-selector-mismatch", causes  # Diagnosis.pod is the pod's name
    assert "tolerated" not in causes, causes  # control: the pod that runs


def test_a_dra_refusal_on_the_tainted_pool_stays_a_failure_with_the_toleration_given(handle):
    """Negative control: more devices than any node has, asked by a pod that tolerates the pool's taint."""
    kube = handle.kube
    kube.device_drivers = frozenset({handle.driver})
    _taint_every_device_node(handle)
    kube.rules = build({"toleration": ["nvidia.com/gpu:NoSchedule"]})
    per_node = max(sum(1 for w in handle.published().values() if w["node"] == n)
                   for n in {w["node"] for w in handle.published().values()})
    handle.template("controls", "too-many", handle.request(count=per_node + 1))
    handle.pod("controls", "greedy", template="too-many")
    with pytest.raises(WaitTimeout, match="cannot allocate all claims"):
        wait_running(kube, "controls", "greedy", timeout=15)


def test_an_image_pull_secret_is_copied_into_a_run_namespace_named_by_its_pods_and_gone_with_the_namespace(handle):
    """``--image-pull-secret NAMESPACE/NAME`` on a real API server: the copy in the run's namespace carries the
    original's type and data and the run's label (so a sweep finds one left behind); the run's pods name it; the
    report's record of the rules names it, never its data; deleting the namespace takes the copy with it."""
    kube = handle.kube
    marker = "pull" + os.urandom(6).hex()
    data = {".dockerconfigjson": base64.b64encode(json.dumps({"auths": {"mirror.example": {"auth": marker}}}).encode()).decode()}
    kube.create(rest.SECRETS, {"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson", "data": data},
                "default")
    try:
        kube.rules = build({"image_pull_secret": ["default/regcred"]})
        handle.create_namespace("pulls", {RUN_LABEL: handle.run_id})
        copy = kube.get(rest.SECRETS, "regcred", "pulls")
        assert copy["data"] == data and copy["type"] == "kubernetes.io/dockerconfigjson"
        assert copy["metadata"]["labels"][RUN_LABEL] == handle.run_id
        pod = handle.pod("pulls", "pulls")
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        described = json.dumps(kube.rules.describe())
        assert "default/regcred" in described and marker not in described and data[".dockerconfigjson"] not in described
        handle.delete_namespace("pulls")
        watch_until(kube, rest.NAMESPACES, lambda found: not found, 60, "the run namespace to be gone",
                    field_selector="metadata.name=pulls")
        assert not kube.list(rest.SECRETS, label_selector=run_selector(handle.run_id)), "a copy outlived its namespace"
    finally:
        kube.delete(rest.SECRETS, "regcred", "default")
