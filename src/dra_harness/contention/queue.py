"""The ``queue`` design: Kueue decides which job starts, and evicts lower-priority work to make room.

kube-scheduler does not preempt a pod to free a device its claim holds, so this design puts
an admission layer in front of it, as the planning guidance's third approach says: every
job is a ``batch/v1`` Job in one ClusterQueue whose quota is the scenario's devices, counted
through Kueue's DRA support (the tiers' DeviceClasses mapped to one device resource). Tiers
are WorkloadPriorityClasses; with ``preemption`` (the default) the ClusterQueue evicts
lower-priority workloads (``withinClusterQueue: LowerPriority``), which Kueue does by
suspending their Job: the pods go, the claims go, and the Job waits in the queue again.

An evicted job resumes from its last checkpoint when its tier has ``checkpoint_interval``:
:class:`Resumer` sets its next pod's run time to the work still left. Without one it starts over.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_harness.contention.settle import Metrics
from dra_harness.errors import ClusterError
from dra_harness.kube import kueue_api, rest
from dra_harness.kube.builders import RUN_DURATION_ANNOTATION
from dra_harness.kube.mirror import Mirror
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL
from dra_harness.contention.scenario import Scenario
from dra_harness.contention.topology import DRIVER, NODE_LABEL, Topology
from dra_harness.providers.local import LocalClusterApi, RunningKueue

log = logging.getLogger(__name__)

#: The device resource Kueue counts the tiers' DeviceClasses as.
RESOURCE = f"{DRIVER}/gpu"
QUEUE = "jobs"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: What :meth:`Settled.end` sets on a Job whose pod the harness ended: a spec change, harmless (a day
#: after it finished; the run's namespace is gone long before).
ENDED_TTL_S = 86400


def device_classes(topo: Topology) -> dict[str, list[str]]:
    """Kueue's ``deviceClassMappings`` for this topology: every tier's class counts as :data:`RESOURCE`."""
    return {RESOURCE: [topo.class_name("queue", t.name) for t in topo.scenario.tiers]}


def kueue_serves(kube: Kube) -> bool:
    """Whether Kueue's API is installed (its CRDs) on the cluster ``kube`` reaches."""
    try:
        kube.request("GET", kueue_api.CLUSTER_QUEUES.path(None), params={"limit": "1"})
    except rest.NotFound:
        return False
    return True


def _flavor(namespace: str) -> str:
    # One per run namespace, like the ClusterQueue (named after it): Kueue keeps a finalizer on a flavor until its
    # queue is gone, so the next run's flavor must not wait for the last one's name.
    return f"{namespace}-devices"


def install(kube: Kube, topo: Topology, namespace: str) -> None:
    """ResourceFlavor, ClusterQueue (quota = every device), WorkloadPriorityClasses and the LocalQueue."""
    sc: Scenario = topo.scenario
    labels = {RUN_LABEL: topo.run_id, NODE_LABEL: topo.tag}
    preempt = sc.designs["queue"].get("preemption", True)
    flavor = _flavor(namespace)
    kube.create(kueue_api.RESOURCE_FLAVORS, {"apiVersion": kueue_api.API, "kind": "ResourceFlavor",
                                         "metadata": {"name": flavor, "labels": labels}})
    kube.create(kueue_api.CLUSTER_QUEUES, {"apiVersion": kueue_api.API, "kind": "ClusterQueue",
                                       "metadata": {"name": namespace, "labels": labels}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority" if preempt else "Never"},
        "resourceGroups": [{"coveredResources": [RESOURCE], "flavors": [
            {"name": flavor, "resources": [{"name": RESOURCE, "nominalQuota": sc.total_devices}]}]}],
    }})
    for t in sc.tiers:
        kube.create(kueue_api.WORKLOAD_PRIORITY_CLASSES, {"apiVersion": kueue_api.API, "kind": "WorkloadPriorityClass",
                                                "metadata": {"name": topo.priority_class(t.name), "labels": labels},
                                                "value": t.priority, "description": f"dra-harness contention tier {t.name}"})
    kube.create(kueue_api.LOCAL_QUEUES, {"apiVersion": kueue_api.API, "kind": "LocalQueue", "metadata": {"name": QUEUE, "labels": labels},
                                     "spec": {"clusterQueue": namespace}}, namespace)


def uninstall(kube: Kube, topo: Topology, namespace: str) -> None:
    """What :func:`install` made, while Kueue still runs (it holds finalizers on them until their workloads are gone)."""
    kube.delete(kueue_api.CLUSTER_QUEUES, namespace)
    kube.delete(kueue_api.RESOURCE_FLAVORS, _flavor(namespace))
    for t in topo.scenario.tiers:
        kube.delete(kueue_api.WORKLOAD_PRIORITY_CLASSES, topo.priority_class(t.name))


def job(topo: Topology, name: str, tier: str, run_s: float) -> Obj:
    """A job as Kueue takes it: a Job in the LocalQueue at the tier's priority, its pod the design's pod."""
    pod = topo.pod("queue", name, tier, run_s)
    meta = pod["metadata"]
    labels = {**meta.get("labels", {}), QUEUE_LABEL: QUEUE, PRIORITY_LABEL: topo.priority_class(tier)}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1,
                     "template": {"metadata": {"labels": meta.get("labels", {}), "annotations": meta.get("annotations", {})},
                                  "spec": pod["spec"]}}}


class Resumer:
    """Gives an evicted job's next pod the run time it has left, as the recorder sees each new pod.

    Kueue restores a Job's pod template to what it first admitted whenever it suspends the Job, so the
    template cannot carry the work left; the pod can, if its run time is set before it runs (the
    simulated node reads it when the pod starts). ``left(job)`` gives the wall seconds still to run
    (None: leave the pod as it is). A pod already running when the patch lands, or a refused patch,
    is counted: that job then runs its whole duration again.
    """

    def __init__(self, kube: Kube, namespace: str, left: Callable[[str], float | None]) -> None:
        self.kube, self.namespace, self.left = kube, namespace, left
        self.patched: list[str] = []
        self.missed: list[str] = []
        self._seen: set[str] = set()

    def __call__(self, job: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if name in self._seen:
            return
        self._seen.add(name)
        left = self.left(job)
        if left is None:
            return
        if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            self.missed.append(f"{name}: already {pod['status']['phase']}")
            return
        try:
            self.kube.patch(rest.PODS, name, {"metadata": {"annotations": {RUN_DURATION_ANNOTATION: f"{max(left, 0.05):.3f}s"}}},
                            self.namespace)
            self.patched.append(name)
        except (rest.ApiError, rest.Unreachable) as e:
            self.missed.append(f"{name}: {str(e).splitlines()[0]}")
            log.debug("resume patch of %s refused: %s", name, e)


@dataclass(frozen=True)
class AdmissionState:
    """Kueue's admission queue for one ClusterQueue, and its admission attempts (all queues), as its /metrics says now."""

    active: int        # workloads waiting for an admission attempt
    inadmissible: int  # tried, parked until something changes
    attempts: int


def parse_admission(text: str, cluster_queue: str) -> AdmissionState:
    """``kueue_pending_workloads`` of ``cluster_queue`` and the sum of ``kueue_admission_attempts_total``."""
    pending = {"active": 0, "inadmissible": 0}
    attempts = 0
    for line in text.splitlines():
        if line.startswith("kueue_pending_workloads{") and f'cluster_queue="{cluster_queue}"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            pending[status] = pending.get(status, 0) + int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("kueue_admission_attempts_total{"):
            attempts += int(float(line.rsplit(" ", 1)[1]))
    return AdmissionState(pending["active"], pending["inadmissible"], attempts)


class KueueQueue(Metrics):
    """Kueue's /metrics, checked against the cluster's CA, read with a token of :data:`dra_harness.kube.kueue_api.METRICS_READER`."""

    def __init__(self, kube: Kube, running: RunningKueue, ca: Path) -> None:
        ctx = ssl.create_default_context(cafile=str(ca))
        super().__init__("Kueue", running.metrics_port, ctx, lambda: kueue_api.metrics_token(kube))

    def read(self, cluster_queue: str) -> AdmissionState:
        return parse_admission(self.text(), cluster_queue)


@contextmanager
def kueue_running(cluster: LocalClusterApi | None, kube: Kube, topo: Topology, wanted: bool = True) -> Iterator[KueueQueue | None]:
    """Kueue started beside the embedded ``cluster`` for ``topo``'s DeviceClasses, and its admission queue's
    reader; stopped after. ``wanted`` False: nothing started, None given."""
    if not wanted:
        yield None
        return
    if cluster is None:
        raise ClusterError("the queue design starts Kueue beside a cluster this machine runs (the embedded cluster)")
    running = cluster.start_kueue(kube, device_classes(topo))
    reader = None
    try:
        reader = KueueQueue(kube, running, cluster.state_dir / "pki" / "ca.crt")
        yield reader
    finally:
        if reader is not None:
            reader.close()
        cluster.stop_kueue(kube, running)


class Settled:
    """The queue design's part of a virtual-time step being settled (:mod:`.settle`), read from Jobs, Workloads
    and Kueue's admission queue.

    A step waits until every Job has a Workload Kueue has tried (``QuotaReserved`` set either way), none is
    half evicted, every Job admitted has its pod, every Job whose pod the harness ended is ``Finished``
    (the Job controller marks it complete, Kueue gives its quota back), and Kueue's queue holds no workload
    waiting for an attempt; :attr:`changes` counts Job and Workload updates (watched: :meth:`start` first,
    :meth:`close` after) and Kueue's admission attempts, so the quiet window also waits for them to stop.

    :meth:`end` touches a Job's spec once the harness ended its pod: the Job controller syncs a Job at once on
    a spec change but batches pod changes for 1 s of wall time (``SyncJobBatchPeriod``), and every step
    that ends a job would otherwise wait that second for its quota to come back.
    """

    def __init__(self, kube: Kube, namespace: str, admission: KueueQueue, quota: int = 0) -> None:
        """``quota``: the devices the run's ClusterQueue admits (:func:`install` gives it every device)."""
        self.kube, self.namespace, self.admission, self.quota = kube, namespace, admission, quota
        # Watched, not listed per look: a look every 10 ms over a thousand finished Jobs slowed every step.
        self.jobs = Mirror(kube, rest.JOBS, namespace)
        self.workloads = Mirror(kube, kueue_api.WORKLOADS, namespace)
        self.seen = (-1, -1, -1)
        self.changes = 0
        self.pending = 0  # workloads neither admitted nor finished at the last look

    def start(self) -> Settled:
        self.jobs.start()
        self.workloads.start()
        return self

    def close(self) -> None:
        self.jobs.close()
        self.workloads.close()

    def end(self, job: str) -> None:
        try:
            self.kube.patch(rest.JOBS, job, {"spec": {"ttlSecondsAfterFinished": ENDED_TTL_S}}, self.namespace)
        except rest.NotFound:
            pass  # gone with an eviction's clean-up: nothing to sync
        except (rest.ApiError, rest.Unreachable) as e:  # only slower: the controller's batch syncs it in 1 s
            log.debug("touching job %s refused: %s", job, e)

    def unfinished(self, jobs: Collection[str]) -> list[str]:
        """Of ``jobs``, those whose Workload is not yet ``Finished`` (their quota not yet given back)."""
        done = {next((o["name"] for o in w["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), "")
                for w in self.workloads.items()
                if any(c["type"] == "Finished" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or [])}
        return [j for j in jobs if j not in done]

    def __call__(self, ended: Collection[str] = ()) -> list[str]:
        out = []
        jobs = {j["metadata"]["name"]: j for j in self.jobs.items()}
        owners = set()
        pending = 0
        for w in self.workloads.items():
            name = w["metadata"]["name"]
            job = next((o["name"] for o in w["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), name)
            owners.add(job)
            cond = {c["type"]: c["status"] for c in (w.get("status") or {}).get("conditions") or []}
            if cond.get("Finished") == "True":
                continue
            if job in ended:
                out.append(f"job {job} ended, its workload not yet Finished")
            if "QuotaReserved" not in cond:
                out.append(f"workload of job {job} not yet tried by Kueue")
            elif cond.get("Evicted") == "True" and cond.get("QuotaReserved") == "True":
                out.append(f"workload of job {job} being evicted")
            elif cond.get("Admitted") == "True":
                status = (jobs.get(job) or {}).get("status") or {}
                if jobs.get(job, {}).get("spec", {}).get("suspend") or not (status.get("active") or status.get("succeeded")):
                    out.append(f"job {job} admitted, its pod not yet running")
            else:
                pending += 1
        out += [f"job {j} has no workload yet" for j in jobs if j not in owners]
        state = self.admission.read(self.namespace)  # the run's ClusterQueue is named after its namespace
        if state.active:
            out.append(f"{state.active} workload(s) waiting in Kueue's admission queue")
        seen = (self.jobs.changes, self.workloads.changes, state.attempts)
        if seen != self.seen:
            self.seen, self.changes = seen, self.changes + 1
        self.pending = pending
        return out
