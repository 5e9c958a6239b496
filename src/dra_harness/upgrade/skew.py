"""What happens under a version skew Kubernetes does not support: a kubelet newer than its control plane.

The skew policy allows kubelets up to three minors older than the API server, never newer; an
operator who upgrades a node before the control plane is there. Before the upgrade proper (so its
invariants start from a clean snapshot), a real node's kubelet is swapped for the new release,
a new claim's pod is tried on it, the effect on the node's running pods is compared, and the old
kubelet is put back. Whatever happens is a finding: the harness reports, it does not pass or fail
an unsupported configuration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from dra_harness.errors import HarnessError
from dra_harness.kube.rest import Kube
from dra_harness.providers.local import LocalClusterApi
from dra_harness.upgrade import snapshot, workloads


@dataclass
class SkewResult:
    node: str
    kubelet: str
    control_plane: str
    #: Seconds until the node was Ready under the newer kubelet, or why it was not.
    ready_after_s: float | None = None
    not_ready: str = ""
    #: Seconds until a new claim's pod ran on the node, or why it did not.
    pod_after_s: float | None = None
    pod_failed: str = ""
    #: What changed for the node's running pods meanwhile (the snapshot invariants' wording).
    changes: list[str] = field(default_factory=list)

    def finding(self) -> str:
        head = f"unsupported skew, kubelet v{self.kubelet} under a v{self.control_plane} control plane on {self.node}: "
        if self.ready_after_s is None:
            return head + f"the node did not become Ready ({self.not_ready[:240]})"
        text = head + f"node Ready in {self.ready_after_s:.1f} s; "
        text += (f"a new claim's pod ran in {self.pod_after_s:.1f} s" if self.pod_after_s is not None
                 else f"a new claim's pod did not run: {self.pod_failed[:240]}")
        return text + ("; " + "; ".join(self.changes[:3]) if self.changes else "; running pods untouched")


def probe(cluster: LocalClusterApi, kube: Kube, w: workloads.Workloads, node: str, newer: tuple[str, str],
          older: tuple[str, str], cdi_dirs: dict[str, Path]) -> SkewResult:
    """Swap ``node``'s kubelet to ``newer`` (version, binary), try a pod, swap back to ``older``."""
    result = SkewResult(node, newer[0], older[0])
    before = snapshot.take(kube, w.namespace, cdi_dirs)
    started = time.monotonic()
    try:
        _, result.ready_after_s = cluster.swap(f"kubelet-{node}", *newer)
    except HarnessError as e:
        result.not_ready = str(e)
    else:
        try:
            result.pod_after_s = round(workloads.probe(kube, w.run_id, w.namespace, "skew-probe", node=node, timeout=90), 3)
        except HarnessError as e:
            result.pod_failed = str(e)
    result.ready_after_s = None if result.ready_after_s is None else round(result.ready_after_s, 3)
    changes = snapshot.differences(before, snapshot.take(kube, w.namespace, cdi_dirs))
    result.changes = [c for found in changes.values() for c in found]
    cluster.swap(f"kubelet-{node}", *older)
    # The old kubelet wipes and the driver republishes the node's slices: wait, so the upgrade starts whole.
    workloads.wait_published(kube, node, w.devices_per_node, deadline=started + 300)
    return result
