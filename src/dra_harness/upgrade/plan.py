"""The order an in-place upgrade takes, as a real cluster's operator would take it.

kube-apiserver first (same etcd, same data), then kube-controller-manager and kube-scheduler,
then each real node's kubelet in place (no drain), then the driver plugin on every node. The
version skew policy allows a control plane one minor ahead of its kubelets, not more, and a
control plane moves one minor at a time, so only adjacent minors are planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_harness.components import catalog
from dra_harness.errors import InputError

CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class Step:
    #: The process swapped (``kube-apiserver``, ``kubelet-real-node-0``, ``driver-gpu-node-1``).
    process: str
    #: The binary it runs (a key of the build's binaries).
    binary: str
    #: The release it runs after the step (Kubernetes; the driver's own for a driver).
    version: str

    @property
    def kind(self) -> str:
        """``control-plane``, ``kubelet`` or ``driver``."""
        if self.process in CONTROL_PLANE:
            return "control-plane"
        return self.process.split("-", 1)[0]


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def check_pair(from_version: str, to_version: str) -> None:
    """Both releases buildable here, and ``to`` exactly one minor after ``from``."""
    for flag, v in (("--from", from_version), ("--to", to_version)):
        if v not in catalog.KUBERNETES_VERSIONS:
            raise InputError(f"{flag} {v}: not a release the embedded cluster runs; choose one of "
                             f"{', '.join(sorted(catalog.KUBERNETES_VERSIONS))}")
    if _minor(to_version) != _minor(from_version) + 1:
        raise InputError(f"--from {from_version} --to {to_version}: a control plane is upgraded one minor at a time "
                         "(Kubernetes version skew policy); choose adjacent minors")


def steps(to_version: str, kwok_nodes: list[str], real_nodes: list[str]) -> list[Step]:
    """Every swap, in order: control plane, each kubelet, then each node's driver (restarted on the new control plane)."""
    plan = [Step(p, p, to_version) for p in CONTROL_PLANE]
    plan += [Step(f"kubelet-{n}", "kubelet", to_version) for n in real_nodes]
    # The driver keeps its release: it is restarted against the upgraded control plane and kubelets.
    plan += [Step(f"driver-{n}", "dra-example-kubeletplugin", catalog.EXAMPLE_DRIVER_VERSION) for n in [*kwok_nodes, *real_nodes]]
    return plan
