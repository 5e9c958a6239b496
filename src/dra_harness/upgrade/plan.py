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
from dra_harness.components.catalog import CONTROL_PLANE


#: A driver rolled as a DaemonSet's image, not swapped as a process: ``driver-daemonset-<node>``.
DAEMONSET_STEP = "driver-daemonset-"


@dataclass(frozen=True)
class Step:
    #: The process swapped (``kube-apiserver``, ``kubelet-real-node-0``, ``driver-gpu-node-1``), or the
    #: driver DaemonSet rolled on a node (``driver-daemonset-real-node-0``).
    process: str
    #: The binary it runs (a key of the build's binaries).
    binary: str
    #: The release it runs after the step (Kubernetes; the example driver's own for a driver).
    version: str

    @property
    def daemonset_node(self) -> str | None:
        """The node whose driver DaemonSet this step rolls (by its image), or None for a process swap."""
        return self.process.removeprefix(DAEMONSET_STEP) if self.process.startswith(DAEMONSET_STEP) else None

    @property
    def kind(self) -> str:
        """``control-plane``, ``kubelet`` or ``driver``."""
        if self.process in CONTROL_PLANE:
            return "control-plane"
        return self.process.split("-", 1)[0]


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def check(from_version: str, to_version: str, driver_from: str, driver_to: str) -> None:
    """Something to do: a Kubernetes upgrade to the next minor, a driver roll between two built releases, or both."""
    for flag, v in (("--driver-from", driver_from), ("--driver-to", driver_to)):
        if v not in catalog.EXAMPLE_DRIVER_VERSIONS:
            raise InputError(f"{flag} {v}: not an example-driver release built here; choose one of "
                             f"{', '.join(catalog.EXAMPLE_DRIVER_VERSIONS)}")
    if from_version == to_version:
        if driver_from == driver_to:
            raise InputError(f"--from {from_version} --to {to_version} with the driver at v{driver_from} throughout: "
                             "nothing to upgrade; give the next minor with --to, or --driver-from and --driver-to")
        check_pair(from_version, from_version, same_ok=True)
    else:
        check_pair(from_version, to_version)


def check_pair(from_version: str, to_version: str, same_ok: bool = False) -> None:
    """Both releases buildable here, and ``to`` exactly one minor after ``from`` (or the same, with ``same_ok``)."""
    for flag, v in (("--from", from_version), ("--to", to_version)):
        if v not in catalog.KUBERNETES_VERSIONS:
            raise InputError(f"{flag} {v}: not a release the embedded cluster runs; choose one of "
                             f"{', '.join(sorted(catalog.KUBERNETES_VERSIONS))}")
    if same_ok and from_version == to_version:
        return
    if _minor(to_version) != _minor(from_version) + 1:
        raise InputError(f"--from {from_version} --to {to_version}: a control plane is upgraded one minor at a time "
                         "(Kubernetes version skew policy); choose adjacent minors")


def steps(from_version: str, to_version: str, kwok_nodes: list[str], real_nodes: list[str],
          driver_to: str = catalog.EXAMPLE_DRIVER_VERSION, back_to: str | None = None,
          pod_nodes: tuple[str, ...] = ()) -> list[Step]:
    """Every swap, in order: control plane and each kubelet (when Kubernetes changes), then each node's
    driver to ``driver_to`` (restarted in place when it is its current release), then, with
    ``back_to``, each node's driver back to that release (a downgrade). On ``pod_nodes`` the driver
    is a DaemonSet's pod, rolled by its image."""
    plan: list[Step] = []
    if to_version != from_version:
        plan += [Step(p, p, to_version) for p in CONTROL_PLANE]
        plan += [Step(f"kubelet-{n}", "kubelet", to_version) for n in real_nodes]
    drivers = [f"{DAEMONSET_STEP if n in pod_nodes else 'driver-'}{n}" for n in (*kwok_nodes, *real_nodes)]
    plan += [Step(d, "dra-example-kubeletplugin", driver_to) for d in drivers]
    if back_to:
        plan += [Step(d, "dra-example-kubeletplugin", back_to) for d in drivers]
    return plan
