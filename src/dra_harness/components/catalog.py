"""What we build, at which versions, from which Go module.

One entry per Go module we wrap; the wrapper module itself lives in
``components/<name>-<version>/`` (go.mod, go.sum, tools.go) so that the exact
dependency graph is reviewed and pinned like any other source file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dra_harness import data
from dra_harness.errors import InputError

#: Kubernetes versions the embedded cluster can run; the first is the default.
#: The control-plane processes that restart or swap in place, in the order an upgrade takes them.
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
KUBERNETES_VERSIONS = ("1.37.2", "1.36.3", "1.35.4", "1.38.0-beta.0")
DEFAULT_KUBERNETES_VERSION = KUBERNETES_VERSIONS[0]
#: Releases whose go.mod asks for a newer Go than the machine's: built with this toolchain, which the go command
#: fetches from the module proxy like a module (once per machine); every other release keeps the machine's Go.
TOOLCHAINS = {"1.38.0-beta.0": "go1.27.3"}
#: Releases a kind node image cannot be built for here, and why (the embedded cluster runs them).
#: Modules a release imports that the module proxy does not serve, replaced by a stand-in of ours (wrapper-relative).
STANDINS = {"1.38.0-beta.0": (("sigs.k8s.io/iptables-wrappers", "../iptables-wrappers-standin"),)}
NO_KIND_NODE = {"1.38.0-beta.0": "its kube-proxy imports sigs.k8s.io/iptables-wrappers v1.0.0, which the module proxy "
                                 "does not serve (403)"}

ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
EXAMPLE_DRIVER_VERSION = "0.4.0"
#: containerd 2.4 still supports cgroup v1 (deprecated since 2.2; RELEASES.md keeps a
#: maintained branch with it until May 2029), which hosts like ours still run.
CONTAINERD_VERSION = "2.4.2"
#: The kind CLI and what a kind node image needs beyond the cluster's own components
#: (newest on the Go proxy, Dec 2026). One CoreDNS serves every Kubernetes version:
#: the node image sets kubeadm's ``dns.imageTag`` to it.
KIND_VERSION = "0.33.0"
HELM_VERSION = "3.22.0"
CRI_TOOLS_VERSION = "1.37.0"
COREDNS_VERSION = "1.14.6"
#: The only Kueue release the Go proxy serves here (Dec 2026); its DRA quota is alpha (``DynamicResourceAllocation`` gate).
KUEUE_VERSION = "0.17.0"


@dataclass(frozen=True)
class Component:
    """A Go module we build binaries from.

    ``binaries`` maps the installed binary name to its main package; ``version_x``
    lists the ``-X`` ldflags that stamp the version into the binary, so that e.g.
    ``/version`` of kube-apiserver reports the real release and not ``v0.0.0``.
    """

    name: str
    version: str
    module: str
    binaries: dict[str, str]
    version_x: tuple[str, ...] = field(default=())
    #: Tool packages the wrapper module also pins though this component does not build
    #: them (the kubelet lives in the Kubernetes wrapper but is built on its own).
    extra_tools: tuple[str, ...] = field(default=())
    #: Wrapper directory when it is another component's (kubelet uses Kubernetes').
    wrapper: str = ""
    #: Built with cgo (NVIDIA's driver binds NVML through it); everything else is static Go.
    cgo: bool = False
    #: ``replace`` lines of the wrapper module (module => a path relative to it, or a served version): for a
    #: dependency the proxy does not serve.
    replaces: tuple[tuple[str, str], ...] = field(default=())
    #: The Go toolchain it is built with (``GOTOOLCHAIN``), where its go.mod needs a newer one; "": the machine's.
    toolchain: str = ""

    @property
    def dirname(self) -> str:
        return f"{self.name}-v{self.version}"

    def module_dir(self) -> Path:
        """The committed wrapper module (go.mod, go.sum) this component is built from, shipped as package data."""
        return data.path("components", self.wrapper or self.dirname)


KUBELET_PACKAGE = "k8s.io/kubernetes/cmd/kubelet"
#: What a kind node image needs of a release beyond the control plane, kubectl and the kubelet.
KIND_NODE_PACKAGES = {"kubeadm": "k8s.io/kubernetes/cmd/kubeadm", "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy"}


def _check_kubernetes(version: str) -> None:
    if version not in KUBERNETES_VERSIONS:
        raise InputError(
            f"Kubernetes {version} is not supported; choose one of {', '.join(KUBERNETES_VERSIONS)}"
        )


def release_parts(version: str) -> tuple[str, str, str]:
    """``1.38.0-beta.0`` -> ("1", "38", "0-beta.0"): major, minor and the rest (a patch, with any pre-release)."""
    major, minor, rest = version.split(".", 2)
    return major, minor, rest


def _kubernetes_stamps(version: str) -> tuple[str, ...]:
    major, minor, _ = release_parts(version)
    stamps: list[str] = []
    # Both packages carry a copy of the version: component-base for /version and
    # metrics, client-go for the user agent.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps += [
            f"{pkg}.gitVersion=v{version}",
            f"{pkg}.gitMajor={major}",
            f"{pkg}.gitMinor={minor}",
            f"{pkg}.gitTreeState=clean",
            # No git checkout exists; a fixed, recognisable commit keeps builds reproducible.
            f"{pkg}.gitCommit={'0' * 40}",
            f"{pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(stamps)


def kubernetes(version: str = DEFAULT_KUBERNETES_VERSION) -> Component:
    _check_kubernetes(version)
    return Component(
        name="kubernetes",
        version=version,
        module="k8s.io/kubernetes",
        binaries={
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
        version_x=_kubernetes_stamps(version),
        toolchain=TOOLCHAINS.get(version, ""),
        replaces=STANDINS.get(version, ()),
        extra_tools=(KUBELET_PACKAGE, *(KIND_NODE_PACKAGES.values() if version not in NO_KIND_NODE else ())),
    )


def kubelet(version: str = DEFAULT_KUBERNETES_VERSION) -> Component:
    """The kubelet of one release, built from the Kubernetes wrapper module.

    A component of its own so that simulated-only clusters (and their caches) never
    wait for it; it shares the Kubernetes wrapper, hence the Go build cache.
    """
    _check_kubernetes(version)
    return Component(
        name="kubelet",
        version=version,
        module="k8s.io/kubernetes",
        binaries={"kubelet": KUBELET_PACKAGE},
        version_x=_kubernetes_stamps(version),
        toolchain=TOOLCHAINS.get(version, ""),
        wrapper=f"kubernetes-v{version}",
    )


def kind_node(version: str = DEFAULT_KUBERNETES_VERSION) -> Component:
    """kubeadm and kube-proxy of one release, for kind node images (built from the Kubernetes wrapper)."""
    _check_kubernetes(version)
    if version in NO_KIND_NODE:
        raise InputError(f"no kind node image for Kubernetes {version}: {NO_KIND_NODE[version]}")
    return Component(
        name="kind-node",
        version=version,
        module="k8s.io/kubernetes",
        binaries=dict(KIND_NODE_PACKAGES),
        version_x=_kubernetes_stamps(version),
        toolchain=TOOLCHAINS.get(version, ""),
        wrapper=f"kubernetes-v{version}",
    )


ETCD = Component(
    name="etcd",
    version=ETCD_VERSION,
    module="go.etcd.io/etcd/server/v3",
    binaries={"etcd": "go.etcd.io/etcd/server/v3"},
)

KWOK = Component(
    name="kwok",
    version=KWOK_VERSION,
    module="sigs.k8s.io/kwok",
    binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
)

#: Example-driver releases we build: the one clusters run, and the one before it (driver rolls and downgrades).
EXAMPLE_DRIVER_VERSIONS = (EXAMPLE_DRIVER_VERSION, "0.3.0")


def example_driver(version: str = EXAMPLE_DRIVER_VERSION) -> Component:
    if version not in EXAMPLE_DRIVER_VERSIONS:
        raise InputError(f"example driver {version} is not built here; choose one of {', '.join(EXAMPLE_DRIVER_VERSIONS)}")
    return Component(
        name="dra-example-driver",
        version=version,
        module="sigs.k8s.io/dra-example-driver",
        binaries={"dra-example-kubeletplugin": "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin",
                  "dra-example-webhook": "sigs.k8s.io/dra-example-driver/cmd/dra-example-webhook"},
        version_x=(f"main.version=v{version}",),
    )


EXAMPLE_DRIVER = example_driver()

#: NVIDIA's DRA driver releases the Go proxy serves (Dec 2026): the one clusters run, and the one before it (rolls).
NVIDIA_DRIVER_VERSIONS = ("0.5.0", "0.4.1")
NVIDIA_DRIVER_MODULE = "sigs.k8s.io/dra-driver-nvidia-gpu"


def nvidia_driver(version: str = NVIDIA_DRIVER_VERSIONS[0]) -> Component:
    """NVIDIA's GPU kubelet plugin, its webhook and CDI hook (the ComputeDomain half is not built: no NVLink fabric here)."""
    if version not in NVIDIA_DRIVER_VERSIONS:
        raise InputError(f"NVIDIA DRA driver {version} is not built here; choose one of {', '.join(NVIDIA_DRIVER_VERSIONS)}")
    return Component(
        name="dra-driver-nvidia-gpu",
        version=version,
        module=NVIDIA_DRIVER_MODULE,
        # The CDI hook is NVIDIA's container toolkit's, at the release the driver's module pins: its image ships
        # it, and the CDI specs the plugin writes name it for the runtime (symlinks, ldcache) at container start.
        binaries={"gpu-kubelet-plugin": f"{NVIDIA_DRIVER_MODULE}/cmd/gpu-kubelet-plugin",
                  "webhook": f"{NVIDIA_DRIVER_MODULE}/cmd/webhook",
                  "nvidia-cdi-hook": "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"},
        version_x=(f"{NVIDIA_DRIVER_MODULE}/internal/info.version=v{version}",),
        cgo=True,
        # v0.5.0 imports NVIDIA's fabric manager bindings, which the proxy does not serve; they are opened only
        # on a host with an NVSwitch fabric, so a stand-in that answers "no library" changes nothing here.
        # It also pins k8s.io/kubernetes v1.37.0-rc.0, which the proxy does not serve either: the release of that
        # minor it does serve stands in (its staging modules stay at the driver's own pins).
        replaces=(("github.com/NVIDIA/go-nvfm", "../go-nvfm-standin"),
                  ("k8s.io/kubernetes", "k8s.io/kubernetes v1.37.2")) if version == "0.5.0" else (),
    )


CONTAINERD = Component(
    name="containerd",
    version=CONTAINERD_VERSION,
    module="github.com/containerd/containerd/v2",
    binaries={
        "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
        "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
    },
    version_x=(f"github.com/containerd/containerd/v2/version.Version=v{CONTAINERD_VERSION}",),
)


KIND = Component(
    name="kind",
    version=KIND_VERSION,
    module="sigs.k8s.io/kind",
    binaries={"kind": "sigs.k8s.io/kind"},
)

HELM = Component(
    name="helm",
    version=HELM_VERSION,
    module="helm.sh/helm/v3",
    binaries={"helm": "helm.sh/helm/v3/cmd/helm"},
    version_x=(f"helm.sh/helm/v3/internal/version.version=v{HELM_VERSION}",),
)

CRI_TOOLS = Component(
    name="cri-tools",
    version=CRI_TOOLS_VERSION,
    module="sigs.k8s.io/cri-tools",
    binaries={"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
    version_x=(f"sigs.k8s.io/cri-tools/pkg/version.Version=v{CRI_TOOLS_VERSION}",),
)

COREDNS = Component(
    name="coredns",
    version=COREDNS_VERSION,
    module="github.com/coredns/coredns",
    binaries={"coredns": "github.com/coredns/coredns"},
)


KUEUE = Component(
    name="kueue",
    version=KUEUE_VERSION,
    module="sigs.k8s.io/kueue",
    binaries={"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
    version_x=(f"sigs.k8s.io/kueue/pkg/version.GitVersion=v{KUEUE_VERSION}",),
)


def for_cluster(k8s_version: str = DEFAULT_KUBERNETES_VERSION, real_nodes: bool = False,
                driver_version: str = EXAMPLE_DRIVER_VERSION) -> list[Component]:
    """Everything the embedded cluster runs, for one Kubernetes version (and example-driver release)."""
    comps = [kubernetes(k8s_version), ETCD, KWOK, example_driver(driver_version)]
    return comps + ([kubelet(k8s_version), CONTAINERD] if real_nodes else [])


def all_components() -> list[Component]:
    """Every wrapper module (the kubelet shares the Kubernetes wrappers)."""
    drivers = [example_driver(v) for v in EXAMPLE_DRIVER_VERSIONS] + [nvidia_driver(v) for v in NVIDIA_DRIVER_VERSIONS]
    return [kubernetes(v) for v in KUBERNETES_VERSIONS] + [ETCD, KWOK, *drivers, CONTAINERD, KIND, HELM, CRI_TOOLS, COREDNS, KUEUE]

