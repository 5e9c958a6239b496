"""Every job's life from watches: created, claim allocated, scheduled, running, completed.

Two list+watch threads (pods, claims) in the run's namespace stamp each transition
with the wall time the event arrived, and keep every event as a raw sample. Under the
queue design a job is a ``batch/v1`` Job that may run several pods, one after each
eviction; its record then gathers all of them (``runs``, ``evictions``). Device
holding intervals come from the claims' allocations, so utilisation and idle
reserved capacity are what the allocator actually did, not what the plan intended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dra_harness.kube import rest
from dra_harness.kube.rest import Gone, Kube, Unreachable
from dra_harness.kube.types import Obj


@dataclass
class JobRecord:
    name: str
    tier: str = ""
    created: float | None = None
    allocated: float | None = None
    scheduled: float | None = None
    running: float | None = None
    completed: float | None = None
    failed: float | None = None
    deleted: float | None = None
    node: str | None = None
    devices: list[str] = field(default_factory=list)
    first_message: str | None = None
    preempted: str | None = None     # DisruptionTarget reason, e.g. PreemptionByScheduler
    # Jobs only (the queue design): each pod's run [start, end], and when a running pod was taken away.
    runs: list[list[float]] = field(default_factory=list)
    evictions: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Hold:
    claim: str
    pod: str
    devices: list[str]
    start: float
    end: float | None = None


#: The label the Job controller puts on its pods.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


class Recorder:
    def __init__(self, kube: Kube, namespace: str, jobs: bool = False,
                 on_new_pod: Callable[[str, Obj], None] | None = None) -> None:
        """``jobs``: the pods belong to Jobs (records per Job); ``on_new_pod(job, pod)`` sees each Job pod first."""
        self.kube, self.namespace, self.batch, self.on_new_pod = kube, namespace, jobs, on_new_pod
        self.pod_job: dict[str, str] = {}
        self.pod_started: dict[str, float] = {}
        #: Jobs (or bare pods) of which a pod was seen Running: the virtual clock asks this on every 3-ms poll.
        self.jobs_started: set[str] = set()
        self.pod_ended: set[str] = set()
        # Each pod's latest (phase, node, marked unschedulable, being deleted): what the virtual clock settles on.
        self.pod_state: dict[str, tuple[str, str | None, bool, bool]] = {}
        #: Pods the scheduler last turned away for devices (its message names claims): only devices coming back move them.
        self.waits_for_devices: set[str] = set()
        self.jobs: dict[str, JobRecord] = {}
        self.holds: dict[str, Hold] = {}
        self.closed: list[Hold] = []
        self.samples: list[list] = []
        self.claim_seen: dict[str, float] = {}   # claim -> first event (its creation, as watched)
        self.claim_allocated: dict[str, float] = {}
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._follow, args=(res, handler), daemon=True)
                        for res, handler in ((rest.PODS, self._pod), (rest.RESOURCE_CLAIMS, self._claim))]
        self.synced = [threading.Event(), threading.Event()]

    def start(self) -> None:
        for i, t in enumerate(self.threads):
            t._sync = self.synced[i]  # type: ignore[attr-defined]
            t.start()
        for e in self.synced:
            e.wait(30)

    def close(self) -> None:
        """Stop recording now. The watch threads end at their stream's next event or timeout (at most 5 s);
        waiting for that cost every design run 5 s of wall time, and what they see after this is dropped."""
        now = time.time()
        with self.lock:
            self.stop.set()
            for h in self.holds.values():
                h.end = h.end or now

    def job(self, name: str) -> JobRecord:
        rec = self.jobs.get(name)
        if rec is None:
            rec = self.jobs[name] = JobRecord(name)
        return rec

    # -- watches ----------------------------------------------------------------
    def _follow(self, res: rest.Resource, handler) -> None:
        sync = threading.current_thread()._sync  # type: ignore[attr-defined]
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    items, version = self.kube.list_with_version(res, self.namespace)
                    now = time.time()
                    for obj in items:
                        handler("ADDED", obj, now)
                    sync.set()
                for kind, obj in self.kube.watch(res, self.namespace, version, timeout_seconds=5):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        handler(kind, obj, time.time())
                    if self.stop.is_set():
                        return
            except Gone:
                version = ""
            except (Unreachable, rest.ApiError):
                time.sleep(0.5)

    def _pod(self, kind: str, pod: Obj, now: float) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        phase = status.get("phase")
        pod_name = meta["name"]
        job = meta.get("labels", {}).get(JOB_NAME_LABEL) if self.batch else None
        if job and self.on_new_pod and pod_name not in self.pod_job:
            self.on_new_pod(job, pod)  # before it runs: outside the lock, since it may call the API server
        with self.lock:
            if self.stop.is_set():
                return
            rec = self.job(job or pod_name)
            self.pod_job[pod_name] = rec.name
            rec.tier = rec.tier or meta.get("labels", {}).get("dra-harness.io/tier", "")
            self.samples.append([round(now, 4), "pod", kind, pod_name, phase, spec.get("nodeName")])
            if kind == "DELETED":
                self.pod_state.pop(pod_name, None)
                self.waits_for_devices.discard(pod_name)
            else:
                refused = [c.get("message") or "" for c in status.get("conditions") or []
                           if c.get("type") == "PodScheduled" and c.get("status") == "False"]
                self.pod_state[pod_name] = (phase or "", spec.get("nodeName"), bool(refused),
                                            bool(meta.get("deletionTimestamp")))
                if any("claim" in m for m in refused):
                    self.waits_for_devices.add(pod_name)
                else:
                    self.waits_for_devices.discard(pod_name)
            rec.created = rec.created or now
            if spec.get("nodeName") and rec.scheduled is None:
                rec.scheduled, rec.node = now, spec["nodeName"]
            for c in status.get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False" and rec.first_message is None:
                    rec.first_message = c.get("message", "")
                if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
                    rec.preempted = c.get("reason", "DisruptionTarget")
            if phase == "Running" and rec.running is None:
                rec.running = now
            if phase == "Running" and pod_name not in self.pod_started:
                self.pod_started[pod_name] = now
                self.jobs_started.add(rec.name)
            if phase == "Succeeded" and rec.completed is None:
                rec.completed = now
                rec.running = rec.running or now
            if job:
                self._job_pod(rec, pod_name, kind, phase, bool(meta.get("deletionTimestamp")), now)
                return
            if phase == "Failed" and rec.failed is None:
                rec.failed = now
            if kind == "DELETED" and rec.deleted is None:
                rec.deleted = now

    def _job_pod(self, rec: JobRecord, pod: str, kind: str, phase: str | None, deleting: bool, now: float) -> None:
        """A Job's pod ended: completed, failed on its own, or taken away (deleted) while it ran: an eviction."""
        if pod in self.pod_ended or not (phase in ("Succeeded", "Failed") or deleting or kind == "DELETED"):
            return
        self.pod_ended.add(pod)
        start = self.pod_started.get(pod)
        if start is not None:
            rec.runs.append([start, now])
        if phase == "Succeeded":
            return
        if phase == "Failed" and not deleting:
            rec.failed = rec.failed or now
        elif start is not None:
            rec.evictions.append(now)

    def _claim(self, kind: str, claim: Obj, now: float) -> None:
        meta = claim["metadata"]
        key = meta["name"]
        owner = next((o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
        alloc = (claim.get("status") or {}).get("allocation")
        devices = [f"{r['pool']}/{r['device']}" for r in (alloc or {}).get("devices", {}).get("results", [])]
        with self.lock:
            if self.stop.is_set():
                return
            self.samples.append([round(now, 4), "claim", kind, key, owner, devices])
            self.claim_seen.setdefault(key, now)
            if alloc:
                self.claim_allocated.setdefault(key, now)
            hold = self.holds.get(key)
            if alloc and kind != "DELETED" and hold is None:
                self.holds[key] = Hold(key, owner or "", devices, now)
                job = self._job_of(owner) if owner else None
                if job:
                    rec = self.job(job)
                    rec.allocated = rec.allocated or now
                    rec.devices = devices
            elif hold is not None and (not alloc or kind == "DELETED"):
                hold.end = now
                self.closed.append(self.holds.pop(key))

    def _job_of(self, pod: str) -> str:
        """The job a pod belongs to; a Job's pod whose own event is still on its way is ``<job>-<suffix>``."""
        if pod in self.pod_job or not self.batch:
            return self.pod_job.get(pod, pod)
        return pod.rsplit("-", 1)[0]

    # -- results ------------------------------------------------------------------
    def all_holds(self) -> list[Hold]:
        with self.lock:
            return self.closed + list(self.holds.values())

    def wait_settled(self, names: set[str], deadline: float, progress=None) -> None:
        """Until every named job completed, failed or vanished, or ``deadline`` (monotonic) passes."""
        while time.monotonic() < deadline:
            with self.lock:
                done = sum(1 for n in names if (r := self.jobs.get(n)) and (r.completed or r.failed or r.deleted))
            if progress:
                progress(done)
            if done >= len(names):
                return
            time.sleep(0.25)
