"""The example driver's configurations, as its Helm chart and its own e2e test start it.

The driver publishes different devices depending on how it is started: partitions sharing
a GPU's counters (``--gpu-partitions``), devices that take several allocations with
capacity requests (``--gpu-allow-multiple-allocations``), claim status data
(``--gpu-device-status``), binding conditions (``--binding-conditions``), or another
device profile altogether (``--device-profile net`` or ``cpu``). A test asks for one by name; the
embedded cluster restarts the node's plugin with these flags and back
(:meth:`dra_harness.providers.embedded.cluster.LocalCluster.configure_driver`). Each
configuration also says which device names its slices must then hold, so the switch is
waited for on the API server (:func:`wait_published`), not assumed: a driver that ignored its flags
(or was never restarted) is caught there, not later as an odd allocation.

The same names start a cluster's driver by hand (``cluster up --driver-config``, ``cluster
driver-config``), for the example driver's own demos; names combine where the driver's flags do.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import watch_until

GPU_DRIVER = "gpu.example.com"


@dataclass(frozen=True)
class DriverConfig:
    name: str
    what: str
    flags: tuple[str, ...] = ()
    #: the device profile (``--device-profile``); its driver is ``<profile>.example.com``
    profile: str = "gpu"
    partitions: int = 0
    #: NUMA nodes a node's driver publishes in the cpu profile (``--cpu-numa-nodes``)
    numa_nodes: int = 0

    @property
    def driver(self) -> str:
        return f"{self.profile}.example.com"

    def args(self, gpu_driver: str = GPU_DRIVER) -> list[str]:
        """The plugin's flags for this configuration: another profile names its own driver, the gpu one keeps ``gpu_driver``."""
        if self.profile == "gpu":
            return [f"--driver-name={gpu_driver}", *self.flags]
        return [f"--driver-name={self.driver}", f"--device-profile={self.profile}", *self.flags]

    def devices(self, count: int) -> list[str]:
        """The device names a node's slices hold under this configuration, ``count`` devices a node."""
        if self.profile == "net":
            return [f"nic-{i}" for i in range(count)]
        if self.profile == "cpu":
            return [f"numa-{i}" for i in range(self.numa_nodes)]
        if self.partitions:
            return [f"gpu-{i}-{p}" for i in range(count)
                    for p in [*(f"partition-{j}" for j in range(self.partitions)), "full"]]
        return [f"gpu-{i}" for i in range(count)]


CONFIGS: dict[str, DriverConfig] = {c.name: c for c in (
    DriverConfig("default", "the example driver as installed by default: whole GPUs, one allocation each"),
    DriverConfig("partitions-4", "4 partitions per GPU sharing its counters, and the whole GPU (chart: kubeletPlugin.gpuPartitions=4)",
                 ("--gpu-partitions=4",), partitions=4),
    DriverConfig("multiple-allocations", "GPUs that take several allocations, each consuming memory and compute "
                 "(chart: gpuAllowMultipleAllocations=true)", ("--gpu-allow-multiple-allocations",)),
    DriverConfig("multiple-allocations-partitions-4", "partitions that take several allocations each",
                 ("--gpu-allow-multiple-allocations", "--gpu-partitions=4"), partitions=4),
    DriverConfig("device-status", "claims' status.devices data written at prepare (chart: gpuDeviceStatus=true)",
                 ("--gpu-device-status",)),
    DriverConfig("binding-conditions", "devices that bind only once a controller reports them ready "
                 "(chart: controller.plugins=BindingConditions)", ("--binding-conditions",)),
    DriverConfig("net", "the net profile: NICs whose bandwidth is consumable capacity (chart: deviceProfile=net)",
                 profile="net"),
    DriverConfig("cpu", "the cpu profile: a NUMA node whose 2 CPUs are node-allocatable cpu, shared across requests "
                 "(chart: deviceProfile=cpu, kubeletPlugin.cpu.numaNodes=1, cpusPerNUMANode=2, as upstream's e2e)",
                 ("--cpu-numa-nodes=1", "--cpus-per-numa-node=2"), profile="cpu", numa_nodes=1),
)}


def by_name(name: str) -> DriverConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"no driver configuration {name!r}; known: {', '.join(CONFIGS)}") from None


def combined(names: list[str] | tuple[str, ...]) -> DriverConfig:
    """The configuration ``names`` make together: one name, or several whose flags one known configuration
    has (``multiple-allocations`` and ``partitions-4``); otherwise one line naming what combines."""
    if not names:
        return CONFIGS["default"]
    try:
        configs = [by_name(n) for n in names]
    except ValueError as e:
        raise InputError(f"--driver-config: {e}") from None
    if len(configs) == 1:
        return configs[0]
    flags = {f for c in configs for f in c.flags}
    profiles = {c.profile for c in configs}
    match = [c for c in CONFIGS.values() if set(c.flags) == flags and {c.profile} == profiles]
    if not match:
        combos = [c.name for c in CONFIGS.values() if c.profile == "gpu" and len(c.flags) > 1]
        raise InputError(f"--driver-config {' + '.join(names)}: these do not combine; combinations known: {', '.join(combos)}")
    return match[0]


def published_as(config: DriverConfig, device: Obj) -> bool:
    """The device carries what ``config`` adds (and nothing another configuration adds)."""
    if "--gpu-allow-multiple-allocations" in config.flags or config.profile in ("net", "cpu"):
        return device.get("allowMultipleAllocations") is True
    if "--binding-conditions" in config.flags:
        return bool(device.get("bindingConditions"))
    return not device.get("allowMultipleAllocations") and not device.get("bindingConditions")


def wait_published(kube: Kube, node: str, config: DriverConfig, count: int, timeout: float = 60.0) -> list[Obj]:
    """The node's slices of ``config``'s driver once they hold exactly its devices, as it publishes them."""
    want = set(config.devices(count))

    def devices(items: list[Obj]) -> list[Obj]:
        return [d for s in items for d in s["spec"].get("devices") or []]

    def why(items: list[Obj]) -> str:
        seen = devices(items)
        names = sorted(d["name"] for d in seen)
        unlike = sorted(d["name"] for d in seen if not published_as(config, d))
        return (f"devices {names[:6]}{'...' if len(names) > 6 else ''} (want {sorted(want)[:6]}"
                f"{'...' if len(want) > 6 else ''}){f'; not published as {config.name}: {unlike[:4]}' if unlike else ''}")

    return watch_until(
        kube, rest.RESOURCE_SLICES,
        lambda items: {d["name"] for d in devices(items)} == want and all(published_as(config, d) for d in devices(items)),
        timeout, f"the {config.driver} slices of {node} to show driver configuration {config.name}",
        field_selector=f"spec.driver={config.driver},spec.nodeName={node}", why=why)
