"""A real node beside the KWOK ones: containerd 2 (CDI on), runc, bridge CNI and a kubelet.

Why: on simulated nodes nothing runs in a container, so what a container actually
sees (``GPU_DEVICE_*`` injected through CDI by the example driver) and what happens
to running containers when a driver restarts or a node drains cannot be observed.
A real node is the same shape as a kind node.

Everything of one node lives in the cluster's private runtime directory (``runtime_dirs``:
``/tmp/drh-<random>``, mode 0700, short because of the 107-byte unix-socket limit):
``r<index>/`` containerd's root, state and socket, runc's state, CNI config and IPAM
data, CDI specs, pod logs; ``k<index>/`` the kubelet's root (plugins and
plugins_registry, where the driver registers). Network namespaces are mounted under containerd's state dir
(``netns_mounts_under_state_dir``), pods' cgroups under a cgroup root of the node's
own, so :func:`teardown` can find and remove every trace of the node without
touching anything else on the host.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_harness.providers.embedded.pki import Identity
from dra_harness.errors import ClusterError

CNI_BIN = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
REAL_LABEL = "dra-harness.io/real-node"


class RealNodeError(ClusterError):
    """A real node cannot run here, or did not come up."""


@dataclass(frozen=True)
class RealNode:
    """One real node's names, directories and configuration files (pure; nothing started)."""

    name: str
    runtime_dir: Path  # the cluster's private /tmp/drh-<random>
    cluster_key: str  # short hash of the cluster's state dir: unique host-wide names
    index: int

    # -- directories -----------------------------------------------------------------
    @property
    def base(self) -> Path:
        return self.runtime_dir / f"r{self.index}"

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.base / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.base / "containerd" / "state"

    @property
    def kubelet_root(self) -> Path:
        """As short as ``base``: a DaemonSet plugin's registration socket is
        ``<root>/plugins_registry/<driver>-<pod uid>-reg.sock``, and paths end at 107 bytes."""
        return self.runtime_dir / f"k{self.index}"

    @property
    def host_dirs(self) -> list[Path]:
        """Every directory of the node on the host (removed, with what is mounted below, on down)."""
        return [self.base, self.kubelet_root]

    @property
    def cdi_dir(self) -> Path:
        return self.base / "cdi"

    @property
    def driver_dirs(self) -> dict[str, Path]:
        """Where the driver plugin must put its sockets and CDI specs for this kubelet."""
        return {
            "registrar": self.kubelet_root / "plugins_registry",
            "plugins": self.kubelet_root / "plugins",
            "cdi": self.cdi_dir,
        }

    @property
    def etc(self) -> Path:
        return self.base / "etc"

    @property
    def cgroup_root(self) -> str:
        """The node's own cgroup parent, so its containers never mix with another node's."""
        return f"/dra-harness-{self.cluster_key}-{self.index}"

    @property
    def bridge(self) -> str:
        return f"drah{self.cluster_key[:6]}{self.index}"[:15]

    @property
    def host_link(self) -> str:
        """A port-less bridge holding the node's IP (the kubelet refuses a loopback node IP)."""
        return f"drah{self.cluster_key[:6]}{self.index}n"[:15]

    @property
    def node_ip(self) -> str:
        """A /32 from 198.18.0.0/15 (benchmarking space, never routed to this host from outside)."""
        n = (int(self.cluster_key[:6], 16) % 32768) * 4 + self.index + 1
        return str(ipaddress.ip_address("198.18.0.0") + n)

    @property
    def pod_cidr(self) -> str:
        """A /24 per node out of 10.88.0.0/13, picked by the cluster's hash."""
        n = int(self.cluster_key[:6], 16) % 2000 + self.index
        net = ipaddress.ip_network("10.88.0.0/13")
        return str(list(net.subnets(new_prefix=24))[n % 2048])

    # -- configuration ---------------------------------------------------------------
    def containerd_config(self, pause_image: str) -> str:
        cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
        runc = f"{cri_runtime}.containerd.runtimes.runc"
        lines = [
            "version = 3",
            f'root = "{self.containerd_root}"',
            f'state = "{self.containerd_state}"',
            # Snapshotters that need kernel features or cgo we do not have; NRI wants /var/run/nri.
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
            ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri",'
            ' "io.containerd.snapshotter.v1.blockfile"]',
            "[grpc]",
            f'  address = "{self.socket}"',
            "[ttrpc]",
            f'  address = "{self.socket}.ttrpc"',
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            "[plugins.'io.containerd.internal.v1.opt']",
            f'  path = "{self.base / "opt"}"',
            "[plugins.'io.containerd.grpc.v1.cri']",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            f"[{cri_runtime}]",
            f'  cdi_spec_dirs = ["{self.cdi_dir}"]',
            "  netns_mounts_under_state_dir = true",
            "  tolerate_missing_hugetlb_controller = true",
            # Without CAP_SYS_RESOURCE (as here) a negative oom_score_adj fails runc init.
            "  restrict_oom_score_adj = true",
            "  disable_apparmor = true",
            f"[{cri_runtime}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{runc}]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{runc}.options]",
            f'  BinaryName = "{RUNC}"',
            f'  Root = "{self.base / "runc"}"',
            "  SystemdCgroup = false",
            f"[{cri_runtime}.cni]",
            f'  bin_dirs = ["{CNI_BIN}"]',
            f'  conf_dir = "{self.etc / "cni"}"',
            "[plugins.'io.containerd.cri.v1.images']",
            '  snapshotter = "overlayfs"',
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f'  sandbox = "{pause_image}"',
        ]
        return "\n".join(lines) + "\n"

    def cni_config(self) -> dict:
        return {
            "cniVersion": "1.0.0",
            "name": f"dra-harness-{self.cluster_key}-{self.index}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    # Pods need no way out: no masquerading, no iptables rules left behind.
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr}]],
                        "dataDir": str(self.base / "cni-ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def kubelet_config(self, ca_cert: Path, serving: Identity, port: int, healthz_port: int,
                       feature_gates: dict[str, bool]) -> dict:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The API server reaches the kubelet (logs, exec) at the node's InternalIP, which any
            # local user can reach too: nothing is served there without a client certificate of
            # the cluster CA (or a token), and each request is authorized by the API server.
            "address": self.node_ip,
            "port": port,
            "readOnlyPort": 0,
            # Serving certificate of the cluster CA for the node's IP: the API server verifies it.
            "tlsCertFile": str(serving.cert),
            "tlsPrivateKeyFile": str(serving.key),
            # Plain HTTP, /healthz only, loopback only.
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": True,
            # Kubernetes 1.35+ refuses cgroup v1 unless told otherwise; this host has no v2 controllers.
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "podLogsDir": str(self.base / "pod-logs"),
            "clusterDomain": "cluster.local",
            "resolvConf": "",
            "serializeImagePulls": False,
            # A shared test host: never evict or garbage-collect our imported images.
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%",
                             "nodefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "localStorageCapacityIsolation": False,
            "protectKernelDefaults": False,
            "makeIPTablesUtilChains": False,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "shutdownGracePeriod": "0s",
            "featureGates": feature_gates,
        }

    def write_configs(self, pause_image: str, ca_cert: Path, serving: Identity, port: int, healthz_port: int,
                      feature_gates: dict[str, bool]) -> None:
        for d in (self.etc / "cni", self.cdi_dir, *self.driver_dirs.values(), self.base / "pod-logs"):
            d.mkdir(parents=True, exist_ok=True)
        (self.etc / "containerd.toml").write_text(self.containerd_config(pause_image))
        (self.etc / "cni" / "10-dra-harness.conflist").write_text(json.dumps(self.cni_config(), indent=2))
        (self.etc / "kubelet.yaml").write_text(
            yaml.safe_dump(self.kubelet_config(ca_cert, serving, port, healthz_port, feature_gates))
        )

    def containerd_argv(self, containerd: str) -> list[str]:
        return [containerd, "--config", str(self.etc / "containerd.toml"), "--log-level", "warn"]

    def kubelet_argv(self, kubelet: str, kubeconfig: Path, labels: dict[str, str]) -> list[str]:
        return [
            kubelet,
            f"--config={self.etc / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.base / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
            "--v=1",  # no lower: a driver's start waits for the plugin manager's V(1) registration line (drivers.py)
        ]

    def ctr(self, ctr: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([ctr, "--address", str(self.socket), "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)


def node_key(state_dir: Path) -> str:
    return hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]
