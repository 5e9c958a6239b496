"""``--cluster=local``: the embedded cluster as a provider.

A run without ``--cluster-name`` owns its cluster (``run-<run id>``): the first process of
the run brings it up (or ``dra-harness run`` does, before the session, to show build and
start-up progress), the others reuse it, and it goes at the end with everything in it. With
``--cluster-name`` the run uses a cluster someone started and leaves it running.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from dra_harness import heartbeat, lifetime
from dra_harness.components import build as builder
from dra_harness.components import catalog, images, nvml
from dra_harness.errors import InputError
from dra_harness.kube import builders, rest
from dra_harness.kube.rest import Kube
from dra_harness.providers import driver_configs, profiles
from dra_harness.providers.abilities import FingerprintSources
from dra_harness.providers.base import Provider, StandaloneSpec
from dra_harness.providers.embedded.cluster import DRIVER_NAME, LocalCluster, all_clusters, owner_alive
from dra_harness.components import emulated_gpus
from dra_harness.providers.embedded import driver_daemonset, driver_webhook, realcluster
from dra_harness.providers.local import LocalClusterApi
from dra_harness.providers.localstate import ClusterSpec, ClusterState
from dra_harness.components.images import WORKLOAD_IMAGE
from dra_harness.components.real_node_host import choose_real_nodes, unavailable_reason
from dra_harness.providers.handle import ClusterHandle
from dra_harness.providers.hardware import Hardware, load_hardware


class EmbeddedProvider(Provider):
    name = "local"
    controls_driver = True
    starts_real_nodes = True
    harness_operated = True
    simulates_nodes = True
    workload_image = WORKLOAD_IMAGE
    standalone = True

    @classmethod
    def local_cluster(cls, name: str) -> LocalClusterApi:
        return LocalCluster(name)

    @classmethod
    def up_standalone(cls, spec: StandaloneSpec, console: Console) -> Path:
        c = LocalCluster(spec.name)
        if spec.driver == "nvidia" and spec.gpus_per_node > emulated_gpus.GPUS:
            raise InputError(f"--gpus-per-node {spec.gpus_per_node}: the emulated NVIDIA nodes have at most {emulated_gpus.GPUS} GPUs")
        real = choose_real_nodes(spec.real_nodes, console.print)
        cluster_spec = ClusterSpec(name=spec.name, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node,
                                   k8s_version=spec.k8s_version, real_nodes=real, driver=spec.driver)
        state = _build_and_start(c, cluster_spec, console, spec.timeout)
        console.print(
            f"cluster {spec.name!r} up in {state.timings['up']:.1f}s: Kubernetes v{spec.k8s_version}, "
            f"{spec.nodes} simulated + {real} real nodes x {spec.gpus_per_node} devices of {driver_description(cluster_spec)} ({state.server})"
        )
        return c.kubeconfig

    @classmethod
    def down_standalone(cls, name: str, every: bool, console: Console) -> None:
        for c in all_clusters() if every else [LocalCluster(name)]:
            existed = c.exists()
            c.down()
            if existed:
                console.print(f"cluster {c.name!r} removed")

    @classmethod
    def configure_standalone(cls, name: str, configs: tuple[str, ...], nodes: tuple[str, ...], timeout: float,
                             console: Console) -> None:
        c = LocalCluster(name)
        st = c.state()
        if st is None:
            raise InputError(f"--name {name}: no running embedded cluster of that name")
        if st.spec.driver != "example":
            raise InputError(f"--name {name}: the cluster runs {st.spec.driver}'s driver; these configurations are the "
                             f"example driver's")
        config = driver_configs.combined(configs)
        counts = local_hardware(st.spec).nodes
        unknown = [n for n in nodes if n not in counts]
        if unknown:
            raise InputError(f"--node {unknown[0]}: cluster {name} has no such node (nodes: {', '.join(counts)})")
        if config.profile != "gpu":  # as the chart does: a DeviceClass named after the profile's driver
            try:
                c.kube().create(rest.DEVICE_CLASSES, {"metadata": {"name": config.driver},
                                                      "spec": {"selectors": [builders.cel(f"device.driver == '{config.driver}'")]}})
                console.print(f"DeviceClass {config.driver} created, as the driver's chart creates it for that profile")
            except rest.Conflict:
                pass  # made by an earlier switch
        for node in nodes or tuple(counts):
            started = time.monotonic()
            with heartbeat.status(console, f"{node}: the driver restarting as {config.name}"):
                configure_node(c, node, config.name)
                published = driver_configs.wait_published(c.kube(), node, config, counts[node], timeout)
            devices = sum(len(s["spec"].get("devices") or []) for s in published)
            console.print(f"{node}: driver {config.driver} as {config.name} ({config.what}): {devices} devices "
                          f"published in {time.monotonic() - started:.1f} s")

    @functools.cached_property
    def cluster(self) -> LocalCluster:
        """One object for the whole run: its supervisor holds the processes it started (to reap them)."""
        return LocalCluster(self.config.cluster_name or f"run-{self.run_id}")

    @property
    def outlives_run(self) -> bool:
        return bool(self.config.cluster_name)

    @property
    def embedded(self) -> LocalCluster:
        """The embedded cluster's own controls, for the tests of this provider (suites ask capabilities)."""
        return self.cluster

    def cdi_dir(self, node: str) -> Path | None:
        st = self.cluster.state()
        if st is None or node not in st.spec.real_node_names():
            return None
        return realcluster.node(self.cluster, node).cdi_dir

    def check_inputs(self) -> None:
        name = self.config.cluster_name
        if name and LocalCluster(name).state() is None:
            raise InputError(f"--cluster-name {name}: no running embedded cluster of that name")
        owner = (st := self.cluster.state()) and st.spec.owner_pid
        # A run's cluster is its own: another run given the same id would reuse it, then tear it down under the first.
        if not name and owner and lifetime.alive(owner) and owner not in lifetime.lineage():
            raise InputError(f"--run-id {self.run_id}: the embedded cluster {self.cluster.name} belongs to a run still "
                             f"going (pid {owner}); give this run another id")
        real = self.config.real_nodes or 0
        reason = unavailable_reason() if real else None
        if reason:
            raise InputError(f"--real-nodes {real}: {reason}")
        driver = _driver(self.config.driver)
        st = self.cluster.state() if name else None
        if st is not None and self.config.driver and st.spec.driver != driver:
            raise InputError(f"--driver {self.config.driver}: cluster {name} runs the {st.spec.driver} driver")
        gpus = self.config.gpus_per_node
        if driver == "nvidia" and not name and gpus > emulated_gpus.GPUS:
            raise InputError(f"--gpus-per-node {gpus}: the emulated NVIDIA nodes have at most {emulated_gpus.GPUS} GPUs")

    def _spec(self, owner_pid: int) -> ClusterSpec:
        opt = self.config
        return ClusterSpec(name=self.cluster.name, nodes=opt.nodes, gpus_per_node=opt.gpus_per_node,
                           k8s_version=opt.k8s_version or catalog.DEFAULT_KUBERNETES_VERSION,
                           owner_pid=owner_pid, real_nodes=opt.real_nodes or 0, driver=_driver(opt.driver))

    def prepare(self, console: Console) -> None:
        spec = self._spec(os.getpid())
        state = _build_and_start(self.cluster, spec, console)
        console.print(f"embedded cluster up in {state.timings['up']:.1f}s (Kubernetes v{spec.k8s_version})")

    def open(self, owner_pid: int) -> ClusterHandle:
        """Reuse this run's embedded cluster, or bring it up (removing stale ones first)."""
        for stale in all_clusters():
            if not owner_alive(stale):
                stale.down()
        cluster = self.cluster
        if cluster.state() is None or not cluster.kubeconfig.exists():
            started = time.monotonic()
            cluster.down()
            cluster.up(self._spec(owner_pid))
            note = f"embedded cluster {cluster.name} up in {time.monotonic() - started:.1f}s"
        else:
            note = f"reusing embedded cluster {cluster.name}"
        state = cluster.state()
        assert state is not None
        expected_file = self.config.expected_hardware
        expected = load_hardware(expected_file) if expected_file else local_hardware(state.spec)
        handle = ClusterHandle(self, cluster.kube(), cluster.kubeconfig, self.run_id, expected,
                               profiles.by_name(state.spec.driver_name), expected_source="file" if expected_file else "provider")
        handle.notes.append(note)
        return handle

    def connect(self) -> Kube:
        return self.cluster.kube()

    def close(self) -> None:
        if not self.outlives_run:
            self.cluster.down()  # the run's own cluster: everything goes with it

    def watchdog_target(self) -> tuple[str | None, str | None] | None:
        # The cluster's own watchdog removes a run's cluster; a named one is left as it was found,
        # apart from the run's objects, which the end-of-run sweep deletes.
        return None

    def fingerprint_sources(self) -> FingerprintSources:
        cluster = self.cluster
        sources: dict[str, Callable[[], str]] = {
            c: functools.partial(cluster.metrics, c) for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        }
        extra = {"cluster": {"nodes": self.config.nodes, "gpus_per_node": self.config.gpus_per_node}}
        st = cluster.state()
        spec = st.spec if st is not None else self._spec(os.getpid())
        return cluster.kube(), sources, driver_description(spec), extra

    @property
    def nvml_probe_image(self) -> str | None:
        """The NVML probe's image its real nodes have imported, where they run NVIDIA's driver."""
        st = self.cluster.state()
        return images.nvml_probe_image_name() if st is not None and st.spec.driver == "nvidia" and st.spec.real_nodes else None

    def gpu_settings_applied(self, node: str) -> list[str] | None:
        st = self.cluster.state()
        if st is None or node not in st.nvidia:
            return None
        return emulated_gpus.smi_calls(Path(st.nvidia[node]["root"]))

    def stop_driver(self, node: str, kill: bool) -> None:
        self.cluster.stop_driver(node, kill=kill)

    def start_driver(self, node: str) -> None:
        self.cluster.start_driver(node)

    def configure_driver(self, node: str, config: str) -> None:
        configure_node(self.cluster, node, config)

    def start_driver_webhook(self, namespace: str, run_id: str) -> str:
        return driver_webhook.start(self.cluster, namespace, run_id)

    def stop_driver_webhook(self, name: str) -> None:
        driver_webhook.stop(self.cluster, name)

    def driver_log(self, node: str, lines: int) -> str:
        return self.cluster.supervisor.log_tail(f"driver-{node}", lines)

    def driver_running(self, node: str) -> bool | None:
        tracked = self.cluster.supervisor.get(f"driver-{node}")
        return tracked is not None and tracked.alive()


def configure_node(cluster: LocalCluster, node: str, config: str) -> None:
    """Restart ``node``'s example driver in ``config``: its process, or its DaemonSet's pod (whose template changes)."""
    st = cluster.state()
    if st is not None and node in st.driver_pods:
        driver_daemonset.configure(cluster, cluster.kube(), node, config)
    else:
        cluster.configure_driver(node, config)


def _driver(option: str | None) -> str:
    """``--driver`` as the embedded cluster's driver: ``example`` (the default) or ``nvidia``."""
    if not option:
        return "example"
    profile = profiles.by_name(option)
    if profile.name not in ("example", "nvidia"):
        raise InputError(f"--driver {option}: the embedded cluster runs the example driver or NVIDIA's (on emulated GPUs)")
    return profile.name


def driver_description(spec: ClusterSpec) -> str:
    """The driver as provenance names it: exactly what ran, never just "GPU"."""
    if spec.driver == "nvidia":
        return emulated_gpus.description(spec.nvidia_version, spec.gpu_profile)
    return f"dra-example-kubeletplugin v{spec.driver_version}"


def _build_and_start(cluster: LocalCluster, spec: ClusterSpec, console: Console, timeout: float = 120.0) -> ClusterState:
    """Build what is missing (progress bars), then start the cluster (a status line per step)."""
    nvidia = [catalog.nvidia_driver(spec.nvidia_version)] if spec.driver == "nvidia" else []
    builder.build_all(catalog.for_cluster(spec.k8s_version, real_nodes=spec.real_nodes > 0) + nvidia)
    with heartbeat.status(console, "bringing up the embedded cluster") as status:
        return cluster.up(spec, timeout=timeout, say=lambda s: status.update(s))


def local_hardware(spec: ClusterSpec) -> Hardware:
    """What the embedded cluster's driver publishes: the example driver's devices, or NVIDIA's emulated GPUs."""
    if spec.driver == "nvidia":
        product = nvml.PROFILES[spec.gpu_profile].split(" ", 1)[1].split(",")[0]
        return Hardware(driver=spec.driver_name, device_class=spec.driver_name,
                        nodes={n: spec.gpus_per_node for n in spec.all_node_names()},
                        attributes={"productName": product, "driverVersion": nvml.DRIVER_VERSION}, capacity={"memory": "80Gi"})
    return Hardware(
        driver=DRIVER_NAME,
        device_class=DRIVER_NAME,
        nodes={n: spec.gpus_per_node for n in spec.all_node_names()},
        attributes={"model": "LATEST-GPU-MODEL", "driverVersion": "1.0.0"},
        capacity={"memory": "80Gi"},
    )
