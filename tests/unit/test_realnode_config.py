"""Real-node configuration, OCI layouts, driver manifests and the in-container comparison (pure)."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from dra_harness.providers.driver_manifests import ManifestError, render_driver_manifests
from dra_harness.checks.incontainer import (
    claim_uids,
    devices_seen,
    gpu_env,
    mismatch,
    settings,
)
from dra_harness.components.oci import File, Image, write_layout
from dra_harness.providers.embedded.pki import Identity
from dra_harness.providers.embedded.realnode import RealNode


SERVING = Identity(Path("/pki/kubelet-serving.crt"), Path("/pki/kubelet-serving.key"))


def _node(index: int = 0) -> RealNode:
    return RealNode(f"real-node-{index}", Path("/tmp/drh-abcdefgh"), "0123456789", index)


def test_containerd_config_turns_on_cdi_in_the_nodes_own_dirs():
    rn = _node()
    cfg = tomllib.loads(rn.containerd_config("registry.k8s.io/pause:3.10"))
    assert cfg["version"] == 3
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == [str(rn.cdi_dir)]
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False and runc["Root"].startswith(str(rn.base))
    assert cfg["grpc"]["address"] == str(rn.socket) and len(str(rn.socket)) < 100
    assert cfg["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"
    for key in ("root", "state"):
        assert cfg[key].startswith(str(rn.base))


def test_kubelet_config_runs_on_cgroup_v1_with_cgroupfs():
    rn = _node()
    cfg = rn.kubelet_config(Path("/ca.crt"), SERVING, 10250, 10248, {"DynamicResourceAllocation": True})
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["cgroupRoot"] == rn.cgroup_root and cfg["address"] == rn.node_ip
    assert ipaddress.ip_address(rn.node_ip) in ipaddress.ip_network("198.18.0.0/15") and len(rn.host_link) <= 15
    assert cfg["containerRuntimeEndpoint"] == f"unix://{rn.socket}"
    argv = rn.kubelet_argv("/bin/kubelet", Path("/k"), {"type": "real"})
    assert f"--root-dir={rn.kubelet_root}" in argv and "--hostname-override=real-node-0" in argv


def test_the_kubelet_refuses_anonymous_requests_and_asks_the_api_server_about_every_other():
    cfg = _node().kubelet_config(Path("/ca.crt"), SERVING, 10250, 10248, {})
    assert cfg["authentication"] == {
        "anonymous": {"enabled": False}, "webhook": {"enabled": True}, "x509": {"clientCAFile": "/ca.crt"},
    }
    assert cfg["authorization"] == {"mode": "Webhook"}
    assert (cfg["tlsCertFile"], cfg["tlsPrivateKeyFile"]) == (str(SERVING.cert), str(SERVING.key))
    assert cfg["readOnlyPort"] == 0 and cfg["healthzBindAddress"] == "127.0.0.1"


def test_every_directory_of_a_node_is_in_the_clusters_runtime_dir_and_sockets_stay_short():
    a, b = _node(0), _node(1)
    for d in a.host_dirs + b.host_dirs:
        assert d.parent == a.runtime_dir
    assert len({*a.host_dirs, *b.host_dirs}) == 4
    # The longest socket a DaemonSet plugin gets: <root>/plugins_registry/<driver>-<pod uid>-reg.sock.
    longest = a.kubelet_root / "plugins_registry" / f"gpu.example.com-{'0' * 8}-{'0' * 4}-{'0' * 4}-{'0' * 4}-{'0' * 12}-reg.sock"
    assert len(str(longest)) < 108


def test_each_node_gets_its_own_bridge_and_pod_cidr():
    a, b = _node(0), _node(1)
    assert a.bridge != b.bridge and len(a.bridge) <= 15
    assert a.pod_cidr != b.pod_cidr
    assert ipaddress.ip_network(a.pod_cidr).subnet_of(ipaddress.ip_network("10.88.0.0/13"))
    ipam = a.cni_config()["plugins"][0]["ipam"]
    assert ipam["dataDir"].startswith(str(a.base)) and a.cni_config()["plugins"][0]["ipMasq"] is False
    assert a.driver_dirs["registrar"] == a.kubelet_root / "plugins_registry"


def test_oci_layout_has_consistent_digests_and_the_reference_name(tmp_path):
    image = Image("dra-harness.local/x:1", [File("bin/a", b"hello"), File("bin/b", link="a")], entrypoint=["/bin/a"])
    out = write_layout(image, tmp_path / "x.tar")
    with tarfile.open(out) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    entry = index["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "dra-harness.local/x:1"
    manifest = json.loads(blobs[f"blobs/sha256/{entry['digest'][7:]}"])
    layer = blobs[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert names["bin/b"].issym() and names["bin/a"].size == 5 and names["bin"].isdir()
    assert write_layout(image, tmp_path / "y.tar").read_bytes() == out.read_bytes()  # reproducible


def test_driver_manifests_fill_every_placeholder():
    docs = render_driver_manifests("img:1", "/var/lib/kubelet")
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    assert "${" not in json.dumps(docs)
    ds = docs[-1]["spec"]["template"]["spec"]
    assert ds["containers"][0]["image"] == "img:1" and ds["hostNetwork"] is True
    # The embedded API server admits no privileged pod; the plugin needs no privilege.
    assert ds["containers"][0]["securityContext"] == {"privileged": False}
    paths = {v["name"]: v["hostPath"]["path"] for v in ds["volumes"]}
    assert paths == {"plugins-registry": "/var/lib/kubelet/plugins_registry", "plugins": "/var/lib/kubelet/plugins",
                     "cdi": "/var/run/cdi"}
    rules = {r for rule in docs[2]["rules"] for r in rule["resources"]}
    assert {"resourceslices", "resourceclaims", "nodes", "pods"} <= rules
    custom = render_driver_manifests("img:1", "/k", cdi_root="/tmp/cdi")[-1]["spec"]["template"]["spec"]
    assert {v["name"]: v["hostPath"]["path"] for v in custom["volumes"]}["cdi"] == "/tmp/cdi"


def test_driver_manifests_reject_relative_paths():
    with pytest.raises(ManifestError):
        render_driver_manifests("img:1", "var/lib/kubelet")


LOG = """GPU_DEVICE_3=gpu-3
GPU_DEVICE_3_SHARING_STRATEGY=TimeSlicing
GPU_DEVICE_3_TIMESLICE_INTERVAL=Long
GPU_DEVICE_5=gpu-5
GPU_DEVICE_GPU_3_RESOURCE_CLAIM=8d1b271e
probe-done
"""


def test_the_container_view_is_read_from_the_probe_log():
    env = gpu_env(LOG)
    assert devices_seen(env) == {"gpu-3", "gpu-5"}
    assert settings(env, "gpu-3") == {"SHARING_STRATEGY": "TimeSlicing", "TIMESLICE_INTERVAL": "Long"}
    assert mismatch({"gpu-3", "gpu-5"}, {"gpu-3", "gpu-5"}) is None
    assert claim_uids(env) == {"8d1b271e"}


def test_a_container_seeing_another_device_is_caught():
    why = mismatch(devices_seen(gpu_env(LOG)), {"gpu-3"})
    assert why is not None and "extra ['gpu-5']" in why
