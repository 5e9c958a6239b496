"""Command lines of the embedded cluster's processes, as pure functions of its state.

Kept apart from the supervisor so that what each component is told (loopback only,
which ports, which feature gates) reads in one place and is unit-tested.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_harness import data
from dra_harness.labels import KWOK_ANNOTATION
from dra_harness.providers import driver_configs
from dra_harness.components import gates
from dra_harness.providers.embedded.pki import PKI
from dra_harness.providers.localstate import ClusterState

STAGES = data.path("kwok-stages.yaml")


@dataclass(frozen=True)
class Paths:
    state_dir: Path
    kubeconfig: Path
    pki: PKI


#: Certificates the processes present (issued by ``cluster._issue_certificates``).
ETCD_SERVING = "etcd"
APISERVER_ETCD_CLIENT = "apiserver-etcd-client"
APISERVER_SERVING = "apiserver"
APISERVER_KUBELET_CLIENT = "apiserver-kubelet-client"


def etcd(st: ClusterState, paths: Paths) -> list[str]:
    """etcd on loopback, TLS on both listeners, and a client certificate from the etcd CA required
    (the etcd CA signs only etcd and the API server's client: any other local user is refused)."""
    c, p = st.ports["etcd"], st.ports["etcd_peer"]
    serving, ca = paths.pki.identity(ETCD_SERVING), paths.pki.etcd_ca_cert
    return [
        st.binaries["etcd"],
        "--name=node0",
        f"--data-dir={paths.state_dir / 'etcd'}",
        f"--listen-client-urls=https://127.0.0.1:{c}",
        f"--advertise-client-urls=https://127.0.0.1:{c}",
        f"--cert-file={serving.cert}",
        f"--key-file={serving.key}",
        f"--trusted-ca-file={ca}",
        "--client-cert-auth",
        # One member has no peers, but etcd listens on its peer URL all the same.
        f"--listen-peer-urls=https://127.0.0.1:{p}",
        f"--initial-advertise-peer-urls=https://127.0.0.1:{p}",
        f"--initial-cluster=node0=https://127.0.0.1:{p}",
        f"--peer-cert-file={serving.cert}",
        f"--peer-key-file={serving.key}",
        f"--peer-trusted-ca-file={ca}",
        "--peer-client-cert-auth",
        "--listen-metrics-urls=",
        "--auto-compaction-retention=1",
        "--quota-backend-bytes=4294967296",
        # A test cluster that is thrown away does not need durable writes.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver(st: ClusterState, paths: Paths) -> list[str]:
    v, pki = st.version_of("kube-apiserver"), paths.pki
    serving, etcd_client = pki.identity(APISERVER_SERVING), pki.identity(APISERVER_ETCD_CLIENT)
    kubelet_client = pki.identity(APISERVER_KUBELET_CLIENT)
    argv = [
        st.binary_of("kube-apiserver", "kube-apiserver"),
        f"--etcd-servers=https://127.0.0.1:{st.ports['etcd']}",
        f"--etcd-cafile={pki.etcd_ca_cert}",
        f"--etcd-certfile={etcd_client.cert}",
        f"--etcd-keyfile={etcd_client.key}",
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
        # No privileged pods: no suite or driver manifest needs one, and one would be root on the host.
        "--allow-privileged=false",
        # Real nodes' names do not resolve; their InternalIP does (logs, exec).
        "--kubelet-preferred-address-types=InternalIP",
        # Kubelets accept no anonymous request: the API server presents a certificate (granted the
        # kubelet API through RBAC) and checks theirs, issued by the cluster CA for the node's IP.
        f"--kubelet-client-certificate={kubelet_client.cert}",
        f"--kubelet-client-key={kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        f"--feature-gates={gates.feature_gates_flag(v)}",
    ]
    runtime_config = gates.runtime_config_flag(v)
    if runtime_config:
        argv.append(f"--runtime-config={runtime_config}")
    if st.spec.pod_security:
        argv.append(f"--admission-control-config-file={admission_config_path(paths)}")
    return argv


def admission_config_path(paths: Paths) -> Path:
    return paths.state_dir / "admission.yaml"


def admission_config(level: str) -> dict:
    """PodSecurity's cluster-wide default: ``level`` enforced on every namespace that sets none, kube-system exempt
    (as hardened managed clusters ship it)."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{"name": "PodSecurity", "configuration": {
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": level, "enforce-version": "latest", "audit": level, "audit-version": "latest",
                         "warn": level, "warn-version": "latest"},
            "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]},
        }}],
    }


def _kubeconfigs(paths: Paths) -> list[str]:
    k = str(paths.kubeconfig)
    return [f"--kubeconfig={k}", f"--authentication-kubeconfig={k}", f"--authorization-kubeconfig={k}"]


def controller_manager(st: ClusterState, paths: Paths) -> list[str]:
    return [
        st.binary_of("kube-controller-manager", "kube-controller-manager"),
        *_kubeconfigs(paths),
        "--bind-address=127.0.0.1",
        f"--secure-port={st.ports['controller_manager']}",
        "--leader-elect=false",
        f"--root-ca-file={paths.pki.ca_cert}",
        f"--service-account-private-key-file={paths.pki.sa_key}",
        "--use-service-account-credentials=false",
        # The default 20 QPS caps the resourceclaim controller at about 10 pods a second (contention runs).
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        # KWOK renews node leases; 40 s is what kwokctl uses.
        "--node-monitor-grace-period=40s",
        f"--feature-gates={gates.feature_gates_flag(st.version_of('kube-controller-manager'))}",
    ]


def scheduler_config(paths: Paths) -> dict:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(paths.kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        # A retry backs off 1 s whatever the pod's attempts (default: 1 s doubling to 10 s). kube-scheduler takes
        # backed-off pods by backoff expiry (1-s windows) before priority; in virtual time a step is ~0.1 s, so a
        # parked pod always backs off when devices come back, and with 1-10 s a pod with fewer attempts went first
        # where a cluster whose events are minutes apart orders by priority and arrival: docs/contention.md. An idle
        # scheduler takes a backed-off pod at once either way (SchedulerPopFromBackoffQ, on since 1.33); a gang's
        # pods, retried until all fit, bind sooner (the gang check 18 s -> 12 s).
        "podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 1,
    }


def scheduler(st: ClusterState, paths: Paths) -> list[str]:
    return [
        st.binary_of("kube-scheduler", "kube-scheduler"),
        f"--config={paths.state_dir / 'scheduler-config.yaml'}",
        *_kubeconfigs(paths)[1:],
        "--bind-address=127.0.0.1",
        f"--secure-port={st.ports['scheduler']}",
        f"--feature-gates={gates.feature_gates_flag(st.version_of('kube-scheduler'))}",
    ]


def kwok(st: ClusterState, paths: Paths) -> list[str]:
    return [
        st.binaries["kwok"],
        f"--kubeconfig={paths.kubeconfig}",
        f"--config={STAGES}",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--cidr=10.244.0.0/16",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{st.ports['kwok']}",
    ]


def driver(st: ClusterState, paths: Paths, node: str, dirs: dict[str, Path], driver_name: str) -> list[str]:
    """The example driver's kubelet plugin for one node, with private dirs and no listeners,
    in the node's configuration (``ClusterState.driver_configs``)."""
    config = driver_configs.by_name(st.driver_configs.get(node, "default"))
    return [
        st.binary_of(f"driver-{node}", "dra-example-kubeletplugin"),
        f"--node-name={node}",
        f"--kubeconfig={paths.kubeconfig}",
        f"--num-devices={st.spec.gpus_per_node}",
        f"--cdi-root={dirs['cdi']}",
        f"--kubelet-registrar-directory-path={dirs['registrar']}",
        f"--kubelet-plugins-directory-path={dirs['plugins']}",
        "--healthcheck-port=-1",
        # Before v0.4.0 the plugin had no metrics server (and no flag for it).
        *(["--metrics-port=-1"] if release(st.driver_version_of(node)) >= (0, 4, 0) else []),
        # Silent at the default level until a claim is prepared; at 3 it says what it publishes, for failure dumps.
        "--v=3",
        *config.args(driver_name),
    ]


NVIDIA_PLUGIN_GATES = "TimeSlicingSettings=true"


def nvidia_plugin(st: ClusterState, paths: Paths, node: str, dirs: dict[str, Path]) -> list[str]:
    """NVIDIA's GPU kubelet plugin for one node over its emulated driver root (``ClusterState.nvidia``)."""
    nv = st.nvidia[node]
    return [nv["plugin"], f"--node-name={node}", f"--kubeconfig={paths.kubeconfig}",
            f"--nvidia-driver-root={nv['root']}", f"--container-driver-root={nv['root']}", f"--cdi-root={dirs['cdi']}",
            f"--kubelet-plugins-directory-path={dirs['plugins']}",
            f"--kubelet-registrar-directory-path={dirs['registrar']}",
            # The runtime runs the hook on the host at container start (the plugin runs on the host, not in its image).
            f"--nvidia-cdi-hook-path={nv['hook']}",
            # Time-slicing (alpha, off by default) as the chart's featureGates value turns it on: the emulated
            # nvidia-smi records what it applies. MPS stays off: its control daemon needs NVIDIA's image.
            f"--feature-gates={NVIDIA_PLUGIN_GATES}",
            "--image-name=dra-harness/not-pulled", "--healthcheck-port=-1", "-v=3"]


def release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


ARGV: dict[str, Callable[[ClusterState, Paths], list[str]]] = {
    "etcd": etcd,
    "kube-apiserver": apiserver,
    "kube-controller-manager": controller_manager,
    "kube-scheduler": scheduler,
    "kwok": kwok,
}
