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

and, because unix socket paths are limited to 107 bytes, a short
``$TMPDIR/dra-harness-<hash>/<node>/`` with each driver plugin's private registrar,
plugin and CDI directories (also removed by ``down``).

Everything listens on 127.0.0.1 only, on ports picked free at start.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from ..components import build as builder
from ..components import catalog
from ..inventory import devices_by_node
from ..kube import rest
from ..kube.client import connect
from ..kube.rest import Kube
from ..labels import DISRUPTABLE_LABEL
from . import gates
from .pki import PKI
from .processes import Supervisor, strays

DEFAULT_NAME = "dra-harness"
DRIVER_NAME = "gpu.example.com"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
STAGES = Path(__file__).with_name("kwok-stages.yaml")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or is not in the expected state."""


def clusters_root() -> Path:
    """Where cluster state lives: ``$DRA_HARNESS_STATE``, else ``<cache>/clusters``."""
    override = os.environ.get("DRA_HARNESS_STATE")
    return Path(override) if override else builder.cache_root() / "clusters"


@dataclass
class ClusterSpec:
    name: str = DEFAULT_NAME
    nodes: int = 4
    gpus_per_node: int = 8
    k8s_version: str = catalog.DEFAULT_KUBERNETES_VERSION
    #: pid whose death tears the cluster down (a test run); None for `cluster up`.
    owner_pid: int | None = None

    def node_names(self) -> list[str]:
        return [f"gpu-node-{i}" for i in range(self.nodes)]


@dataclass
class ClusterState:
    spec: ClusterSpec
    ports: dict[str, int]
    binaries: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"


def _free_ports(names: list[str]) -> dict[str, int]:
    socks, ports = [], {}
    try:
        for name in names:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports[name] = s.getsockname()[1]
    finally:
        for s in socks:
            s.close()
    return ports


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
        built = builder.build_all(catalog.for_cluster(spec.k8s_version), quiet=True)
        t0 = time.monotonic()
        self.state_dir.mkdir(parents=True)
        try:
            return self._up(spec, built, t0, timeout, say)
        except BaseException:
            self.down()
            raise

    def _up(self, spec: ClusterSpec, built: dict, t0: float, timeout: float, say: Callable[[str], None]) -> ClusterState:
        bins = {name: str(b.binary(name)) for b in built.values() for name in b.component.binaries}
        ports = _free_ports(["etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok"])
        state = ClusterState(spec=spec, ports=ports, binaries=bins)
        self._save(state)
        if spec.owner_pid:
            self._start_watchdog(spec.owner_pid)

        say("issuing certificates")
        pki = PKI(self.state_dir / "pki")
        pki.create()
        server_id = pki.issue("apiserver", "kube-apiserver", server=True)
        admin = pki.issue("admin", "dra-harness-admin", ("system:masters",))
        pki.kubeconfig(self.kubeconfig, state.server, admin, cluster=self.name, user="admin")
        deadline = time.monotonic() + timeout

        say("starting etcd and kube-apiserver")
        self._start_etcd(state)
        self._start_apiserver(state, pki, server_id)
        kube = self.kube()
        self._wait_ready(kube, "kube-apiserver", "/readyz", deadline)
        state.timings["apiserver_ready"] = time.monotonic() - t0

        say("starting controller-manager, scheduler and kwok")
        self._start_controller_manager(state, pki)
        self._start_scheduler(state)
        self._start_kwok(state)
        self._create_nodes(kube, spec)
        self._create_device_class(kube)
        say(f"starting {spec.nodes} example-driver plugins")
        for node in spec.node_names():
            self.start_driver(node)

        say("waiting for nodes Ready and ResourceSlices")
        self._wait_nodes_ready(kube, spec, deadline)
        state.timings["nodes_ready"] = time.monotonic() - t0
        self._wait_slices(kube, spec, deadline)
        state.timings["slices_ready"] = time.monotonic() - t0
        self._wait_scheduler(kube, deadline)
        state.timings["up"] = time.monotonic() - t0
        self._save(state)
        return state

    def _start(self, name: str, argv: list[str]) -> None:
        self.supervisor.start(name, argv)

    def _start_etcd(self, st: ClusterState) -> None:
        c, p = st.ports["etcd"], st.ports["etcd_peer"]
        self._start("etcd", [
            st.binaries["etcd"],
            "--name=node0",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{c}",
            f"--advertise-client-urls=http://127.0.0.1:{c}",
            f"--listen-peer-urls=http://127.0.0.1:{p}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p}",
            f"--initial-cluster=node0=http://127.0.0.1:{p}",
            "--listen-metrics-urls=",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=4294967296",
            # A test cluster that is thrown away does not need durable writes.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ])

    def _start_apiserver(self, st: ClusterState, pki: PKI, serving) -> None:
        v = st.spec.k8s_version
        argv = [
            st.binaries["kube-apiserver"],
            f"--etcd-servers=http://127.0.0.1:{st.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={st.ports['apiserver']}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,"
            "Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota,NodeRestriction",
            "--storage-media-type=application/vnd.kubernetes.protobuf",
            # No kube-proxy or real endpoints: the kubernetes Service needs no reconciler.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--feature-gates={gates.feature_gates_flag(v)}",
        ]
        runtime_config = gates.runtime_config_flag(v)
        if runtime_config:
            argv.append(f"--runtime-config={runtime_config}")
        self._start("kube-apiserver", argv)

    def _component_kubeconfig_args(self) -> list[str]:
        k = str(self.kubeconfig)
        return [f"--kubeconfig={k}", f"--authentication-kubeconfig={k}", f"--authorization-kubeconfig={k}"]

    def _start_controller_manager(self, st: ClusterState, pki: PKI) -> None:
        self._start("kube-controller-manager", [
            st.binaries["kube-controller-manager"],
            *self._component_kubeconfig_args(),
            "--bind-address=127.0.0.1",
            f"--secure-port={st.ports['controller_manager']}",
            "--leader-elect=false",
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            "--use-service-account-credentials=false",
            # KWOK renews node leases; 40 s is what kwokctl uses.
            "--node-monitor-grace-period=40s",
            f"--feature-gates={gates.feature_gates_flag(st.spec.k8s_version)}",
        ])

    def _start_scheduler(self, st: ClusterState) -> None:
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 100, "burst": 200},
            "leaderElection": {"leaderElect": False},
        }
        path = self.state_dir / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._start("kube-scheduler", [
            st.binaries["kube-scheduler"],
            f"--config={path}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={st.ports['scheduler']}",
            f"--feature-gates={gates.feature_gates_flag(st.spec.k8s_version)}",
        ])

    def _start_kwok(self, st: ClusterState) -> None:
        self._start("kwok", [
            st.binaries["kwok"],
            f"--kubeconfig={self.kubeconfig}",
            f"--config={STAGES}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=127.0.0.1",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{st.ports['kwok']}",
        ])

    # -- provider actions --------------------------------------------------------
    @property
    def runtime_dir(self) -> Path:
        """Short per-cluster directory for unix sockets (whose paths may not exceed 107 bytes)."""
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"dra-harness-{digest}"

    def driver_dirs(self, node: str) -> dict[str, Path]:
        base = self.runtime_dir / node
        return {"registrar": base / "plugins_registry", "plugins": base / "plugins", "cdi": base / "cdi"}

    def start_driver(self, node: str) -> None:
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        if node not in st.spec.node_names():
            raise ClusterError(f"node {node!r} is not a node of cluster {self.name!r}")
        dirs = self.driver_dirs(node)
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        self.supervisor.start(f"driver-{node}", [
            st.binaries["dra-example-kubeletplugin"],
            f"--node-name={node}",
            f"--kubeconfig={self.kubeconfig}",
            f"--num-devices={st.spec.gpus_per_node}",
            f"--cdi-root={dirs['cdi']}",
            f"--kubelet-registrar-directory-path={dirs['registrar']}",
            f"--kubelet-plugins-directory-path={dirs['plugins']}",
            "--healthcheck-port=-1",
            "--metrics-port=-1",
            f"--driver-name={DRIVER_NAME}",
        ])

    def stop_driver(self, node: str, kill: bool = False) -> None:
        """Stop a node's driver: SIGTERM with a grace period, or SIGKILL at once."""
        self.supervisor.stop(f"driver-{node}", grace=0 if kill else 10, sig=signal.SIGKILL if kill else signal.SIGTERM)

    def restart_component(self, name: str) -> None:
        """Restart kube-scheduler or kube-controller-manager with the same flags."""
        st = self.state()
        if st is None:
            raise ClusterError(f"cluster {self.name!r} is not up")
        starters = {
            "kube-scheduler": lambda: self._start_scheduler(st),
            "kube-controller-manager": lambda: self._start_controller_manager(st, PKI(self.state_dir / "pki")),
        }
        if name not in starters:
            raise ClusterError(f"cannot restart {name!r}; choose one of {', '.join(starters)}")
        self.supervisor.stop(name)
        starters[name]()

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

    def _create_device_class(self, kube: Kube) -> None:
        # What the example driver's Helm chart installs: one class named after the driver.
        kube.create(rest.DEVICE_CLASSES, {
            "metadata": {"name": DRIVER_NAME},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER_NAME}'"}}]},
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
        """Call ``probe`` until it returns None; its last answer explains a timeout."""
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                answer = probe()
            except (rest.ApiError, rest.Unreachable) as e:
                answer = str(e)
            if answer is None:
                return
            last = answer
            time.sleep(0.1)
        raise ClusterError(f"timed out waiting for {what}: {last}")

    def _wait_ready(self, kube: Kube, what: str, path: str, deadline: float) -> None:
        self._poll(what, deadline, lambda: None if kube.raw(path).strip() == "ok" else "not ok")

    def _wait_nodes_ready(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
        def probe() -> str | None:
            nodes = kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true")
            ready = [n["metadata"]["name"] for n in nodes if _node_ready(n)]
            missing = sorted(set(spec.node_names()) - set(ready))
            return f"not Ready: {', '.join(missing)}" if missing else None

        self._poll("nodes Ready", deadline, probe)

    def _wait_slices(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
        def probe() -> str | None:
            slices = kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER_NAME}")
            counts = {node: len(devices) for node, devices in devices_by_node(slices, DRIVER_NAME).items()}
            wrong = {n: counts.get(n, 0) for n in spec.node_names() if counts.get(n, 0) != spec.gpus_per_node}
            if wrong:
                return "devices per node " + ", ".join(f"{n}={c}" for n, c in sorted(wrong.items()))
            return None

        self._poll(f"{spec.gpus_per_node} devices in every node's ResourceSlices", deadline, probe)

    def _wait_scheduler(self, kube: Kube, deadline: float) -> None:
        def probe() -> str | None:
            try:
                return None if self._component_get("kube-scheduler", "/healthz").strip() == "ok" else "not ok"
            except OSError as e:
                return f"kube-scheduler healthz: {e}"

        self._poll("kube-scheduler healthy", deadline, probe)

    _PORTS = {"kube-apiserver": "apiserver", "kube-controller-manager": "controller_manager", "kube-scheduler": "scheduler"}

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

    def metrics(self, component: str) -> str:
        """Prometheus text of a control-plane component (``kubernetes_feature_enabled`` etc.)."""
        return self._component_get(component, "/metrics")

    # -- watchdog ----------------------------------------------------------------
    def _start_watchdog(self, owner: int) -> None:
        self.supervisor.start("watchdog", [
            sys.executable, "-m", "dra_harness.local.watchdog", str(owner), self.name, str(self.state_dir),
        ])

    # -- down / status -------------------------------------------------------------
    def down(self) -> None:
        """Stop every process (drivers first, etcd last) and remove the state and socket directories."""
        if not self.state_dir.exists():
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            return
        names = [t.name for t in self.supervisor.tracked()]
        order = [n for n in names if n.startswith("driver-")] + [
            "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd",
        ]
        self.supervisor.stop_all(order=order, grace=5.0)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
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
            "gpus_per_node": st.spec.gpus_per_node if st else None,
            "server": st.server if st else None,
            "processes": procs,
            "healthy": bool(procs) and all(v == "running" for v in procs.values()),
        }

    def pids(self) -> list[int]:
        return [t.pid for t in self.supervisor.tracked() if t.alive()] + strays(self.state_dir)


def _node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
    )


def all_clusters() -> list[LocalCluster]:
    root = clusters_root()
    if not root.is_dir():
        return []
    return [LocalCluster(p.name) for p in sorted(root.iterdir()) if p.is_dir()]


def owner_alive(cluster: LocalCluster) -> bool:
    st = cluster.state()
    if st is None or st.spec.owner_pid is None:
        return True
    try:
        os.kill(st.spec.owner_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
