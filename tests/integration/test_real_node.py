"""A real node (containerd 2 + CDI, runc, bridge CNI, kubelet) in the embedded cluster.

What containers see is checked against their claims, the example driver runs once
as a process and once as a DaemonSet pod from a locally built image, and after
``down`` nothing of the node is left on the host. Needs root; skipped with the reason
where real nodes cannot run.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from dra_harness.providers import driver_manifests
from dra_harness.providers.driver_manifests import (
    NAMESPACE,
    POD_SELECTOR,
    render_driver_manifests,
)
from dra_harness.checks.incontainer import (
    devices_seen,
    mismatch,
    probe_pod,
    read_env,
    settings,
)
from dra_harness.kube import builders, rest
from dra_harness.kube.pods import allocated_devices, pod_claims, wait_running
from dra_harness.kube.waits import WaitBlocked, WaitTimeout, watch_until
from dra_harness.providers.embedded import hostplumbing, realcluster
from dra_harness.providers.embedded.cluster import DRIVER_NAME
from dra_harness.components.images import DRIVER_IMAGE, WORKLOAD_IMAGE
from dra_harness.components.real_node_host import unavailable_reason
from dra_harness.providers.embedded.realnode import RealNode

from .conftest import REAL_CLUSTER_GPUS, REAL_NODE

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no real nodes here: {REASON}")
NODE = REAL_NODE
UNIFIED = Path("/sys/fs/cgroup/unified")  # where a hybrid (v1 + v2) host mounts cgroup2
GPUS = REAL_CLUSTER_GPUS


@pytest.fixture
def ns(real_cluster):
    kube = real_cluster.kube()
    name = f"it-{uuid.uuid4().hex[:8]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": name}})
    yield name
    kube.delete_collection(rest.PODS, name, grace_seconds=0)
    kube.delete(rest.NAMESPACES, name)


def _probe(kube, ns: str, name: str, claims: dict) -> tuple[set[str], set[str], float]:
    started = time.monotonic()
    kube.create(rest.PODS, probe_pod(name, "it", WORKLOAD_IMAGE, NODE, claims), ns)
    pod = wait_running(kube, ns, name, timeout=120)
    running = time.monotonic() - started
    seen = devices_seen(read_env(kube, ns, name, "ctr0"))
    allocated = {d.device for c in pod_claims(kube, pod).values() for d in allocated_devices(c)}
    return seen, allocated, running


def test_a_pod_with_a_template_claim_sees_its_allocated_devices_through_cdi(real_cluster, ns):
    kube = real_cluster.kube()
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES,
                builders.claim_template("two", "it", [builders.exactly("gpu", DRIVER_NAME, 2)]), ns)
    seen, allocated, running = _probe(kube, ns, "probe", {"gpu": {"template": "two"}})
    print(f"pod with a claim on the real node Running after {running:.2f}s")
    assert len(allocated) == 2
    assert mismatch(seen, allocated) is None, mismatch(seen, allocated)


def test_negative_control_the_in_container_check_catches_a_view_that_is_not_the_claims(real_cluster, ns):
    """Injected fault: compare each pod's view with the *other* pod's claim (what a container that was
    handed the wrong device would show); and a claim without GpuConfig against TimeSlicing/Long."""
    kube = real_cluster.kube()
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one", "it", [builders.exactly("gpu", DRIVER_NAME)]), ns)
    seen_a, alloc_a, _ = _probe(kube, ns, "a", {"gpu": {"template": "one"}})
    seen_b, alloc_b, _ = _probe(kube, ns, "b", {"gpu": {"template": "one"}})
    assert mismatch(seen_a, alloc_a) is None and mismatch(seen_b, alloc_b) is None
    assert mismatch(seen_a, alloc_b) is not None and mismatch(seen_b, alloc_a) is not None
    env = read_env(kube, ns, "a", "ctr0")
    device = next(iter(seen_a))
    assert settings(env, device).get("TIMESLICE_INTERVAL") != "Long", "default config must differ from the one checked"


def test_negative_control_a_second_container_that_lists_the_claim_sees_its_device(real_cluster, ns):
    """The multi-container isolation check (suites/test_sharing.py) asserts an empty view for the container that
    does not list the claim; here both list it, and the second container's view is not empty, so the check can fail."""
    kube = real_cluster.kube()
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one", "it", [builders.exactly("gpu", DRIVER_NAME)]), ns)
    kube.create(rest.PODS, probe_pod("both-list", "it", WORKLOAD_IMAGE, NODE, {"gpu": {"template": "one"}}, 2), ns)
    wait_running(kube, ns, "both-list", timeout=120)
    assert devices_seen(read_env(kube, ns, "both-list", "ctr1")) == devices_seen(read_env(kube, ns, "both-list", "ctr0")) != set()

def test_a_wait_for_a_pod_whose_image_cannot_be_pulled_stops_at_once_as_not_established(real_cluster, ns):
    """No registry is reachable here: the kubelet reports ErrImagePull within seconds, and the wait says so."""
    kube = real_cluster.kube()
    body = probe_pod("unpullable", "it", "dra-harness.invalid/nothing:1", NODE, {})
    kube.create(rest.PODS, body, ns)
    started = time.monotonic()
    with pytest.raises(WaitBlocked) as blocked:
        wait_running(kube, ns, "unpullable", timeout=90)
    took = time.monotonic() - started
    print(f"unpullable image: not established after {took:.1f}s: {blocked.value}")
    assert took < 45, f"the wait took {took:.0f}s to give up on an image it cannot pull"
    assert any(r in str(blocked.value) for r in ("ErrImagePull", "ImagePullBackOff")), blocked.value
    # Negative control: a wait told that such a state is no blocker waits out its deadline instead.
    with pytest.raises(WaitTimeout):
        watch_until(kube, rest.PODS, lambda pods: pods[0]["status"].get("phase") == "Running", 3, "the same pod",
                    namespace=ns, environment=False)


def test_the_driver_runs_as_a_daemonset_pod_from_a_locally_built_image(real_cluster, ns):
    kube = real_cluster.kube()
    rn = realcluster.node(real_cluster, NODE)

    def node_devices(slices: list[dict]) -> int:
        return sum(len(s["spec"].get("devices") or []) for s in slices if s["spec"].get("nodeName") == NODE)

    real_cluster.stop_driver(NODE)
    started = time.monotonic()
    watch_until(kube, rest.RESOURCE_SLICES, lambda items: node_devices(items) == 0, 90,
                f"{NODE}'s slices to be removed after its driver stopped", field_selector=f"spec.driver={DRIVER_NAME}")
    print(f"slices of a stopped driver gone after {time.monotonic() - started:.1f}s")
    docs = render_driver_manifests(DRIVER_IMAGE, str(rn.kubelet_root), cdi_root=str(rn.cdi_dir))
    driver_manifests.for_embedded(docs, real_cluster.state().ports["apiserver"], GPUS)
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            doc["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    try:
        driver_manifests.apply(kube, docs)
        started = time.monotonic()
        pods = watch_until(kube, rest.PODS, lambda items: any(p["status"].get("phase") == "Running" for p in items), 120,
                           "the driver's DaemonSet pod to run", namespace=NAMESPACE, label_selector=POD_SELECTOR)
        assert pods[0]["spec"]["nodeName"] == NODE
        watch_until(kube, rest.RESOURCE_SLICES, lambda items: node_devices(items) == GPUS, 90,
                    f"the DaemonSet driver to publish {GPUS} devices for {NODE}", field_selector=f"spec.driver={DRIVER_NAME}")
        print(f"DaemonSet driver: slices published {time.monotonic() - started:.1f}s after creation")
        kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one", "it", [builders.exactly("gpu", DRIVER_NAME)]), ns)
        seen, allocated, _ = _probe(kube, ns, "via-daemonset", {"gpu": {"template": "one"}})
        assert mismatch(seen, allocated) is None, mismatch(seen, allocated)
    finally:
        kube.delete_collection(rest.PODS, ns, grace_seconds=0)
        driver_manifests.delete(kube, docs)
        real_cluster.start_driver(NODE)
    watch_until(kube, rest.RESOURCE_SLICES, lambda items: node_devices(items) == GPUS, 90,
                f"the process driver to publish {NODE}'s devices again", field_selector=f"spec.driver={DRIVER_NAME}")


def _cgroups_of(rn) -> list[Path]:
    """This cluster's cgroup roots in every hierarchy the host mounts (a hybrid host's unified one too)."""
    return [d for h in hostplumbing.hierarchies() for d in h.glob(f"dra-harness-{rn.cluster_key}-*")]


def test_down_leaves_no_container_mount_netns_link_or_cgroup(real_cluster):
    kube = real_cluster.kube()
    name = f"it-{uuid.uuid4().hex[:8]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": name}})
    kube.create(rest.RESOURCE_CLAIM_TEMPLATES, builders.claim_template("one", "it", [builders.exactly("gpu", DRIVER_NAME)]), name)
    for i in range(2):  # running containers with network namespaces and veths at the time of down
        kube.create(rest.PODS, probe_pod(f"busy-{i}", "it", WORKLOAD_IMAGE, NODE, {"gpu": {"template": "one"}}), name)
    for i in range(2):
        wait_running(kube, name, f"busy-{i}", timeout=120)
    rn = realcluster.node(real_cluster, NODE)
    runtime_dir = real_cluster.runtime_dir
    assert realcluster.leftovers(runtime_dir, [rn]), "nothing running before down?"
    before = _cgroups_of(rn)
    assert {d.parent for d in before} == set(hostplumbing.hierarchies()), before
    with_pods = [d for d in before if list(d.rglob("kubepods*"))]
    print(f"pod cgroups before down in {len(with_pods)} of {len(before)} hierarchies")
    # What teardown used to miss: a hybrid host's cgroup2 hierarchy holds the pods' cgroups too.
    unified = UNIFIED / rn.cgroup_root.lstrip("/")
    assert unified not in before or unified in with_pods, "no pod cgroups in the unified hierarchy before down?"
    netns_before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    started = time.monotonic()
    real_cluster.down()
    print(f"down with a real node and 2 running pods: {time.monotonic() - started:.1f}s")
    assert realcluster.leftovers(runtime_dir, [rn]) == []
    assert _cgroups_of(rn) == []
    mounts = subprocess.run(["mount"], capture_output=True, text=True).stdout
    assert str(runtime_dir) not in mounts
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert rn.bridge not in links and "veth" not in links.split(rn.bridge)[0] if rn.bridge in links else True
    assert set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()) <= netns_before
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(rn.socket) not in ps and str(rn.etc) not in ps


def test_negative_control_the_leftover_check_finds_a_cgroup_left_in_any_hierarchy_and_teardown_removes_it():
    """A node's cgroup planted (with a pod cgroup below it) in every hierarchy, cgroup2's
    included: the leftover check names each one, and the teardown's removal leaves none."""
    rn = RealNode("real-node-0", Path("/tmp/drh-none"), f"ctl{uuid.uuid4().hex[:7]}", 0)
    planted = [h / rn.cgroup_root.lstrip("/") / "kubepods" for h in hostplumbing.hierarchies()]
    try:
        for d in planted:
            d.mkdir(parents=True)
        left = realcluster.leftovers(rn.runtime_dir, [rn])
        assert sorted(left) == sorted(f"cgroup {d.parent}" for d in planted)
        if UNIFIED in hostplumbing.hierarchies():
            assert f"cgroup {UNIFIED}{rn.cgroup_root}" in left
        hostplumbing.remove_cgroup_root(rn.cgroup_root)
        assert realcluster.leftovers(rn.runtime_dir, [rn]) == [] and _cgroups_of(rn) == []
    finally:
        for d in planted:
            for gone in (d, d.parent):
                if gone.exists():
                    gone.rmdir()
