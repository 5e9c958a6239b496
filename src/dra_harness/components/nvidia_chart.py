"""What NVIDIA's DRA driver chart installs, read from the release's own module: its DeviceClasses and DaemonSet name.

Why here: the embedded cluster creates the classes the chart would (it runs the plugin itself), the
kind provider installs the chart, and the nvidia profile's tests compare both with the chart; the
chart is a component's source, like every other file we read from a Go module.
"""

from __future__ import annotations

import re

from dra_harness.components import catalog
from dra_harness.components.gomod import module_source
from dra_harness.errors import ClusterError
from dra_harness.kube.types import Obj

_NAME = re.compile(r"^\s*name:\s*(\S+)\s*$", re.M)
_CEL = re.compile(r'expression:\s*"([^"]+)"')


def chart_device_classes(version: str = catalog.NVIDIA_DRIVER_VERSIONS[0]) -> list[Obj]:
    """The GPU and MIG DeviceClasses of the driver's Helm chart, read from its module (name and CEL as written)."""
    templates = module_source(catalog.nvidia_driver(version)) / "deployments" / "helm" / "dra-driver-nvidia-gpu" / "templates"
    out = []
    for kind in ("gpu", "mig"):
        text = (templates / f"deviceclass-{kind}.yaml").read_text()
        name, cel = _NAME.search(text), _CEL.search(text)
        if not name or not cel:
            raise ClusterError(f"the chart's deviceclass-{kind}.yaml no longer reads as a name and one CEL selector")
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name.group(1)},
                    "spec": {"selectors": [{"cel": {"expression": cel.group(1)}}]}})
    return out


def chart_daemonset(version: str = catalog.NVIDIA_DRIVER_VERSIONS[0]) -> str:
    """The kubelet plugin DaemonSet's name as the chart of ``version`` makes it without nameOverride
    (``<chart name>-kubelet-plugin``, read from its Chart.yaml and template)."""
    chart = module_source(catalog.nvidia_driver(version)) / "deployments" / "helm" / "dra-driver-nvidia-gpu"
    name = re.search(r"^name:\s*(\S+)", (chart / "Chart.yaml").read_text(), re.M)
    template = (chart / "templates" / "kubeletplugin.yaml").read_text()
    if not name or '{{ include "dra-driver-nvidia-gpu.name" . }}-kubelet-plugin' not in template:
        raise ClusterError(f"the chart of v{version} no longer names its DaemonSet <chart name>-kubelet-plugin")
    return f"{name.group(1)}-kubelet-plugin"
