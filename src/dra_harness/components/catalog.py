"""What we build, at which versions, from which Go module.

One entry per Go module we wrap; the wrapper module itself lives in
``components/<name>-<version>/`` (go.mod, go.sum, tools.go) so that the exact
dependency graph is reviewed and pinned like any other source file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: Kubernetes versions the embedded cluster can run; the first is the default.
KUBERNETES_VERSIONS = ("1.37.2", "1.36.3", "1.35.4")
DEFAULT_KUBERNETES_VERSION = KUBERNETES_VERSIONS[0]

ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
EXAMPLE_DRIVER_VERSION = "0.4.0"


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

    @property
    def dirname(self) -> str:
        return f"{self.name}-v{self.version}"

    def module_dir(self, repo_root: Path) -> Path:
        return repo_root / "components" / self.dirname


def kubernetes(version: str = DEFAULT_KUBERNETES_VERSION) -> Component:
    if version not in KUBERNETES_VERSIONS:
        raise ValueError(
            f"Kubernetes {version} is not supported; choose one of {', '.join(KUBERNETES_VERSIONS)}"
        )
    major, minor, _ = version.split(".")
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
        version_x=tuple(stamps),
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

EXAMPLE_DRIVER = Component(
    name="dra-example-driver",
    version=EXAMPLE_DRIVER_VERSION,
    module="sigs.k8s.io/dra-example-driver",
    binaries={"dra-example-kubeletplugin": "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"},
    version_x=(f"main.version=v{EXAMPLE_DRIVER_VERSION}",),
)


def for_cluster(k8s_version: str = DEFAULT_KUBERNETES_VERSION) -> list[Component]:
    """Everything the embedded cluster runs, for one Kubernetes version."""
    return [kubernetes(k8s_version), ETCD, KWOK, EXAMPLE_DRIVER]


def all_components() -> list[Component]:
    return [kubernetes(v) for v in KUBERNETES_VERSIONS] + [ETCD, KWOK, EXAMPLE_DRIVER]
