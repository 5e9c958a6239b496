"""kind clusters with the example DRA driver: create, load or build the driver image, install, wait, delete.

Why a provider of its own rather than "use --cluster=existing on a kind kubeconfig":
a DRA-ready kind cluster needs the right gates per release (``kind/kind-<v>.yaml``),
CDI in containerd, the driver image inside every node (no registry on a CI runner)
and the driver installed and publishing before any suite starts. Once that is done
the kubeconfig goes down the same code path as ``existing``.

Every missing prerequisite (Docker CLI, a running Docker engine, kind, helm when asked
for) is reported in one line before anything is created. The install uses the
driver's Helm chart when ``helm`` is on PATH, else the manifests we keep
(``data/kind/manifests/dra-example-driver.yaml``, with ``${DRIVER_IMAGE}`` and
``${KUBELET_ROOT}`` filled in).
"""

from __future__ import annotations

import logging
import re
import shutil
import string
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.providers.hardware import devices_by_node
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.waits import WaitError, watch_until
from dra_harness.providers.kind import apply as applier
from dra_harness.providers.kind import config as kind_config
from dra_harness.errors import ClusterError

log = logging.getLogger(__name__)

DRIVER_NAME = "gpu.example.com"
DRIVER_NAMESPACE = "dra-example-driver"
DEFAULT_NAME = "dra-harness"
#: The image we build from the Go-built plugin when the user names none (no registry needed).
LOCAL_DRIVER_IMAGE = f"dra-harness.local/dra-example-driver:v{catalog.EXAMPLE_DRIVER_VERSION}"
DEFAULT_CHART = "oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver"
MANIFESTS = kind_config.KIND_DIR / "manifests" / "dra-example-driver.yaml"
KUBELET_ROOT = "/var/lib/kubelet"  # kind nodes run kubelet with its default root
CDI_ROOT = "/var/run/cdi"  # one of containerd's default cdi_spec_dirs in kind nodes


class KindError(ClusterError):
    """A prerequisite is missing or a kind step failed; the message is one line."""


def _key_line(text: str) -> str:
    """The line of a tool's output that says what went wrong."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    # Docker and kind put the useful part last ("ERROR: ..."), after progress lines.
    errors = [ln for ln in lines if re.match(r"(?i)^(error|fatal|failed)", ln)]
    return (errors or lines or ["no output"])[-1][:300]


def _run(argv: list[str], what: str, timeout: float = 600, stdin: bytes | None = None) -> str:
    log.debug("%s: %s", what, " ".join(argv[:4]))
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise KindError(f"{what}: `{' '.join(argv[:3])}` did not finish in {timeout:.0f}s") from e
    except OSError as e:
        raise KindError(f"{what}: cannot run {argv[0]}: {e.strerror}") from e
    if proc.returncode != 0:
        raise KindError(f"{what} failed: {_key_line(proc.stderr.decode(errors='replace') or proc.stdout.decode(errors='replace'))}")
    return proc.stdout.decode(errors="replace")


# -- prerequisites ---------------------------------------------------------------------
def check_docker() -> None:
    """The Docker CLI *and* a running engine (a CLI alone cannot start kind nodes)."""
    if shutil.which("docker") is None:
        raise KindError("the kind provider needs Docker: `docker` is not on PATH (install Docker Engine)")
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        raise KindError("the kind provider needs a running Docker engine: `docker info` did not answer in 30s") from e
    if proc.returncode != 0 or not proc.stdout.strip():
        raise KindError(f"the kind provider needs a running Docker engine: `docker info` says: {_key_line(proc.stderr or proc.stdout)}")


def check_kind() -> None:
    if shutil.which("kind") is None:
        raise KindError("the kind provider needs the kind CLI on PATH: `go install sigs.k8s.io/kind@latest` or see https://kind.sigs.k8s.io")


def check_helm() -> None:
    if shutil.which("helm") is None:
        raise KindError("--install helm needs helm on PATH (https://helm.sh/docs/intro/install/); or use --install manifests")


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(kind_config.KIND_DIR.parent))
    except ValueError:
        return str(path)


def install_method(install: str) -> str:
    """``auto``: the chart when helm is on PATH, else our manifests."""
    if install != "auto":
        return install
    return "helm" if shutil.which("helm") else "manifests"


def check_prerequisites(install: str = "auto") -> None:
    """One line for the first thing missing, checked before anything is created."""
    check_docker()
    check_kind()
    method = install_method(install)
    if method == "helm":
        check_helm()
    elif not MANIFESTS.exists():
        how = "--install manifests needs" if install == "manifests" else "no helm on PATH, and the driver manifests"
        raise KindError(f"{how} {_shown(MANIFESTS)}, which is missing; install helm or restore the file")


# -- the cluster -----------------------------------------------------------------------
def state_dir(name: str) -> Path:
    return builder.cache_root() / "kind" / name


def kubeconfig_path(name: str) -> Path:
    return state_dir(name) / "kubeconfig"


def clusters() -> list[str]:
    out = _run(["kind", "get", "clusters"], "listing kind clusters", timeout=60)
    return [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("No kind clusters")]


def nodes(name: str) -> list[str]:
    out = _run(["kind", "get", "nodes", "--name", name], f"listing the nodes of kind cluster {name}", timeout=60)
    return [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith(("using", "No kind"))]


@dataclass
class KindSpec:
    name: str = DEFAULT_NAME
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    workers: int = 2
    gpus_per_node: int = 8
    node_image: str | None = None
    driver_image: str = LOCAL_DRIVER_IMAGE
    install: str = "auto"  # auto | helm | manifests
    chart: str = DEFAULT_CHART
    chart_version: str = catalog.EXAMPLE_DRIVER_VERSION
    timeout: float = 600.0


def up(spec: KindSpec, say: Callable[[str], None] = lambda s: None) -> Path:
    """Create (or reuse) the kind cluster, get the driver running, return its kubeconfig."""
    if spec.k8s_version not in catalog.KUBERNETES_VERSIONS:
        raise KindError(f"Kubernetes {spec.k8s_version}: choose one of {', '.join(catalog.KUBERNETES_VERSIONS)}")
    check_prerequisites(spec.install)
    method = install_method(spec.install)
    deadline = time.monotonic() + spec.timeout
    state_dir(spec.name).mkdir(parents=True, exist_ok=True)
    if spec.name not in clusters():
        log.info("kind cluster %s: creating (Kubernetes v%s, %d workers)", spec.name, spec.k8s_version, spec.workers)
        say(f"creating kind cluster {spec.name} (Kubernetes v{spec.k8s_version}, {spec.workers} workers)")
        config = state_dir(spec.name) / "kind-config.yaml"
        config.write_text(yaml.safe_dump(kind_config.for_cluster(spec.k8s_version, spec.workers, spec.node_image), sort_keys=False))
        _run(["kind", "create", "cluster", "--name", spec.name, "--config", str(config), "--wait", "120s"],
             f"kind create cluster {spec.name}", timeout=max(60, deadline - time.monotonic()))
    kubeconfig = kubeconfig_path(spec.name)
    kubeconfig.write_text(_run(["kind", "get", "kubeconfig", "--name", spec.name], "kind get kubeconfig", timeout=60))
    kubeconfig.chmod(0o600)
    say(f"loading {spec.driver_image} into the nodes")
    load_driver_image(spec.name, spec.driver_image)
    say(f"installing the example driver ({method})")
    if method == "helm":
        install_with_helm(kubeconfig, spec)
    else:
        install_with_manifests(kubeconfig, spec.driver_image, spec.gpus_per_node)
    say("waiting for every worker's ResourceSlices")
    wait_for_slices(kubeconfig, spec.workers, spec.gpus_per_node, deadline)
    (state_dir(spec.name) / "ready").touch()
    log.info("kind cluster %s: up, driver installed (%s) and publishing", spec.name, method)
    return kubeconfig


def is_ready(name: str) -> bool:
    """A cluster that ``up`` finished (driver publishing), and that kind still has."""
    return (state_dir(name) / "ready").exists() and kubeconfig_path(name).exists() and name in clusters()


def down(name: str) -> bool:
    """Delete the kind cluster and our state for it; False when there was none."""
    check_docker()
    check_kind()
    existed = name in clusters()
    if existed:
        log.info("kind cluster %s: deleting", name)
        _run(["kind", "delete", "cluster", "--name", name], f"kind delete cluster {name}", timeout=300)
    shutil.rmtree(state_dir(name), ignore_errors=True)
    return existed


# -- the driver image ------------------------------------------------------------------
def _image_present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def build_driver_image(image: str = LOCAL_DRIVER_IMAGE) -> None:
    """A scratch image holding our Go-built, static kubelet plugin (what the chart runs)."""
    built = builder.build_all([catalog.EXAMPLE_DRIVER])[catalog.EXAMPLE_DRIVER.dirname]
    binary = built.binary("dra-example-kubeletplugin")
    with tempfile.TemporaryDirectory(prefix="dra-harness-image-") as ctx:
        shutil.copy2(binary, Path(ctx) / "dra-example-kubeletplugin")
        (Path(ctx) / "Dockerfile").write_text(
            "FROM scratch\n"
            "COPY dra-example-kubeletplugin /usr/bin/dra-example-kubeletplugin\n"
            "ENV PATH=/usr/bin\n"
            'ENTRYPOINT ["/usr/bin/dra-example-kubeletplugin"]\n'
        )
        _run(["docker", "build", "-q", "-t", image, ctx], f"building {image}", timeout=300)


def load_driver_image(name: str, image: str) -> None:
    """Put the image into every node's containerd; build ours first if Docker lacks it.

    ``docker save | docker exec -i <node> ctr -n k8s.io images import -``, as
    dra-example-driver's own scripts do: ``kind load`` breaks on node images whose
    containerd does not read the config version newer kind releases write. An image
    Docker does not have and we cannot build is left for the nodes to pull.
    """
    if not _image_present(image):
        if image != LOCAL_DRIVER_IMAGE:
            return
        build_driver_image(image)
    archive = _run_bytes(["docker", "save", image], f"docker save {image}")
    for node in nodes(name):
        _run(["docker", "exec", "-i", node, "ctr", "--namespace=k8s.io", "images", "import", "-"],
             f"importing {image} into {node}", stdin=archive, timeout=300)


def _run_bytes(argv: list[str], what: str) -> bytes:
    proc = subprocess.run(argv, capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise KindError(f"{what} failed: {_key_line(proc.stderr.decode(errors='replace'))}")
    return proc.stdout


# -- installing the driver -------------------------------------------------------------
def _split_image(image: str) -> tuple[str, str]:
    repo, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, "latest"
    return repo, tag


def helm_command(kubeconfig: Path, spec: KindSpec) -> list[str]:
    repo, tag = _split_image(spec.driver_image)
    argv = [
        "helm", "upgrade", "--install", "dra-example-driver", spec.chart,
        "--kubeconfig", str(kubeconfig), "--namespace", DRIVER_NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repo}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"kubeletPlugin.numDevices={spec.gpus_per_node}",
        "--wait", "--timeout", "5m",
    ]
    if spec.chart.startswith("oci://") and spec.chart_version:
        argv += ["--version", spec.chart_version]
    return argv


def install_with_helm(kubeconfig: Path, spec: KindSpec) -> None:
    check_helm()
    _run(helm_command(kubeconfig, spec), "helm install of the example driver", timeout=420)


def render_manifests(image: str, kubelet_root: str = KUBELET_ROOT, path: Path | None = None, cdi_root: str = CDI_ROOT) -> list[dict]:
    """Our driver manifests with ``${DRIVER_IMAGE}``, ``${KUBELET_ROOT}`` and ``${CDI_ROOT}`` filled in."""
    path = path or MANIFESTS
    if not path.exists():
        raise KindError(f"driver manifests {_shown(path)} are missing; install helm or restore the file")
    text = string.Template(path.read_text()).safe_substitute(DRIVER_IMAGE=image, KUBELET_ROOT=kubelet_root, CDI_ROOT=cdi_root)
    left = sorted(set(re.findall(r"\$\{(\w+)\}", text)))
    if left:
        raise KindError(f"{path.name}: placeholders left unfilled: {', '.join(left)}")
    try:
        return [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise KindError(f"{path.name} is not valid YAML after substitution ({e.__class__.__name__})") from e


DEVICE_CLASS = {
    # What the driver's chart installs; our manifests leave it to the cluster's creator.
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER_NAME},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]},
}


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
    docs = render_manifests(image)
    if gpus_per_node is not None:
        with_device_count(docs, gpus_per_node)
    if not any(d.get("kind") == "DeviceClass" and d["metadata"]["name"] == DRIVER_NAME for d in docs):
        docs.append(DEVICE_CLASS)
    return applier.apply_all(connect(kubeconfig), docs)


def slice_counts(slices: list[dict]) -> dict[str, int]:
    return {n: len(d) for n, d in devices_by_node(slices, DRIVER_NAME).items() if d}


def wait_for_slices(kubeconfig: Path, workers: int, per_node: int | None, deadline: float) -> dict[str, int]:
    """Every worker publishes devices (``per_node`` each when we set the count); a watch, not a poll."""
    def ready(slices: list[dict]) -> bool:
        counts = slice_counts(slices)
        return len(counts) >= workers and (per_node is None or all(c == per_node for c in counts.values()))

    try:
        slices = watch_until(
            connect(kubeconfig), rest.RESOURCE_SLICES, ready, max(1.0, deadline - time.monotonic()),
            f"{workers} workers to publish {DRIVER_NAME} devices", field_selector=f"spec.driver={DRIVER_NAME}",
            why=lambda slices: f"devices per node: {slice_counts(slices) or 'none'}",
        )
    except WaitError as e:
        raise KindError(str(e).splitlines()[0]) from None
    return slice_counts(slices)


def owned_by_run(name: str) -> bool:
    """Clusters the pytest plugin made for one run (removed at its end)."""
    return name.startswith("dra-run-")

