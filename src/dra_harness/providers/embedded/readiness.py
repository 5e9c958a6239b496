"""When an embedded cluster's start (or a component's restart) is done: polls with deadlines that say why not.

Why a part of its own: every start-up wait has the same two rules — a process that exits meanwhile ends
the wait at once with its log's tail (no minute spent polling a dead etcd), and a timeout names the
last answer seen — and the waits differ only in what they probe.
"""

from __future__ import annotations

import logging
import ssl
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from dra_harness.errors import ClusterError
from dra_harness.kube import rest
from dra_harness.kube.pods import node_ready, node_schedulable
from dra_harness.kube.rest import Kube
from dra_harness.labels import DISRUPTABLE_LABEL
from dra_harness.providers.embedded.core import ClusterCore
from dra_harness.providers.hardware import devices_by_node
from dra_harness.providers.localstate import ClusterSpec
from dra_harness.retrying import NotYet, until

log = logging.getLogger(__name__)


class Readiness:
    """One cluster's start-up waits."""

    _PORTS: ClassVar[dict[str, str]] = {"kube-apiserver": "apiserver", "kube-controller-manager": "controller_manager",
                                        "kube-scheduler": "scheduler"}

    def __init__(self, cluster: ClusterCore) -> None:
        self.cluster = cluster

    def check_alive(self) -> None:
        supervisor = self.cluster.supervisor
        for tracked in supervisor.tracked():
            if tracked.name == "watchdog":
                continue
            if not tracked.alive():
                raise ClusterError(f"{tracked.name} exited during start-up; last log lines:\n{supervisor.log_tail(tracked.name)}")

    def poll(self, what: str, deadline: float, probe: Callable[[], str | None]) -> None:
        """Call ``probe`` until it returns None; its last answer explains a timeout. A process
        that exits meanwhile ends the wait at once (with its log's tail)."""

        def attempt() -> None:
            self.check_alive()
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

    def ready(self, kube: Kube, what: str, path: str, deadline: float) -> None:
        self.poll(what, deadline, lambda: None if kube.raw(path).strip() == "ok" else "not ok")

    def nodes_ready(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
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

        self.poll("nodes Ready and untainted", deadline, probe)

    def slices(self, kube: Kube, spec: ClusterSpec, deadline: float) -> None:
        def probe() -> str | None:
            slices = kube.list(rest.RESOURCE_SLICES, field_selector=f"spec.driver={spec.driver_name}")
            counts = {node: len(devices) for node, devices in devices_by_node(slices, spec.driver_name).items()}
            wrong = {n: counts.get(n, 0) for n in spec.all_node_names() if counts.get(n, 0) != spec.gpus_per_node}
            if wrong:
                return "devices per node " + ", ".join(f"{n}={c}" for n, c in sorted(wrong.items()))
            return None

        self.poll(f"{spec.gpus_per_node} devices in every node's ResourceSlices", deadline, probe)

    def healthy(self, component: str, deadline: float) -> None:
        def probe() -> str | None:
            try:
                return None if self.component_get(component, "/healthz").strip() == "ok" else "not ok"
            except OSError as e:
                return f"{component} healthz: {e}"

        self.poll(f"{component} healthy", deadline, probe)

    def component_get(self, component: str, path: str) -> str:
        """GET a control-plane component's own endpoint as the cluster admin."""
        st = self.cluster.state()
        if st is None:
            raise ClusterError(f"cluster {self.cluster.name!r} is not up")
        ctx = ssl.create_default_context()
        # kube-controller-manager and kube-scheduler serve self-signed certificates.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        pki = Path(self.cluster.state_dir) / "pki"
        ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        url = f"https://127.0.0.1:{st.ports[self._PORTS[component]]}{path}"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            return str(r.read().decode())
