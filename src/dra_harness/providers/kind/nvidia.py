"""NVIDIA's DRA driver on a kind cluster, installed by its own Helm chart over emulated GPUs.

Why the chart and not our processes: on kind the driver runs as clusters run it, a DaemonSet
whose init container (``kubelet-plugin-prestart.sh``) checks the driver root and whose plugin
container copies ``nvidia-cdi-hook`` to the node for the runtime. So the plugin image carries
what NVIDIA's image carries for that: the plugin, the hook, the script and bash (Debian's, with
glibc: the plugin is a cgo binary), and busybox for the script's ``find``/``ln``/``date``.

Each worker gets a driver root of its own under ``/var/lib/dra-harness`` (the node container's
own volume, which goes with the cluster; its ``/run`` is mounted noexec): the emulated NVML seeded for the cluster and node, real
character devices (major 195, as the kernel module numbers them) that the CDI spec hands to
containers, and the emulated ``nvidia-smi``. The plugin's own NVML looks for its GPUs under the
driver root (``DRA_HARNESS_NVML_DEV_ROOT``), since the pod's ``/dev`` is the node's. Workers are
labelled ``nvidia.com/gpu.present=true``, the label the chart's node affinity asks for (GPU
feature discovery sets it on GPU nodes).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog, debian
from dra_harness.components.gomod import module_source
from dra_harness.components.images import BUSYBOX
from dra_harness.components.oci import File, Image, write_layout
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.components import emulated_gpus
from dra_harness.providers.chart_values import shown_helm_args
from dra_harness.providers.kind.driver import IMPORT, helm_binary, run_helm
from dra_harness.providers.kind.tools import KindError, run

NAMESPACE = RELEASE = "dra-driver-nvidia-gpu"
DRIVER = "gpu.nvidia.com"
#: The parent is what the chart mounts into its init container (``driver-root-parent``).
DRIVER_ROOT = "/var/lib/dra-harness/nvidia-driver"
NODE_LABEL = "nvidia.com/gpu.present"
IMAGE = "dra-harness.local/dra-driver-nvidia-gpu"
#: bash and the libraries it links; glibc for the cgo plugin and the hook.
PACKAGES = ["libc6", "bash", "libtinfo6"]
#: What kubelet-plugin-prestart.sh and the plugin container's command run besides bash's builtins.
APPLETS = ("sh", "find", "ln", "ls", "date", "sleep", "env", "head", "basename", "dirname", "cat", "cp", "sed", "mount",
           "mkdir", "rm", "grep", "true")


def image_name(version: str) -> str:
    return f"{IMAGE}:v{version}"


def plugin_image(version: str) -> Image:
    """The plugin's image as NVIDIA's Dockerfile lays it out, from the Go-built binaries and the module's script."""
    component = catalog.nvidia_driver(version)
    built = builder.build_all([component], quiet=True)[component.dirname]
    script = module_source(component) / "hack" / "kubelet-plugin-prestart.sh"
    files = debian.image_files(PACKAGES, lambda rel: not rel.startswith("usr/share/"))
    files += [File("usr/bin/gpu-kubelet-plugin", built.binary("gpu-kubelet-plugin").read_bytes()),
              File("usr/bin/nvidia-cdi-hook", built.binary("nvidia-cdi-hook").read_bytes()),
              File("usr/bin/kubelet-plugin-prestart.sh", script.read_bytes()),
              File("bin/busybox", BUSYBOX.read_bytes()),
              *(File(f"bin/{a}", link="busybox") for a in APPLETS)]
    return Image(image_name(version), files, entrypoint=[], cmd=["bash"])


def install_driver_root(node: str, profile: str, seed: str) -> None:
    """The emulated driver root into kind node ``node`` (a container), with real character devices."""
    with tempfile.TemporaryDirectory(prefix="dra-harness-nvidia-root-") as tmp:
        root = emulated_gpus.driver_root(Path(tmp) / "root", profile, seed)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(root, arcname=".", filter=lambda i: None if i.name.startswith("./dev/") else i)
        nodes = " ".join(f"mknod -m 666 {DRIVER_ROOT}/dev/nvidia{m} c {emulated_gpus.NVIDIA_MAJOR} {m};"
                         for m in range(emulated_gpus.GPUS))
        run(["docker", "exec", "-i", node, "sh", "-c",
             f"rm -rf {DRIVER_ROOT} && mkdir -p {DRIVER_ROOT}/dev && tar -x -C {DRIVER_ROOT} && {nodes} "
             f"mknod -m 666 {DRIVER_ROOT}/dev/nvidiactl c {emulated_gpus.NVIDIA_MAJOR} {emulated_gpus.CTL_MINOR}"],
            f"installing the emulated driver root into {node}", timeout=120, stdin=buf.getvalue())


def seed(cluster: str, node: str) -> str:
    """The node's GPU identities: its own in this cluster, others in the next (a seed is at most 63 characters)."""
    return "kind-" + hashlib.sha256(f"{cluster}/{node}".encode()).hexdigest()[:24]


def helm_values(version: str) -> list[str]:
    """``--set`` pairs for the chart: our image, the emulated driver root, GPUs only (no ComputeDomains: no
    NVLink fabric), time-slicing on as for the embedded cluster, no webhook (it needs cert-manager)."""
    return [
        f"image.repository={IMAGE}", f"image.tag=v{version}", "image.pullPolicy=Never",
        f"nvidiaDriverRoot={DRIVER_ROOT}",
        "resources.computeDomains.enabled=false", "gpuResourcesEnabledOverride=true",
        "featureGates.TimeSlicingSettings=true",
        "kubeletPlugin.containers.gpus.env[0].name=DRA_HARNESS_NVML_DEV_ROOT",
        "kubeletPlugin.containers.gpus.env[0].value=/driver-root/dev",
    ]


def chart_dir(version: str) -> Path:
    chart = module_source(catalog.nvidia_driver(version)) / "deployments" / "helm" / "dra-driver-nvidia-gpu"
    if not (chart / "Chart.yaml").is_file():
        raise KindError(f"NVIDIA's driver module v{version} ships no chart at {chart}")
    return chart


def install(cluster: str, workers: list[str], kubeconfig: Path, version: str, profile: str, home: Path,
            user: tuple[str, ...] = ()) -> str:
    """Everything above on every worker, then ``helm upgrade --install`` of the chart; says what was installed."""
    with tempfile.TemporaryDirectory(prefix="dra-harness-kind-nvidia-") as tmp:
        archive = write_layout(plugin_image(version), Path(tmp) / "plugin.tar").read_bytes()
        for node in workers:
            run(["docker", "exec", "-i", node, *IMPORT], f"importing {image_name(version)} into {node}", timeout=300, stdin=archive)
    kube = connect(kubeconfig)
    for node in workers:
        install_driver_root(node, profile, seed=seed(cluster, node))
        kube.patch(rest.NODES, node, {"metadata": {"labels": {NODE_LABEL: "true"}}})
    run_helm([helm_binary(), "upgrade", "--install", RELEASE, str(chart_dir(version)), "--kubeconfig", str(kubeconfig),
              "--namespace", NAMESPACE, "--create-namespace", *(x for v in helm_values(version) for x in ("--set", v)),
              *user, "--wait", "--timeout", "5m"], home, "install of NVIDIA's driver")
    given = f", the user's {' '.join(shown_helm_args(user))}" if user else ""
    return f"helm v{catalog.HELM_VERSION}, chart {RELEASE} from {catalog.NVIDIA_DRIVER_MODULE}@v{version}{given}"
