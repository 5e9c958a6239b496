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
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

import yaml

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.providers.hardware import devices_by_node
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.pods import node_ready, node_schedulable
from dra_harness.kube.rest import Kube
from dra_harness.labels import DISRUPTABLE_LABEL, KWOK_ANNOTATION
from dra_harness.lifetime import alive
from dra_harness.providers import driver_configs
from dra_harness.components import emulated_gpus
from dra_harness.components import nvidia_chart
from dra_harness.host import runtime_dirs
from dra_harness.providers.embedded import commands, realcluster
from dra_harness.providers.embedded.ports import take as take_ports
from dra_harness.providers.embedded.etcdstore import EtcdReader
from dra_harness.providers.embedded.pki import APISERVER_HOSTS, ETCD_CA, PKI, Identity
from dra_harness.host.processes import Supervisor, strays
from dra_harness.providers.embedded.state import DEFAULT_NAME, ClusterSpec, ClusterState
from dra_harness.errors import ClusterError
from dra_harness.components.catalog import CONTROL_PLANE
from dra_harness.providers.profiles import EXAMPLE_DRIVER
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)
DRIVER_NAME = EXAMPLE_DRIVER
#: The user the API server is to kubelets (logs, exec); granted system:kubelet-api-admin.
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def clusters_root() -> Path:
    """Where cluster state lives: ``$DRA_HARNESS_STATE``, else ``<cache>/clusters``."""
    override = os.environ.get("DRA_HARNESS_STATE")
    return Path(override) if override else builder.cache_root() / "clusters"


class LocalCluster:
    """One embedded cluster, addressed by name; safe to construct for a cluster that is not up."""

    def __init__(self, name: str = DEFAULT_NAME) -> None:
        self.name = name
        self.state_dir = clusters_root() / name
        self.supervisor = Supervisor(self.state_dir)

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

    def _up(self, spec: ClusterSpec, built: dict, t0: float, timeout: float, say: Callable[[str], None]) -> ClusterState:
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
        self._poll("kube-apiserver serving", deadline, lambda: None if kube.raw("/version") else "no answer")
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
        self._wait_ready(kube, "kube-apiserver", "/readyz", deadline)
        state.timings["apiserver_ready"] = time.monotonic() - t0
        if spec.real_nodes:
            realcluster.start_kubelets(self, state, pki, say)

        say("waiting for nodes Ready and ResourceSlices")
        self._wait_nodes_ready(kube, spec, deadline)
        state.timings["nodes_ready"] = time.monotonic() - t0
        self._wait_slices(kube, spec, deadline)
        state.timings["slices_ready"] = time.monotonic() - t0
        self._wait_healthy("kube-scheduler", deadline)
        state.timings["up"] = time.monotonic() - t0
        self._save(state)
        return state

    def _paths(self) -> commands.Paths:
        return commands.Paths(self.state_dir, self.kubeconfig, PKI(self.state_dir / "pki"))

    def _start_control_plane_component(self, name: str, st: ClusterState) -> None:
        paths = self._paths()
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

    def driver_dirs(self, node: str) -> dict[str, Path]:
        """The plugin's registrar, plugin and CDI dirs: private ones on a KWOK node, the
        kubelet's and containerd's own on a real node."""
        if node.startswith("real-node-"):
            return realcluster.node(self, node).driver_dirs
        base = self.runtime_dir / node
        return {"registrar": base / "plugins_registry", "plugins": base / "plugins", "cdi": base / "cdi"}

    def start_driver(self, node: str) -> None:
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        if node not in st.spec.all_node_names():
            raise ClusterError(f"node {node!r} is not a node of cluster {self.name!r}")
        if node in st.driver_pods:
            raise ClusterError(f"the driver on {node} is a DaemonSet's pod: its kubelet starts it, not us")
        dirs = self.driver_dirs(node)
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        if node in st.nvidia:  # the emulated library finds the node's device nodes there (containers: their /dev)
            self.supervisor.start(f"driver-{node}", commands.nvidia_plugin(st, self._paths(), node, dirs),
                                  env={"DRA_HARNESS_NVML_DEV_ROOT": str(Path(st.nvidia[node]["root"]) / "dev")})
        else:
            self.supervisor.start(f"driver-{node}", commands.driver(st, self._paths(), node, dirs, DRIVER_NAME))

    def configure_driver(self, node: str, config: str) -> None:
        """Restart ``node``'s plugin in ``config`` (``default`` to go back). The plugin reconciles its
        own driver's slices; when the configuration changes the driver name (another device profile),
        nothing would remove the old driver's slices on a KWOK node, so they are deleted here."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        wanted = driver_configs.by_name(config)
        if config != "default" and commands.release(st.driver_version_of(node)) < (0, 4, 0):
            raise ClusterError(f"driver configuration {config!r} needs the example driver v0.4.0 or later; "
                               f"{node} runs v{st.driver_version_of(node)}")
        if node in st.driver_pods:
            raise ClusterError(f"the driver on {node} is a DaemonSet's pod: its configuration is the DaemonSet's")
        if node in st.nvidia:
            raise ClusterError(f"{node} runs NVIDIA's driver: the example driver's configurations do not apply to it")
        before = driver_configs.by_name(st.driver_configs.get(node, "default"))
        self.stop_driver(node)
        st = self.state() or st
        if config == "default":
            st.driver_configs.pop(node, None)
        else:
            st.driver_configs[node] = config
        self._save(st)
        if before.driver != wanted.driver:
            kube = self.kube()
            for s in kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={before.driver},spec.nodeName={node}"):
                kube.delete(rest.RESOURCE_SLICES, s["metadata"]["name"])
        self.start_driver(node)

    def stop_driver(self, node: str, kill: bool = False) -> None:
        """Stop a node's driver: SIGTERM with a grace period, or SIGKILL at once."""
        self.supervisor.stop(f"driver-{node}", grace=0 if kill else 10, sig=signal.SIGKILL if kill else signal.SIGTERM)

    def record_swap(self, process: str, entry: dict[str, str]) -> None:
        """Remember that ``process`` now runs another release (``ClusterState.swapped``): a driver
        DaemonSet rolled by its image, which :meth:`swap` does not do."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        st.swapped[process] = entry
        self._save(st)

    def record_nvidia(self, node: str, entry: dict[str, str] | None) -> None:
        """Remember that ``node``'s driver is NVIDIA's plugin (``entry``, as ``ClusterState.nvidia``), or no longer."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        if entry is None:
            st.nvidia.pop(node, None)
        else:
            st.nvidia[node] = entry
        self._save(st)

    def hand_driver_to_pod(self, node: str) -> None:
        """Stop ``node``'s driver process for good: a DaemonSet's pod publishes its devices from now on."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        self.stop_driver(node)
        if node not in st.driver_pods:
            st.driver_pods.append(node)
            self._save(st)

    def record_driver_config(self, node: str, config: str) -> None:
        """Remember that ``node``'s driver now runs in ``config`` (a DaemonSet's pod reconfigured by its template)."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        if config == "default":
            st.driver_configs.pop(node, None)
        else:
            st.driver_configs[node] = config
        self._save(st)

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
                self._wait_ready(self.kube(), process, "/readyz", deadline)
            else:
                self._wait_healthy(process, deadline)
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

    # -- readiness ---------------------------------------------------------------
    def _check_alive(self) -> None:
        for tracked in self.supervisor.tracked():
            if tracked.name == "watchdog":
                continue
            if not tracked.alive():
                raise ClusterError(
                    f"{tracked.name} exited during start-up; last log lines:\n{self.supervisor.log_tail(tracked.name)}"
                )

    def _poll(self, what: str, deadline: float, probe: Callable[[], str | None]) -> None:
        """Call ``probe`` until it returns None; its last answer explains a timeout. A process
        that exits meanwhile ends the wait at once (with its log's tail)."""

        def attempt() -> None:
            self._check_alive()
            try:
                answer = probe()
            except (rest.ApiError, rest.Unreachable) as e:  # a component still starting
                answer = str(e)
            if answer is not None:
                raise NotYet(answer)

        try:
            until(deadline, 0.1, log, what)(attempt)
        except NotYet as last:
            raise ClusterError(f"timed out waiting for {what}: {last}") from None

    def _wait_ready(self, kube: Kube, what: str, path: str, deadline: float) -> None:
        self._poll(what, deadline, lambda: None if kube.raw(path).strip() == "ok" else "not ok")

    def _wait_nodes_ready(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
        """Until every node is Ready and rid of the not-ready taint a new node is created with: the node
        lifecycle controller lifts it some seconds after Ready, and a pod placed before that is Unschedulable
        ("untolerated taint"), which a check taking the first verdict would read as the cluster's answer."""
        def probe() -> str | None:
            nodes = kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true")
            ready = [n["metadata"]["name"] for n in nodes if node_ready(n)]
            if missing := sorted(set(spec.all_node_names()) - set(ready)):
                return f"not Ready: {', '.join(missing)}"
            tainted = sorted(n["metadata"]["name"] for n in nodes if not node_schedulable(n))
            return f"still carrying the node controller's taints: {', '.join(tainted)}" if tainted else None

        self._poll("nodes Ready and untainted", deadline, probe)

    def _wait_slices(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
        def probe() -> str | None:
            slices = kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={spec.driver_name}")
            counts = {node: len(devices) for node, devices in devices_by_node(slices, spec.driver_name).items()}
            wrong = {n: counts.get(n, 0) for n in spec.all_node_names() if counts.get(n, 0) != spec.gpus_per_node}
            if wrong:
                return "devices per node " + ", ".join(f"{n}={c}" for n, c in sorted(wrong.items()))
            return None

        self._poll(f"{spec.gpus_per_node} devices in every node's ResourceSlices", deadline, probe)

    def _wait_healthy(self, component: str, deadline: float) -> None:
        def probe() -> str | None:
            try:
                return None if self._component_get(component, "/healthz").strip() == "ok" else "not ok"
            except OSError as e:
                return f"{component} healthz: {e}"

        self._poll(f"{component} healthy", deadline, probe)

    _PORTS: ClassVar[dict[str, str]] = {"kube-apiserver": "apiserver", "kube-controller-manager": "controller_manager", "kube-scheduler": "scheduler"}

    def _component_get(self, component: str, path: str) -> str:
        """GET a control-plane component's own endpoint as the cluster admin."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        ctx = ssl.create_default_context()
        # kube-controller-manager and kube-scheduler serve self-signed certificates.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        pki = self.state_dir / "pki"
        ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        url = f"https://127.0.0.1:{st.ports[self._PORTS[component]]}{path}"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            return r.read().decode()

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
        return self._component_get(component, "/metrics")

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

    def status(self) -> dict:
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
            "drivers": _drivers(st) if st else {},
            "healthy": bool(procs) and all(v == "running" for v in procs.values()),
        }

    def pids(self) -> list[int]:
        """Live processes of the cluster: tracked ones, and any naming its state or runtime dirs (shims)."""
        found = [t.pid for t in self.supervisor.tracked() if t.alive()] + strays(self.state_dir)
        for d in self.runtime_dirs():
            found += strays(d)
        return sorted(set(found))


def _drivers(st: ClusterState) -> dict[str, str]:
    """Each node's driver as ``cluster status`` shows it: the release, its configuration, and where it runs."""
    out = {}
    for node in st.spec.all_node_names():
        if node in st.nvidia:
            out[node] = f"NVIDIA {st.nvidia[node].get('version', '')} on emulated {st.nvidia[node].get('profile', '')} GPUs"
            continue
        form = "its DaemonSet's pod" if node in st.driver_pods else "a process"
        out[node] = f"example v{st.driver_version_of(node)}, configuration {st.driver_configs.get(node, 'default')}, as {form}"
    return out


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
