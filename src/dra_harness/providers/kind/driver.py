"""The example driver on a kind cluster: its image in every node, installed by its own Helm chart, publishing.

Why the chart from the driver's Go module: it is the install path the driver's own demo
uses, at exactly the version of the plugin we build (``deployments/helm`` ships in the
module), and no chart registry is reachable here. Helm is built from its module too.
Our manifests (``data/kind/manifests/dra-example-driver.yaml``) stay as the fallback
(``--install manifests``). The images go into each node's containerd with ``ctr images
import``, pinned, as kind's own node images hold theirs: no registry, no pull.
"""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import tempfile
import time
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.components.gomod import module_source
from dra_harness.components.images import DRIVER_IMAGE, driver_image, nvml_probe_image, workload_image
from dra_harness.components.oci import write_layout
from dra_harness.providers.chart_values import shown_helm_args
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.providers.hardware import devices_by_node
from dra_harness.providers.profiles import EXAMPLE_DRIVER
from dra_harness.kube import apply as applier
from dra_harness.providers.kind import config as kind_config
from dra_harness.providers.kind.tools import KindError, image_present, run, run_bytes

DRIVER_NAME = EXAMPLE_DRIVER
NAMESPACE = "dra-example-driver"
RELEASE = "dra-example-driver"
MANIFESTS = kind_config.KIND_DIR / "manifests" / "dra-example-driver.yaml"
KUBELET_ROOT = "/var/lib/kubelet"  # kind nodes run kubelet with its default root
CDI_ROOT = "/var/run/cdi"  # one of containerd's default cdi_spec_dirs in kind nodes
IMPORT = ["ctr", "--namespace=k8s.io", "images", "import", "--label=io.cri-containerd.pinned=pinned", "-"]

DEVICE_CLASS = {
    # What the driver's chart installs; our manifests leave it to the cluster's creator.
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER_NAME},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]},
}


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(kind_config.KIND_DIR.parent))
    except ValueError:
        return str(path)


# -- images ----------------------------------------------------------------------------
def load_images(nodes: list[str], image: str | None, nvidia: bool = False) -> list[str]:
    """Our workload image and the driver's into every node; the references loaded.

    ``image`` None: the driver image we build from the Go-built plugin. A named image is
    taken from Docker when Docker has it, else left for the nodes to pull. ``nvidia``: the NVML
    probe's image instead of the example driver's (NVIDIA's plugin image is :mod:`.nvidia`'s).
    """
    with tempfile.TemporaryDirectory(prefix="dra-harness-kind-images-") as tmp:
        archives = {workload_image().name: write_layout(workload_image(), Path(tmp) / "workload.tar")}
        if nvidia:
            archives[nvml_probe_image().name] = write_layout(nvml_probe_image(), Path(tmp) / "probe.tar")
        elif image is None or image == DRIVER_IMAGE:
            plugin = builder.build_all([catalog.EXAMPLE_DRIVER], quiet=True)[catalog.EXAMPLE_DRIVER.dirname]
            archives[DRIVER_IMAGE] = write_layout(driver_image(plugin.binary("dra-example-kubeletplugin")), Path(tmp) / "driver.tar")
        elif image_present(image):
            (Path(tmp) / "driver.tar").write_bytes(run_bytes(["docker", "save", image], f"docker save {image}"))
            archives[image] = Path(tmp) / "driver.tar"
        for node in nodes:
            for ref, archive in archives.items():
                run(["docker", "exec", "-i", node, *IMPORT], f"importing {ref} into {node}", timeout=300,
                    stdin=archive.read_bytes())
    return sorted(archives)


# -- installing ------------------------------------------------------------------------
def chart_dir() -> Path:
    """The example driver's Helm chart, from its Go module at the version we build."""
    chart = module_source(catalog.EXAMPLE_DRIVER) / "deployments" / "helm" / "dra-example-driver"
    if not (chart / "Chart.yaml").is_file():
        raise KindError(f"the example driver's module v{catalog.EXAMPLE_DRIVER_VERSION} ships no chart at {chart}")
    return chart


def _split_image(image: str) -> tuple[str, str]:
    repo, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return repo, tag


def helm_command(helm: str, kubeconfig: Path, chart: Path, image: str, gpus_per_node: int,
                 user: tuple[str, ...] = ()) -> list[str]:
    """The chart's install with our image and device count; ``user``'s ``--values``/``--set`` come after ours, so
    a user's ``kubeletPlugin.numDevices`` wins (Helm: the last ``--set`` of a key)."""
    repo, tag = _split_image(image)
    return [
        helm, "upgrade", "--install", RELEASE, str(chart),
        "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repo}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"kubeletPlugin.numDevices={gpus_per_node}", *user,
        "--wait", "--timeout", "5m",
    ]


def installed_driver_name(kubeconfig: Path, home: Path) -> str:
    """The driver name the release's values give (the chart's own rule: ``driverName``, else
    ``<deviceProfile>.example.com``), read back from Helm after a user's values."""
    out = run_helm([helm_binary(), "get", "values", RELEASE, "--all", "--output", "json", "--kubeconfig", str(kubeconfig),
                    "--namespace", NAMESPACE], home, f"get values {RELEASE}", timeout=60)
    values = json.loads(out or "{}")
    return str(values.get("driverName") or f"{values.get('deviceProfile') or 'gpu'}.example.com")


def helm_binary() -> str:
    return str(builder.build_all([catalog.HELM], quiet=True)[catalog.HELM.dirname].binary("helm"))


def run_helm(argv: list[str], home: Path, what: str, timeout: float = 420) -> str:
    """Run Helm with its cache and config in ``home`` (the cluster's state); its output, or KindError naming ``what``."""
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise KindError(f"helm {what} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


def install_with_helm(kubeconfig: Path, image: str, gpus_per_node: int, home: Path, user: tuple[str, ...] = ()) -> str:
    """``helm upgrade --install`` of the chart (with the user's values and ``--set`` pairs, ``user``)."""
    run_helm(helm_command(helm_binary(), kubeconfig, chart_dir(), image, gpus_per_node, user), home, "install of the example driver")
    given = f", the user's {' '.join(shown_helm_args(user))}" if user else ""
    return f"helm v{catalog.HELM_VERSION}, chart {RELEASE} from sigs.k8s.io/dra-example-driver@v{catalog.EXAMPLE_DRIVER_VERSION}{given}"


def render_manifests(image: str, kubelet_root: str = KUBELET_ROOT, path: Path | None = None, cdi_root: str = CDI_ROOT) -> list[dict]:
    """Our driver manifests with ``${DRIVER_IMAGE}``, ``${KUBELET_ROOT}`` and ``${CDI_ROOT}`` filled in."""
    import yaml

    path = path or MANIFESTS
    if not path.exists():
        raise KindError(f"driver manifests {_shown(path)} are missing; use --install helm or restore the file")
    text = string.Template(path.read_text()).safe_substitute(DRIVER_IMAGE=image, KUBELET_ROOT=kubelet_root, CDI_ROOT=cdi_root)
    left = sorted(set(re.findall(r"\$\{(\w+)\}", text)))
    if left:
        raise KindError(f"{path.name}: placeholders left unfilled: {', '.join(left)}")
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise KindError(f"{path.name} is not valid YAML after substitution ({e.__class__.__name__})") from e


def with_device_count(docs: list[dict], count: int) -> list[dict]:
    """Set the plugin's ``NUM_DEVICES`` (the chart's ``kubeletPlugin.numDevices``) in every DaemonSet container."""
    for doc in docs:
        if doc.get("kind") != "DaemonSet":
            continue
        for container in doc["spec"]["template"]["spec"].get("containers", []):
            env = container.setdefault("env", [])
            entry = next((e for e in env if e.get("name") == "NUM_DEVICES"), None)
            if entry is None:
                env.append({"name": "NUM_DEVICES", "value": str(count)})
            else:
                entry.pop("valueFrom", None)
                entry["value"] = str(count)
    return docs


def install_with_manifests(kubeconfig: Path, image: str, gpus_per_node: int | None = None) -> list[str]:
    """Server-side apply of our manifests (and the DeviceClass the chart would make); the objects applied."""
    docs = render_manifests(image)
    if gpus_per_node is not None:
        with_device_count(docs, gpus_per_node)
    if not any(d.get("kind") == "DeviceClass" and d["metadata"]["name"] == DRIVER_NAME for d in docs):
        docs.append(DEVICE_CLASS)
    return applier.apply_all(connect(kubeconfig), docs)


# -- publishing ------------------------------------------------------------------------
def slice_counts(slices: list[dict], driver: str = DRIVER_NAME) -> dict[str, int]:
    return {n: len(d) for n, d in devices_by_node(slices, driver).items() if d}


def wait_for_slices(kubeconfig: Path, workers: int, per_node: int | None, deadline: float, driver: str = DRIVER_NAME) -> dict[str, int]:
    """Every worker publishes devices of ``driver`` (``per_node`` each when we set the count); a watch, not a poll."""
    def ready(slices: list[dict]) -> bool:
        counts = slice_counts(slices, driver)
        return len(counts) >= workers and (per_node is None or all(c == per_node for c in counts.values()))

    try:
        slices = watch_until(
            connect(kubeconfig), rest.RESOURCE_SLICES, ready, max(1.0, deadline - time.monotonic()),
            f"{workers} workers to publish {driver} devices", field_selector=f"spec.driver={driver}",
            why=lambda slices: f"devices per node: {slice_counts(slices, driver) or 'none'}",
        )
    except WaitError as e:
        raise KindError(str(e).splitlines()[0]) from None
    return slice_counts(slices, driver)


def publishers(kube: rest.Kube, driver: str = DRIVER_NAME, namespace: str = NAMESPACE) -> list[dict[str, object]]:
    """Per node with slices: the driver pod there, the DaemonSet that owns it, its image, and the devices published.

    For the fingerprint: evidence that the slices come from the chart's DaemonSet pods,
    not from something else that writes ResourceSlices.
    """
    counts = slice_counts(kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={driver}"), driver)
    pods = {p["spec"].get("nodeName"): p for p in kube.list(rest.PODS, namespace=namespace)
            if p.get("status", {}).get("phase") == "Running"}
    out: list[dict[str, object]] = []
    for node, devices in sorted(counts.items()):
        pod = pods.get(node)
        owner: dict[str, str] = next((o for o in (pod or {}).get("metadata", {}).get("ownerReferences", []) if o.get("kind") == "DaemonSet"), {})
        out.append({"node": node, "devices": devices, "pod": (pod or {}).get("metadata", {}).get("name"),
                    "daemonset": owner.get("name"), "images": [c["image"] for c in (pod or {}).get("spec", {}).get("containers", [])]})
    return out
