"""The embedded DRA cluster: a real control plane, KWOK nodes and the real example driver.

Layout of one cluster's state directory (``$DRA_HARNESS_STATE/<name>``, by default
``$DRA_HARNESS_CACHE/clusters/<name>``),
all of it removed by ``down``::

    cluster.json      what was started: version, nodes, ports, timings
    kubeconfig        admin kubeconfig (keys referenced by path, never embedded)
    pki/              CA, serving and client certificates, service-account key
    etcd/             etcd data (no fsync: this is a test cluster)
    logs/<proc>.log   one log per process
    pids/<proc>.pid   pid + kernel start time per process

and, because unix socket paths are limited to 107 bytes, a short private
``/tmp/drh-<random>/`` (``runtime_dirs``: mkdtemp, mode 0700, recorded in cluster.json) with
``<node>/`` each driver plugin's registrar, plugin and CDI directories and ``r<i>``,
``k<i>`` each real node's directories and kubelet root (also removed by ``down``).

The control plane listens on 127.0.0.1 only, on ports picked free at start; etcd
requires a client certificate of its own CA. A real node's kubelet listens on its node
IP and requires a client certificate of the cluster CA or a token (tests/integration/test_sockets.py).

Why over 400 lines: the start-up sequence and the core stay together (each step's order matters), and the
façade's one-line delegations to its parts (about 60 lines) live here so that every caller keeps one object.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from dra_harness.components import build as builder
from dra_harness.components import catalog, emulated_gpus, nvidia_chart
from dra_harness.components.catalog import CONTROL_PLANE
from dra_harness.errors import ClusterError
from dra_harness.host import runtime_dirs
from dra_harness.host.processes import Supervisor, strays
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import DISRUPTABLE_LABEL, KWOK_ANNOTATION
from dra_harness.lifetime import alive
from dra_harness.providers.embedded import commands, driver_daemonset, drivers, kueue, realcluster
from dra_harness.providers.embedded.drivers import Drivers
from dra_harness.providers.embedded.etcdstore import EtcdReader
from dra_harness.providers.embedded.pki import APISERVER_HOSTS, ETCD_CA, PKI, Identity
from dra_harness.providers.embedded.ports import take as take_ports
from dra_harness.providers.embedded.readiness import Readiness
from dra_harness.providers.embedded.realnode import RealNode
from dra_harness.providers.local import RunningKueue
from dra_harness.providers.localstate import DEFAULT_NAME, ClusterSpec, ClusterState
from dra_harness.providers.profiles import EXAMPLE_DRIVER

log = logging.getLogger(__name__)
DRIVER_NAME = EXAMPLE_DRIVER
#: The user the API server is to kubelets (logs, exec); granted system:kubelet-api-admin.
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def clusters_root() -> Path:
    """Where cluster state lives: ``$DRA_HARNESS_STATE``, else ``<cache>/clusters``."""
    override = os.environ.get("DRA_HARNESS_STATE")
    return Path(override) if override else builder.cache_root() / "clusters"


class LocalCluster:
    """One embedded cluster, addressed by name; safe to construct for a cluster that is not up.

    A façade (:class:`dra_harness.providers.local.LocalClusterApi` is what others may use of it): it keeps
    the core (paths, the record in ``cluster.json``, API access, the control plane's processes) and hands
    the rest to parts that own it (:mod:`.core` lists them)."""

    def __init__(self, name: str = DEFAULT_NAME) -> None:
        self.name = name
        self.state_dir = clusters_root() / name
        self.supervisor = Supervisor(self.state_dir)
        self.drivers = Drivers(self)
        self.readiness = Readiness(self)

    # -- paths and state -------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    def state(self) -> ClusterState | None:
        try:
            raw = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return ClusterState(spec=ClusterSpec(**raw.pop("spec")), **raw)

    def _save(self, state: ClusterState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)

    def exists(self) -> bool:
        return self.state_dir.exists()

    def kube(self) -> Kube:
        return connect(self.kubeconfig)

    # -- up --------------------------------------------------------------------
    def up(self, spec: ClusterSpec, timeout: float = 120.0, say: Callable[[str], None] = lambda s: None) -> ClusterState:
        """Start everything and return once every node's slices hold ``gpus_per_node`` devices."""
        if self.exists():
            raise ClusterError(f"cluster {self.name!r} already exists at {self.state_dir}; run `dra-harness cluster down` first")
        # Callers that want build progress on screen build first; this only checks the cache then.
        built = builder.build_all(catalog.for_cluster(spec.k8s_version, real_nodes=spec.real_nodes > 0,
                                                      driver_version=spec.driver_version), quiet=True)
        t0 = time.monotonic()
        self.state_dir.mkdir(parents=True)
        log.info("cluster %s: up (Kubernetes v%s, %d simulated + %d real nodes x %d devices) in %s", self.name,
                 spec.k8s_version, spec.nodes, spec.real_nodes, spec.gpus_per_node, self.state_dir)

        def said(step: str) -> None:
            log.info("cluster %s: %s", self.name, step)
            say(step)

        try:
            state = self._up(spec, built, t0, timeout, said)
        except BaseException:
            log.info("cluster %s: start-up failed; taking it down", self.name)
            self.down()
            raise
        log.info("cluster %s: up in %.1fs at %s", self.name, state.timings["up"], state.server)
        return state

    def _up(self, spec: ClusterSpec, built: dict[str, builder.Built], t0: float, timeout: float, say: Callable[[str], None]) -> ClusterState:
        bins = {name: str(b.binary(name)) for b in built.values() for name in b.component.binaries}
        ports = take_ports(["etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok"])
        state = ClusterState(spec=spec, ports=ports, binaries=bins, runtime_dir=str(runtime_dirs.create(self.state_dir)))
        self._save(state)
        if spec.owner_pid:
            self._start_watchdog(spec.owner_pid)

        say("issuing certificates")
        pki = PKI(self.state_dir / "pki")
        admin = _issue_certificates(pki)
        pki.kubeconfig(self.kubeconfig, state.server, admin, cluster=self.name, user="admin")
        deadline = time.monotonic() + timeout

        say("starting etcd and kube-apiserver")
        for component in ("etcd", "kube-apiserver"):
            self._start_control_plane_component(component, state)
        if spec.real_nodes:
            realcluster.boot_containerd(self, state, pki, say)
        kube = self.kube()
        # Serving is enough for what follows: every component uses the admin identity, which RBAC's
        # bootstrap (a post-start hook whose first try waits a second) does not gate. That second
        # is spent starting them; readiness is still awaited before a real kubelet, and before `up` returns.
        self.readiness.poll("kube-apiserver serving", deadline, lambda: None if kube.raw("/version") else "no answer")
        state.timings["apiserver_serving"] = time.monotonic() - t0

        say("starting controller-manager, scheduler and kwok")
        for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._start_control_plane_component(component, state)
        self._create_nodes(kube, spec)
        self._create_device_classes(kube, spec)
        self._grant_kubelet_api(kube)
        if spec.driver == "nvidia":
            say(f"emulating {spec.gpus_per_node} {spec.gpu_profile} GPUs per node")
            self._emulate_gpus(state)
        say(f"starting {spec.nodes} {spec.driver}-driver plugins")
        for node in spec.node_names():
            self.start_driver(node)
        self.readiness.ready(kube, "kube-apiserver", "/readyz", deadline)
        state.timings["apiserver_ready"] = time.monotonic() - t0
        if spec.real_nodes:
            realcluster.start_kubelets(self, state, pki, say)

        say("waiting for nodes Ready and ResourceSlices")
        self.readiness.nodes_ready(kube, spec, deadline)
        state.timings["nodes_ready"] = time.monotonic() - t0
        self.readiness.slices(kube, spec, deadline)
        state.timings["slices_ready"] = time.monotonic() - t0
        self.readiness.healthy("kube-scheduler", deadline)
        state.timings["up"] = time.monotonic() - t0
        self._save(state)
        return state

    def paths(self) -> commands.Paths:
        return commands.Paths(self.state_dir, self.kubeconfig, PKI(self.state_dir / "pki"))

    def _start_control_plane_component(self, name: str, st: ClusterState) -> None:
        paths = self.paths()
        if name == "kube-scheduler":
            config = self.state_dir / "scheduler-config.yaml"
            config.write_text(yaml.safe_dump(commands.scheduler_config(paths)))
        if name == "kube-apiserver" and st.spec.pod_security:
            commands.admission_config_path(paths).write_text(yaml.safe_dump(commands.admission_config(st.spec.pod_security)))
        self.supervisor.start(name, commands.ARGV[name](st, paths))

    # -- provider actions --------------------------------------------------------
    @property
    def runtime_dir(self) -> Path:
        """The cluster's private short directory for unix sockets (whose paths may not exceed 107 bytes)."""
        st = self.state()
        if st is None or not st.runtime_dir:
            raise ClusterError(f"cluster {self.name!r} is not up")
        path = Path(st.runtime_dir)
        runtime_dirs.check_private(path)
        return path

    def runtime_dirs(self) -> list[Path]:
        """Every runtime directory of this cluster: the recorded one and any its marker names
        (a run killed before ``cluster.json`` was written, or after it was removed)."""
        st = self.state()
        recorded = [Path(st.runtime_dir)] if st and st.runtime_dir else []
        return sorted(set(recorded) | set(runtime_dirs.owned_by(self.state_dir)))

    # -- drivers (the part: :mod:`.drivers`) ----------------------------------------
    def driver_dirs(self, node: str) -> dict[str, Path]:
        return self.drivers.dirs(node)

    def start_driver(self, node: str) -> None:
        self.drivers.start(node)

    def configure_driver(self, node: str, config: str) -> None:
        self.drivers.configure(node, config)

    def stop_driver(self, node: str, kill: bool = False) -> None:
        self.drivers.stop(node, kill)

    def hand_driver_to_pod(self, node: str) -> None:
        self.drivers.hand_to_pod(node)

    def record_swap(self, process: str, entry: dict[str, str]) -> None:
        self.drivers.record_swap(process, entry)

    def record_nvidia(self, node: str, entry: dict[str, str] | None) -> None:
        self.drivers.record_nvidia(node, entry)

    def record_driver_config(self, node: str, config: str) -> None:
        self.drivers.record_config(node, config)

    def install_driver_daemonset(self, kube: Kube, node: str, version: str, plugin: str,
                                 strategy: str = "surge") -> list[Obj]:
        """Real node ``node``'s driver handed to a DaemonSet's pod (:func:`.driver_daemonset.install`)."""
        return driver_daemonset.install(self, kube, node, version, plugin, strategy)

    def roll_driver_daemonset(self, kube: Kube, node: str, version: str, plugin: str) -> tuple[float, float]:
        """The DaemonSet rolled to release ``version`` (:func:`.driver_daemonset.roll`)."""
        return driver_daemonset.roll(self, kube, node, version, plugin)

    # -- real nodes (the part: :mod:`.realcluster`) -----------------------------------
    def real_node(self, name: str) -> RealNode:
        return realcluster.node(self, name)

    def reboot(self, node: str, timeout: float = 180) -> float:
        """Real node ``node`` powered off and on (:func:`.realcluster.reboot`); seconds until Ready again."""
        return realcluster.reboot(self, node, timeout)

    # -- Kueue beside it (the part: :mod:`.kueue`) -------------------------------------
    def start_kueue(self, kube: Kube, device_class_mappings: dict[str, list[str]], dra: bool = True) -> kueue.Kueue:
        return kueue.start(self, kube, device_class_mappings, dra)

    def stop_kueue(self, kube: Kube, running: RunningKueue) -> None:
        if not isinstance(running, kueue.Kueue):
            raise ClusterError(f"not a Kueue this cluster started: {running!r}")
        kueue.stop(self, kube, running)

    # -- control-plane components ----------------------------------------------------
    def restart_component(self, name: str, kill: bool = False, down_for: float = 0.0) -> None:
        """Restart a control-plane component with the same flags (SIGKILL with ``kill``),
        leaving it down ``down_for`` seconds: what a control-plane upgrade or crash looks like."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        if name not in CONTROL_PLANE:
            raise ClusterError(f"cannot restart {name!r}; choose one of {', '.join(CONTROL_PLANE)}")
        log.info("cluster %s: restarting %s (%s, down for %.1fs)", self.name, name, "SIGKILL" if kill else "SIGTERM", down_for)
        self.supervisor.stop(name, grace=0 if kill else 5.0, sig=signal.SIGKILL if kill else signal.SIGTERM)
        time.sleep(down_for)
        self._start_control_plane_component(name, st)

    def swap(self, process: str, version: str, binary: str) -> tuple[float, float]:
        """Replace a running process by ``binary`` of release ``version`` (Kubernetes; the example driver's
        own for a driver) in place: same data, ports and flags, that release's feature gates and flags
        (an upgrade or downgrade of one component). Returns the
        seconds the old process took to stop (SIGTERM, as an operator stops it) and from then until the
        new one serves (a kubelet: its node Ready at the new release)."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        swappable = [*CONTROL_PLANE, *(f"kubelet-{n}" for n in st.spec.real_node_names()),
                     *(f"driver-{n}" for n in st.spec.all_node_names() if n not in st.driver_pods and n not in st.nvidia)]
        if process not in swappable:
            raise ClusterError(f"cannot swap {process!r}; choose one of {', '.join(swappable)}")
        log.info("cluster %s: swapping %s for %s (v%s)", self.name, process, binary, version)
        st.swapped[process] = {"version": version, "binary": binary}
        self._save(st)
        started = time.monotonic()
        # SIGTERM, as an operator stops it. A lone API server stops listening at once and then holds its
        # watches open for up to a minute; nothing is served meanwhile, so it gets 5 s before SIGKILL.
        self.supervisor.stop(process, grace=5.0 if process == "kube-apiserver" else 10.0)
        stopped = time.monotonic()
        if process.startswith("kubelet-"):
            return stopped - started, realcluster.start_kubelet(self, st, process.removeprefix("kubelet-"))
        if process.startswith("driver-"):
            self.start_driver(process.removeprefix("driver-"))
        else:
            self._start_control_plane_component(process, st)
            deadline = time.monotonic() + 120
            if process == "kube-apiserver":
                self.readiness.ready(self.kube(), process, "/readyz", deadline)
            else:
                self.readiness.healthy(process, deadline)
        return stopped - started, time.monotonic() - stopped

    # -- objects -----------------------------------------------------------------
    def _create_nodes(self, kube: Kube, spec: ClusterSpec) -> None:
        for node in spec.node_names():
            kube.create(rest.NODES, {
                "metadata": {
                    "name": node,
                    "annotations": {KWOK_ANNOTATION: "fake"},
                    "labels": {
                        "kubernetes.io/hostname": node,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        DISRUPTABLE_LABEL: "true",
                    },
                },
            })

    def _create_device_classes(self, kube: Kube, spec: ClusterSpec) -> None:
        if spec.driver == "nvidia":  # the classes NVIDIA's chart installs, read from the release's module
            for cls in nvidia_chart.chart_device_classes(spec.nvidia_version):
                kube.create(rest.DEVICE_CLASSES, cls)
            return
        # What the example driver's Helm chart installs: one class named after the driver.
        kube.create(rest.DEVICE_CLASSES, {
            "metadata": {"name": DRIVER_NAME},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]},
        })

    def _emulate_gpus(self, state: ClusterState) -> None:
        """Every node's driver root and the record that its driver is NVIDIA's, before any plugin starts."""
        spec = state.spec
        for node in spec.all_node_names():
            root = emulated_gpus.driver_root(self.state_dir / "nvidia" / node, spec.gpu_profile, f"{self.name}-{node}",
                                             gpus=spec.gpus_per_node, char_devices=node in spec.real_node_names())
            state.nvidia[node] = emulated_gpus.entry(spec.nvidia_version, spec.gpu_profile, root)
        self._save(state)

    def _grant_kubelet_api(self, kube: Kube) -> None:
        # Kubelets authorize every request through the API server (Webhook): the API server's own
        # client certificate needs the kubelet API (logs, exec) like kubeadm grants it.
        kube.create(rest.CLUSTER_ROLE_BINDINGS, {
            "metadata": {"name": "dra-harness:kube-apiserver-kubelet-client"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}],
        })

    def etcd(self) -> EtcdReader:
        """Read-only access to the cluster's etcd, as the API server's etcd client."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        pki = PKI(self.state_dir / "pki")
        client = pki.identity(commands.APISERVER_ETCD_CLIENT)
        return EtcdReader(f"https://127.0.0.1:{st.ports['etcd']}", pki.etcd_ca_cert, client.cert, client.key)

    def metrics(self, component: str) -> str:
        """Prometheus text of a control-plane component (``kubernetes_feature_enabled`` etc.)."""
        return self.readiness.component_get(component, "/metrics")

    # -- watchdog ----------------------------------------------------------------
    def _start_watchdog(self, owner: int) -> None:
        self.supervisor.start("watchdog", [
            sys.executable, "-m", "dra_harness.providers.embedded.watchdog", str(owner), self.name, str(self.state_dir),
        ])

    # -- down / status -------------------------------------------------------------
    def down(self) -> None:
        """Stop every process (drivers first, etcd last) and remove the state and socket directories."""
        if self.state_dir.exists():
            log.info("cluster %s: down (removing %s)", self.name, self.state_dir)
        runtime_dirs = self.runtime_dirs()
        for d in runtime_dirs:
            realcluster.teardown(self, d)
        if self.state_dir.exists():
            names = [t.name for t in self.supervisor.tracked()]
            order = [n for n in names if n.startswith("driver-")] + [
                "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd",
            ]
            self.supervisor.stop_all(order=order, grace=5.0)
        for d in runtime_dirs:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        st = self.state()
        procs = {t.name: ("running" if t.alive() else "exited") for t in self.supervisor.tracked()}
        return {
            "name": self.name,
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "k8s_version": st.spec.k8s_version if st else None,
            "nodes": st.spec.nodes if st else None,
            "real_nodes": st.spec.real_nodes if st else None,
            "gpus_per_node": st.spec.gpus_per_node if st else None,
            "server": st.server if st else None,
            "processes": procs,
            "drivers": drivers.describe(st) if st else {},
            "healthy": bool(procs) and all(v == "running" for v in procs.values()),
        }

    def pids(self) -> list[int]:
        """Live processes of the cluster: tracked ones, and any naming its state or runtime dirs (shims)."""
        found = [t.pid for t in self.supervisor.tracked() if t.alive()] + strays(self.state_dir)
        for d in self.runtime_dirs():
            found += strays(d)
        return sorted(set(found))


def _issue_certificates(pki: PKI) -> Identity:
    """The CAs and every control-plane certificate; returns the admin's identity."""
    pki.create()
    pki.issue(commands.APISERVER_SERVING, "kube-apiserver", hosts=APISERVER_HOSTS, client=False)
    # etcd's certificate serves clients and, being its own peer, authenticates to itself.
    pki.issue(commands.ETCD_SERVING, "etcd", hosts=("127.0.0.1", "localhost"), authority=ETCD_CA)
    pki.issue(commands.APISERVER_ETCD_CLIENT, "kube-apiserver-etcd-client", authority=ETCD_CA)
    pki.issue(commands.APISERVER_KUBELET_CLIENT, KUBELET_CLIENT_USER)
    return pki.issue("admin", "dra-harness-admin", ("system:masters",))



def all_clusters() -> list[LocalCluster]:
    """Every cluster with state under :func:`clusters_root`, and any whose state is gone but not its runtime dir."""
    root = clusters_root()
    names = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    return [LocalCluster(n) for n in sorted(names | set(runtime_dirs.orphans(root)))]


def owner_alive(cluster: LocalCluster) -> bool:
    st = cluster.state()
    return st is None or st.spec.owner_pid is None or alive(st.spec.owner_pid)
