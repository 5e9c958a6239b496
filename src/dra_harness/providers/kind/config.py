"""kind cluster configs, one per supported Kubernetes version, derived from the gate table.

Why derived and committed: kind passes ``featureGates`` to every component and
``runtimeConfig`` to kube-apiserver, and an unknown or locked gate (or a group
version the release does not serve) stops the control plane from starting. The
embedded cluster already keeps the right set per release in ``data/gates.json``;
the files in ``data/kind/`` are rendered from that same table so the two providers never
disagree, and a test fails when a file drifts from it. The files are committed so a
user can also run ``kind create cluster --config kind/kind-1.37.2.yaml`` by hand.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from dra_harness import data
from dra_harness.components import catalog
from dra_harness.labels import DISRUPTABLE_LABEL
from dra_harness.components import gates

KIND_DIR = data.path("kind")
API_VERSION = "kind.x-k8s.io/v1alpha4"
#: The kind release we build and whose own config loader the tests run over these files.
KIND_VERSION = catalog.KIND_VERSION
DEFAULT_WORKERS = 2
HEADER = (
    "# Rendered from src/dra_harness/data/gates.json by `dra-harness components gates`; do not edit.\n"
    "# Use: dra-harness cluster up --provider kind --k8s-version {version}\n"
    "#  or: kind create cluster --config {name}\n"
)

# CDI lets the driver inject devices through containerd. containerd 2.x has it on by
# default; the patch (the one dra-example-driver's own kind config uses) turns it on
# for containerd 1.7 node images and is harmless on 2.x.
CDI_PATCH = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true'
# Kubernetes 1.35+ kubelets refuse to start on cgroup v1 unless told otherwise, and
# hosts like ours (and many staging VMs) still run it; on cgroup v2 the field is unused.
KUBELET_PATCH = "kind: KubeletConfiguration\nfailCgroupV1: false\n"


def node_image(version: str) -> str:
    """kind's node image for a release (``kind build node-image`` makes one if kind publishes none)."""
    return f"kindest/node:v{version}"


def path_for(version: str) -> Path:
    return KIND_DIR / f"kind-{version}.yaml"


def render(version: str, workers: int = DEFAULT_WORKERS, image: str | None = None) -> dict[str, Any]:
    """The kind Cluster config for ``version``: DRA gates, runtime-config, CDI, 1 control plane + workers.

    Workers carry the disruptable label: the cluster is the harness's own, so disruptive
    tests may touch any worker once ``--allow-disruptive`` is given.
    """
    row = gates.for_version(version)
    image = image or node_image(version)
    worker = {"role": "worker", "image": image, "labels": {DISRUPTABLE_LABEL: "true"}}
    return {
        "kind": "Cluster",
        "apiVersion": API_VERSION,
        "featureGates": dict(row["feature_gates"]),
        "runtimeConfig": {gv: "true" for gv in row["runtime_config"]},
        "containerdConfigPatches": [CDI_PATCH],
        "kubeadmConfigPatches": [KUBELET_PATCH],
        "nodes": [{"role": "control-plane", "image": image}] + [copy.deepcopy(worker) for _ in range(workers)],
    }


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the containerd patch) as literal blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def dump(config: dict[str, Any], version: str) -> str:
    header = HEADER.format(version=version, name=f"kind/{path_for(version).name}")
    return header + yaml.dump(config, Dumper=_Dumper, sort_keys=False, width=120)


def kind_versions() -> list[str]:
    """The releases a kind cluster can run (a node image can be built for)."""
    return [v for v in catalog.KUBERNETES_VERSIONS if v not in catalog.NO_KIND_NODE]


def write_all() -> list[Path]:
    """Rewrite every committed config from the table (after ``components gates`` changed it)."""
    written = []
    for version in kind_versions():
        path = path_for(version)
        path.write_text(dump(render(version), version))
        written.append(path)
    return written


def load(version: str) -> dict[str, Any]:
    return yaml.safe_load(path_for(version).read_text())


def for_cluster(version: str, workers: int, image: str | None = None,
                built_here: list[str] | None = None) -> dict[str, Any]:
    """The committed config of ``version`` with the worker count (and node image) asked for.

    ``built_here``: the kubeadm patches of a node image we built (``nodeimage``); such an
    image carries no kindnetd, so kind's default CNI is off and the image's own pod network
    takes its place.
    """
    config = load(version)
    if built_here is not None:
        config["networking"] = {"disableDefaultCNI": True}
        config["kubeadmConfigPatches"] = [*config.get("kubeadmConfigPatches", []), *built_here]
    control_planes = [n for n in config["nodes"] if n["role"] == "control-plane"]
    template = next(n for n in config["nodes"] if n["role"] == "worker")
    if image:
        for n in control_planes:
            n["image"] = image
        template = {**template, "image": image}
    config["nodes"] = control_planes + [copy.deepcopy(template) for _ in range(workers)]
    return config
