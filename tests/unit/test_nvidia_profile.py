"""The nvidia profile uses the names NVIDIA's GPU DRA driver really publishes and accepts.

The expected sets below were read from the driver's source (kubernetes-sigs/dra-driver-nvidia-gpu,
formerly NVIDIA/k8s-dra-driver-gpu: deployments/helm/.../deviceclass-*.yaml,
cmd/gpu-kubelet-plugin/deviceinfo.go and mig.go, api/nvidia.com/resource/v1beta1/sharing.go),
so a typo in the profile fails here rather than as a Pending pod on a GPU cluster.
"""

from __future__ import annotations

import yaml

from dra_harness.checks.cel import evaluate
from dra_harness.providers.profiles import by_name

from .nvml_recordings import FIXTURES

GPU_ATTRIBUTES = {"type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion",
                  "cudaDriverVersion", "addressingMode", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot"}
MIG_ATTRIBUTES = GPU_ATTRIBUTES - {"resource.kubernetes.io/pcieRoot"} | {"parentUUID", "profile"}
MPS_FIELDS = {"defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit"}
INTERVALS = {"Default", "Short", "Medium", "Long"}

NVIDIA = by_name("nvidia")


def test_device_classes_are_the_charts():
    assert NVIDIA.device_class == "gpu.nvidia.com"
    assert NVIDIA.device_classes == {"gpu": "gpu.nvidia.com", "mig": "mig.nvidia.com"}


def test_every_mapped_attribute_is_one_the_driver_publishes():
    published = GPU_ATTRIBUTES | MIG_ATTRIBUTES
    for logical, name in NVIDIA.attributes.items():
        assert name in published, f"{logical} -> {name} is not an attribute of gpu.nvidia.com devices"
    assert NVIDIA.cel_attribute("pciBusID") == "device.attributes['resource.kubernetes.io'].pciBusID"


def test_sharing_configs_follow_the_v1beta1_api():
    configs = NVIDIA.sharing_configs
    assert set(configs) == {"TimeSlicing", "MPS", "MIG-MPS"}
    for name, cfg in configs.items():
        assert cfg["apiVersion"] == "resource.nvidia.com/v1beta1", name
        assert cfg["kind"] in {"GpuConfig", "MigDeviceConfig"}, name
        sharing = cfg["sharing"]
        assert sharing["strategy"] in {"TimeSlicing", "MPS"}
        if sharing["strategy"] == "TimeSlicing":
            assert cfg["kind"] == "GpuConfig", "MIG devices share by MPS only"
            assert set(sharing) == {"strategy", "timeSlicingConfig"}
            assert sharing["timeSlicingConfig"]["interval"] in INTERVALS
        else:
            assert set(sharing) == {"strategy", "mpsConfig"} and set(sharing["mpsConfig"]) <= MPS_FIELDS
    assert NVIDIA.sharing_config == configs["TimeSlicing"]


def test_the_profile_reads_the_recorded_nvidia_slices():
    docs = list(yaml.safe_load_all((FIXTURES / "resourceslices.yaml").read_text()))
    gpu = docs[0]["spec"]["devices"][0]
    mig = docs[1]["spec"]["devices"][0]
    assert set(gpu["attributes"]) <= GPU_ATTRIBUTES and set(mig["attributes"]) <= MIG_ATTRIBUTES
    assert NVIDIA.device_attribute(gpu, "uuid").startswith("GPU-")
    assert NVIDIA.device_attribute(gpu, "pciBusID") == "0000:18:00.0"
    assert NVIDIA.device_attribute(mig, "uuid").startswith("MIG-")
    assert NVIDIA.device_attribute(mig, "parentUUID").startswith("GPU-")
    assert NVIDIA.device_attribute(mig, "migProfile") == "1g.10gb"


def test_the_charts_class_selectors_split_gpus_from_mig_devices():
    """The DeviceClass CEL of the driver's chart, evaluated on the recorded slices."""
    gpu_class = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    mig_class = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    docs = list(yaml.safe_load_all((FIXTURES / "resourceslices.yaml").read_text()))
    gpu, mig = docs[0]["spec"]["devices"][0], docs[1]["spec"]["devices"][0]
    assert evaluate(gpu_class, "gpu.nvidia.com", gpu).matched and not evaluate(gpu_class, "gpu.nvidia.com", mig).matched
    assert evaluate(mig_class, "gpu.nvidia.com", mig).matched and not evaluate(mig_class, "gpu.nvidia.com", gpu).matched
    model = f"{NVIDIA.cel_attribute('model')} == 'NVIDIA H100 80GB HBM3'"
    assert evaluate(model, "gpu.nvidia.com", gpu).matched


def test_driver_pods_are_those_of_the_charts_kubelet_plugin_daemonset():
    # The chart names it <chart name>-kubelet-plugin; pods are matched by owner, not by label.
    assert NVIDIA.driver_daemonset == ("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-kubelet-plugin")
