"""kind configs: each committed file is the gate table's row for its release, and the release knows every entry."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from dra_harness.components import catalog
from dra_harness.providers.kind import config as kind_config
from dra_harness.providers.kind import driver, nodeimage
from dra_harness.labels import DISRUPTABLE_LABEL
from dra_harness.components import gates

VERSIONS = kind_config.kind_versions()


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_has_a_committed_config_rendered_from_the_table(version):
    path = kind_config.path_for(version)
    assert path.exists(), f"{path} missing: run `dra-harness components gates`"
    assert path.read_text() == kind_config.dump(kind_config.render(version), version), (
        f"{path.name} drifted from gates.json: run `dra-harness components gates`"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_gates_and_runtime_config_match_the_version_table(version):
    cfg = kind_config.load(version)
    row = gates.for_version(version)
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert cfg["featureGates"] == row["feature_gates"]
    assert all(v is True for v in cfg["featureGates"].values())
    # A locked gate set explicitly is a start-up failure on some releases: never set one.
    assert set(cfg["featureGates"]).isdisjoint(row["dra_gates_locked_on"])
    assert "DynamicResourceAllocation" not in cfg["featureGates"]
    assert cfg["runtimeConfig"] == {gv: "true" for gv in row["runtime_config"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_run_the_release_with_cdi_and_workers_are_disruptable(version):
    cfg = kind_config.load(version)
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles[0] == "control-plane" and roles.count("worker") == kind_config.DEFAULT_WORKERS
    assert {n["image"] for n in cfg["nodes"]} == {f"kindest/node:v{version}"}
    assert all(n["labels"] == {DISRUPTABLE_LABEL: "true"} for n in cfg["nodes"] if n["role"] == "worker")
    patch = tomllib.loads(cfg["containerdConfigPatches"][0])
    assert patch["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"] is True


def test_the_worker_count_and_node_image_can_be_chosen():
    cfg = kind_config.for_cluster("1.36.3", workers=4, image="example.com/node:dev")
    assert [n["role"] for n in cfg["nodes"]] == ["control-plane"] + ["worker"] * 4
    assert {n["image"] for n in cfg["nodes"]} == {"example.com/node:dev"}
    # No YAML anchors: kind's decoder is strict and people read these files.
    assert "&id" not in yaml.safe_dump(cfg)


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed (the release source comes from the module cache)")
@pytest.mark.parametrize("version", VERSIONS)
def test_every_gate_and_group_version_is_known_to_the_release(version):
    """Read from the release's own source, independently of the committed table."""
    from dra_harness.components.gomod import go

    source = Path(json.loads(go("mod", "download", "-json", f"k8s.io/kubernetes@v{version}"))["Dir"])
    minor = int(version.split(".")[1])
    known = gates.parse_gates((source / "pkg/features/kube_features.go").read_text(), minor)
    cfg = kind_config.load(version)
    for gate in cfg["featureGates"]:
        assert gate in known, f"{gate} is not a gate of Kubernetes {version}"
        assert not known[gate].locked, f"{gate} is locked in {version}"
        assert known[gate].prerelease != "Deprecated", f"{gate} is deprecated in {version}"
    served = {
        "resource.k8s.io": gates.served_versions((source / "pkg/registry/resource/rest/storage_resource.go").read_text()),
        "scheduling.k8s.io": gates.served_versions((source / "pkg/registry/scheduling/rest/storage_scheduling.go").read_text()),
    }
    for gv in cfg["runtimeConfig"]:
        group, version_name = gv.split("/")
        assert version_name in served[group], f"{gv} is not served by Kubernetes {version}"


# -- driver install inputs (pure) --------------------------------------------------------
def test_manifests_get_the_image_and_kubelet_root(tmp_path):
    template = tmp_path / "driver.yaml"
    template.write_text(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: n}\n"
        "spec:\n  template:\n    spec:\n      containers: [{name: p, image: '${DRIVER_IMAGE}'}]\n"
        "      volumes: [{name: r, hostPath: {path: '${KUBELET_ROOT}/plugins'}}]\n"
        "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n"
    )
    docs = driver.render_manifests("img:v1", "/var/lib/kubelet", template)
    assert [d["kind"] for d in docs] == ["DaemonSet", "Namespace"]
    pod = docs[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "img:v1"
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/plugins"


def test_an_unknown_placeholder_is_one_line(tmp_path):
    template = tmp_path / "driver.yaml"
    template.write_text("image: ${DRIVER_IMAGE}\ncdi: ${CDI_ROOT}\nx: ${NODE_COUNT}\n")
    with pytest.raises(driver.KindError, match=r"^driver.yaml: placeholders left unfilled: NODE_COUNT$"):
        driver.render_manifests("img:v1", "/var/lib/kubelet", template)


def test_the_kept_manifests_render_for_kind():
    # Committed since the real-kubelet work (issue #7): a missing file is a failure, never a skip.
    assert driver.MANIFESTS.is_file(), f"{driver.MANIFESTS} is missing: the kind provider falls back to it without helm"
    docs = driver.with_device_count(driver.render_manifests(driver.DRIVER_IMAGE), 3)
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    assert daemonsets
    text = yaml.safe_dump_all(docs)
    assert driver.DRIVER_IMAGE in text and "/var/lib/kubelet/plugins" in text and "${" not in text
    for container in daemonsets[0]["spec"]["template"]["spec"]["containers"]:
        assert {"name": "NUM_DEVICES", "value": "3"} in container["env"]


def test_the_device_count_replaces_or_adds_the_env_entry():
    ds = {"kind": "DaemonSet", "spec": {"template": {"spec": {"containers": [
        {"name": "a", "env": [{"name": "NUM_DEVICES", "value": "8"}]}, {"name": "b"}]}}}}
    driver.with_device_count([ds, {"kind": "Namespace"}], 2)
    envs = [c["env"] for c in ds["spec"]["template"]["spec"]["containers"]]
    assert envs == [[{"name": "NUM_DEVICES", "value": "2"}], [{"name": "NUM_DEVICES", "value": "2"}]]


def test_the_helm_install_sets_image_and_device_count(tmp_path):
    argv = driver.helm_command("helm", tmp_path / "kc", tmp_path / "chart", "registry.local:5000/driver:v9", 4)
    assert argv[:5] == ["helm", "upgrade", "--install", "dra-example-driver", str(tmp_path / "chart")]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "image.repository=registry.local:5000/driver" in sets and "image.tag=v9" in sets
    assert "kubeletPlugin.numDevices=4" in sets


def test_kubelets_accept_cgroup_v1_in_every_committed_config():
    for version in VERSIONS:
        patches = [yaml.safe_load(p) for p in kind_config.load(version)["kubeadmConfigPatches"]]
        assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches


def test_a_node_image_built_here_turns_kinds_cni_off_and_names_our_etcd_and_coredns():
    cfg = kind_config.for_cluster("1.37.2", 2, "dra-harness.local/kind-node:v1.37.2", nodeimage.kubeadm_patches())
    assert cfg["networking"] == {"disableDefaultCNI": True}
    cluster = [yaml.safe_load(p) for p in cfg["kubeadmConfigPatches"] if "ClusterConfiguration" in p]
    assert cluster == [{"kind": "ClusterConfiguration", "etcd": {"local": {"imageTag": f"{catalog.ETCD_VERSION}-0"}},
                        "dns": {"imageTag": f"v{catalog.COREDNS_VERSION}"}}]
    # A node image from elsewhere keeps kind's own CNI and kubeadm's image tags.
    other = kind_config.for_cluster("1.37.2", 2, "kindest/node:v1.37.2")
    assert "networking" not in other and not any("ClusterConfiguration" in p for p in other["kubeadmConfigPatches"])


def test_a_release_without_a_kind_node_image_says_why_in_one_line_and_has_no_config():
    from dra_harness.errors import InputError

    for version in catalog.NO_KIND_NODE:
        assert version in catalog.KUBERNETES_VERSIONS and version not in VERSIONS
        with pytest.raises(InputError, match=f"no kind node image for Kubernetes {version}: .*not serve"):
            catalog.kind_node(version)
        assert not kind_config.path_for(version).exists()
