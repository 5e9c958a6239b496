"""A scenario in virtual time: the clock moves from event to event once the control plane has settled.

Why: compressed into wall time, a scenario's waits hold the control plane's own latency multiplied by
the compression, so a verdict could flip with the machine's load (inference-vs-training's reserved
tier did, between 150x and 300x). Here scenario time is not wall time at all. The harness keeps the
events: a job arrives at its scenario time (its pod, or the queue design's Job, is created then); a
running pod completes when its scenario duration has passed (the harness writes its status
``Succeeded``, as a kubelet would; no KWOK timer runs it). Between two events the real kube-scheduler,
resourceclaim controller, KWOK and Kueue do what the event asks, and the clock waits for them to
settle (:mod:`.settle`). Everything the watches see during a step happens at the step's scenario
time; a wait is the scenario time from a job's arrival to the step in which it was seen Running.

Evictions and Kueue's re-queues are events on the same clock: a pod taken away during a step ends its
run at that step's time, and the job's next pod runs for the work left after its last checkpoint.
An arrival that provably finds devices at once (:mod:`.ahead`) is sent without a settled step of its
own; a later step confirms it ran.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dra_harness.contention import metrics
from dra_harness.contention.ahead import Room
from dra_harness.contention.plan import Job
from dra_harness.contention.recorder import Hold, JobRecord, Recorder
from dra_harness.contention.scenario import Scenario
from dra_harness.contention.settle import QUIET_S, NotSettled, SchedulerQueue, wait_settled
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

#: A pod the harness will end itself carries a run time KWOK never reaches (a Job's pod without one
#: would be completed at once by the shipped stages).
NEVER_S = 100 * 365 * 86400.0
#: Wall seconds the run waits, once no event is left, for a job still waiting to start (:meth:`VirtualRun._late_start`):
#: Kueue may admit a job after its quiet window. Without an admission layer the last step settled with no pod waiting
#: in the scheduler's queue, so only a scheduler timer could start one (which a step never waits for either).
LATE_S = 10.0
LATE_PLAIN_S = 0.25
#: The quiet window of a step with arrivals only (wall seconds): see :meth:`VirtualRun.run`.
ARRIVALS_QUIET_S = 0.02
#: Wall seconds one step may take to settle before the run stops with what was still moving.
STEP_DEADLINE_S = 60.0

ARRIVE, COMPLETE = 1, 0  # at one instant completions go first: a device freed at t serves an arrival at t


@dataclass
class Clock:
    """Steps taken: the wall time each began and its scenario time, so a watch's stamp maps to scenario time."""

    walls: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    settle_wall_s: list[float] = field(default_factory=list)
    polls: int = 0    # reads of kube-scheduler's queue over every settle (:func:`.settle.wait_settled`)
    no_room: int = 0  # settled steps that gave devices back where no waiting pod had room (:meth:`VirtualRun._no_room`)
    parks: int = 0    # settled steps whose arrivals could only park (:meth:`VirtualRun._parks`)

    def step(self, t: float) -> None:
        self.walls.append(time.time())
        self.times.append(t)

    def at(self, wall: float | None) -> float | None:
        """The scenario time of the step during which ``wall`` fell (0 before the first)."""
        return None if wall is None else self.on(wall)

    def on(self, wall: float) -> float:
        """:meth:`at` of a stamp that is always there."""
        i = bisect.bisect_right(self.walls, wall) - 1
        return self.times[i] if i >= 0 else 0.0

    def summary(self) -> dict[str, Any]:
        s = self.settle_wall_s
        return {"steps": len(self.times), "settled": len(s), "polls": self.polls, "no_room": self.no_room, "parks": self.parks,
                "settle_wall_s": {"p50": metrics.percentile(s, 50), "p95": metrics.percentile(s, 95),
                                  "max": max(s) if s else None, "total": round(sum(s), 1)}}


def completed_status(containers: list[Obj]) -> Obj:
    """The status a kubelet writes when every container exited 0 (KWOK's completion stage writes the same)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {
        "phase": "Succeeded",
        "conditions": [{"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
                       for t in ("Ready", "ContainersReady")],
        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                               "started": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                                          "finishedAt": now}}} for c in containers],
    }}


class Admission(Protocol):
    """An admission layer's part of settling (the queue design's Kueue: :class:`dra_harness.contention.queue.Settled`)."""

    changes: int   # grows with every change the layer makes: the quiet window waits for it to stop
    pending: int   # jobs it held back at its last look
    quota: int     # devices it admits at once

    def unfinished(self, jobs: Collection[str]) -> list[str]:
        """Of ``jobs`` (ended by the harness), those whose quota is not yet given back."""
        ...

    def __call__(self, ended: Collection[str]) -> list[str]:
        """What is not yet settled, given the jobs whose pods the harness ended and whose end is not yet seen."""
        ...

    def end(self, job: str) -> None:
        """The harness ended ``job``'s pod."""
        ...


class VirtualRun:
    """One design's jobs driven event by event; ``create(job)`` sends a job's pod or Job at its arrival (False: not sent)."""

    def __init__(self, kube: Kube, namespace: str, sc: Scenario, jobs: list[Job], rec: Recorder,
                 queue: SchedulerQueue, create: Callable[[Job], bool], containers: list[Obj],
                 extra: Admission | None = None, quiet_s: float = QUIET_S, room: Room | None = None) -> None:
        """``room``: the design's devices, to send arrivals that provably fit ahead (None: every arrival settles)."""
        self.kube, self.namespace, self.sc, self.jobs, self.rec = kube, namespace, sc, jobs, rec
        self.queue, self.create, self.containers, self.extra, self.quiet_s = queue, create, containers, extra, quiet_s
        self.room = room
        self.by_name = {j.name: j for j in jobs}
        self.clock = Clock()
        self.events: list[tuple[float, int, int, str]] = []
        self.seq = itertools.count()
        self.arrived: set[str] = set()
        self.ending: set[str] = set()        # pods this run wrote Succeeded and whose end is not yet seen
        self.started: set[str] = set()       # pods seen starting (never forgotten: a pod runs once)
        self.live: set[str] = set()          # of those, pods whose run has not ended
        self.runs: dict[str, list[list[float]]] = {}   # job -> its pods' [start, end] in scenario time
        self.ended_at: dict[str, float] = {}           # pod -> the scenario time the harness ended it
        self.late = 0      # pods that started after their step had settled, with no event left to carry them
        self.ahead: dict[str, tuple[float, int]] = {}  # job sent ahead, not yet seen Running -> (arrival, its end's seq)
        self.early: dict[str, float] = {}    # job sent ahead and seen Running -> its arrival, where its run starts
        self.early_pods: dict[str, float] = {}  # the same by its pod's name
        self.broken: dict[str, str] = {}     # job sent ahead that a settled step found not Running -> its pod then
        self.cancelled: set[int] = set()     # seqs of ends pushed for those: their real start pushes another
        self.refused: Counter[str] = Counter()  # why steps with arrivals were not sent ahead

    def run(self, progress: Callable[[int, float], None] | None = None) -> None:
        for j in self.jobs:
            heapq.heappush(self.events, (j.at_s, ARRIVE, next(self.seq), j.name))
        while self.events or self._late_start(LATE_S if self.extra is not None else LATE_PLAIN_S):
            if not self.events:
                continue  # a late start pushed its end: the loop goes on from there
            t = self.events[0][0]
            self.clock.step(t)
            batch = []
            while self.events and self.events[0][0] <= t:
                event = heapq.heappop(self.events)
                if event[2] not in self.cancelled:
                    batch.append(event)
            if not batch:
                continue  # only ends pushed again under another name, or of jobs whose bound broke
            if self._send_ahead(batch, t):
                if progress:
                    progress(self._done(), t)
                continue
            if self.ahead:
                self._confirm(t)
                batch = [e for e in batch if e[2] not in self.cancelled]
            # Devices coming back while pods are parked: the scheduler must be seen moving one (see wait_settled).
            ending = any(kind == COMPLETE for _, kind, _, _ in batch) and self.extra is None and self._parked()
            moved_above = self.queue.read().moved if ending else None
            arrivals = ends = False
            for _, kind, _, name in batch:
                ends = ends or kind == COMPLETE
                if kind == ARRIVE:
                    arrivals = True
                    self._arrive(name)
                else:
                    self._complete(name, t)
            if not arrivals and self.events and not self._waiting() and not (self.extra and self.extra.pending):
                # Only ends, and no pod or queued job waits for a device: nothing can happen at t but devices (and
                # quota) coming back, and the next step waits for those (their holds end at t all the same: ``ended_at``).
                continue
            began = time.monotonic()
            # Arrivals alone free nothing: once each new pod is bound or marked unschedulable (a condition the
            # step waits for anyway) nothing else is set moving, so a short window only catches a last attempt.
            quiet = self.quiet_s if ends or self.extra is not None else min(self.quiet_s, ARRIVALS_QUIET_S)
            if moved_above is not None and not arrivals and self._no_room(t):
                # Provably nothing to place: the step waits for the scheduler to move and retry its parked pods
                # (so the next step's sign of a move is its own), not for a quiet window.
                quiet = 0.0
                self.clock.no_room += 1
            elif not ends and self._parks([name for _, kind, _, name in batch if kind == ARRIVE]):
                # Each new pod's one attempt can only park it: the step waits for those attempts, not a quiet window.
                quiet = 0.0
                self.clock.parks += 1
            self.clock.polls += wait_settled(self.queue, self._unsettled, self._events,
                                             STEP_DEADLINE_S, f"scenario t={t:.0f} s", quiet, moved_above=moved_above)
            self.clock.settle_wall_s.append(round(time.monotonic() - began, 4))
            self._observe(t)
            if progress:
                progress(self._done(), t)

    # -- one step ------------------------------------------------------------------
    def _arrive(self, name: str) -> bool:
        """Send a job at its arrival; False: never sent (a negative control), lost as never created."""
        if not self.create(self.by_name[name]):
            return False
        self.arrived.add(name)
        with self.rec.lock:  # arrived now, whether or not a pod follows at once (Kueue may hold it)
            r = self.rec.job(name)
            r.tier, r.created = r.tier or self.by_name[name].tier, r.created or time.time()
        return True

    def _send_ahead(self, batch: list[tuple[float, int, int, str]], t: float) -> bool:
        """A step whose arrivals all provably start at once (:mod:`.ahead`) and whose ends no pod waits for:
        done without settling. False: the step needs the cluster's state (nothing was done)."""
        if self.room is None or not (any(k == ARRIVE for _, k, _, _ in batch) or self.events):
            return False  # the last event settles: the run's end is read from a settled cluster
        mine = [n for _, k, _, n in batch if k == COMPLETE and n in self.ahead]
        if mine and not self._seen(lambda: all(self._started(j) for j in mine)):
            self.refused["the end of a job sent ahead, not yet seen Running"] += 1
            return False
        self._seen_running()  # renames those ends to their pods (a Job's pod has its own name)
        batch = [e for e in batch if e[2] not in self.cancelled]
        arrivals = [name for _, kind, _, name in batch if kind == ARRIVE]
        ends = [name for _, kind, _, name in batch if kind == COMPLETE]
        if self._waiting() or (self.extra is not None and self.extra.pending):
            self.refused["a job waits for devices"] += 1
            return False
        if arrivals:  # the scheduler (and Kueue) must place them on this instant's devices: earlier ends come back first
            self._ends_landed(t)
        for i, name in enumerate(arrivals):
            tier = self.by_name[name].tier
            # A job of higher priority than one sent ahead but not yet placed would go first, not in arrival
            # order: those are waited for (tens of milliseconds) before it is sent.
            lower = {j for j in self.ahead if self._priority(tier) > self._priority(self.by_name[j].tier)}
            if lower and not self._seen(functools.partial(self._all_holding, lower)):
                self.refused["a job sent ahead of lower priority not placed"] += 1
                return False
            with self.rec.lock:
                holds = list(self.rec.holds.values())
                holding = self._holding()
            unplaced = [self.by_name[j].tier for j in self.ahead if j not in holding]
            unplaced += [self.by_name[n].tier for n in arrivals[:i]]
            if not self.room.fits(tier, {d for h in holds for d in h.devices}, unplaced):
                self.refused["may not fit"] += 1
                return False
            if self.extra is not None and self._admitted() + sum(self.by_name[n].devices for n in arrivals[:i + 1]) > self.extra.quota:
                self.refused["over the admission quota"] += 1
                return False
        for name in ends:
            self._complete(name, t)
        for name in arrivals:
            if self._arrive(name):
                seq = next(self.seq)  # its run starts now by the bound: its end is known already
                self.ahead[name] = (t, seq)
                heapq.heappush(self.events, (t + self._left(name), COMPLETE, seq, name))
        return True

    def _all_holding(self, jobs: set[str]) -> bool:
        return jobs <= self._holding()

    def _holding(self) -> set[str]:
        """Jobs with a pod holding devices (call under the recorder's lock)."""
        return {self.rec.pod_job.get(h.pod, h.pod) for h in self.rec.holds.values()}

    def _started(self, job: str) -> bool:
        """Whether a pod of ``job`` was seen Running (call under the recorder's lock)."""
        return job in self.rec.jobs_started

    def _admitted(self) -> int:
        """Devices the admission layer holds for jobs now: those running and not ended, and those sent ahead."""
        with self.rec.lock:
            running = {self.rec.pod_job.get(p, p) for p in self.live - self.ending}
        return sum(self.by_name[j].devices for j in running | set(self.ahead))

    def _seen(self, done: Callable[[], bool], within_s: float = 2.0) -> bool:
        """Whether ``done()`` (read under the recorder's lock) comes true within ``within_s`` wall seconds."""
        deadline = time.monotonic() + within_s
        while True:
            with self.rec.lock:
                if done():
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.003)

    def _priority(self, tier: str) -> int:
        return self.sc.tier(tier).priority

    def _ends_landed(self, t: float) -> None:
        """Until every pod this run ended was seen Succeeded with its devices (and its admission quota) back: an
        end's reactions, tens of milliseconds; a full settle waits for the same among other things."""
        deadline = time.monotonic() + STEP_DEADLINE_S
        while True:
            with self.rec.lock:
                left = self._ends_left({h.pod for h in self.rec.holds.values()})
                jobs = {self.rec.pod_job.get(p, p) for p in self.ending}
            if not left and self.extra is not None:
                left = self.extra.unfinished(jobs)
            if not left:
                return
            if time.monotonic() > deadline:
                raise NotSettled(f"scenario t={t:.0f} s: pods ended by the harness not seen ended with their devices "
                                 f"back after {STEP_DEADLINE_S:.0f} s: {'; '.join(sorted(left)[:5])}")
            time.sleep(0.005)

    def _ends_left(self, holding: set[str]) -> list[str]:
        """What is left of the ends this run wrote: a pod not yet seen Succeeded, or its devices not given back
        (call under the recorder's lock)."""
        out = []
        for pod in self.ending:
            if self.rec.pod_state.get(pod, ("Succeeded",))[0] != "Succeeded":
                out.append(f"pod {pod} not seen Succeeded")
            elif pod in holding:
                out.append(f"pod {pod} ended, its devices not given back")
        return out

    def _seen_running(self) -> None:
        """Jobs sent ahead whose pod the watch saw Running: confirmed, their run began at their arrival. Their end,
        pushed under the job's name, is pushed again under the pod's where the two differ (a Job's pod)."""
        with self.rec.lock:
            seen = [(p, j) for p in self.rec.pod_started if (j := self.rec.pod_job.get(p, p)) in self.ahead
                    and p not in self.started]
        for pod, job in seen:
            at, seq = self.ahead.pop(job)
            self.early[job], self.early_pods[pod] = at, at
            self.started.add(pod)
            self.live.add(pod)
            self.runs.setdefault(job, []).append([at, -1.0])
            if pod != job:
                self.cancelled.add(seq)
                heapq.heappush(self.events, (at + self.by_name[job].duration_s, COMPLETE, next(self.seq), pod))

    def _confirm(self, t: float) -> None:
        """Before a step that needs the cluster's state: settle, and check every pod sent ahead runs."""
        began = time.monotonic()
        self.clock.polls += wait_settled(self.queue, self._unsettled, self._events, STEP_DEADLINE_S,
                                         f"scenario t={t:.0f} s (jobs sent ahead)", min(self.quiet_s, ARRIVALS_QUIET_S))
        self.clock.settle_wall_s.append(round(time.monotonic() - began, 4))
        self._observe(t)
        for job, (_, seq) in list(self.ahead.items()):  # the bound was wrong: its wait is what the watches see
            self.broken[job] = self._state(job)
            self.cancelled.add(seq)
            del self.ahead[job]

    def _state(self, job: str) -> str:
        """Where ``job``'s pods stand, as the watches last saw them: what a broken bound's record says."""
        said = []
        with self.rec.lock:
            for pod, (phase, node, unschedulable, deleting) in self.rec.pod_state.items():
                if self.rec.pod_job.get(pod, pod) == job:
                    said.append(f"{pod}: {phase}, node {node or '-'}" + (", unschedulable" if unschedulable else "")
                                + (", being deleted" if deleting else ""))
        return "; ".join(said) or "no pod seen"

    def _late_start(self, within_s: float) -> bool:
        """No event is left but jobs are unfinished: wait ``within_s`` for a pod the last step's reaction still
        starts (Kueue admitting a job after its quiet window); it starts at the last step's time. False: none did."""
        if self._done() >= len(self.arrived) or not self.clock.times:
            return False
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            with self.rec.lock:
                new = any(p not in self.started for p in self.rec.pod_started)
            if new:
                self.late += 1
                self._observe(self.clock.times[-1])
                return True
            time.sleep(0.1)
        return False

    def _no_room(self, t: float) -> bool:
        """Whether, once this step's ends have landed, no pod that waits could be placed on the devices free
        (:class:`~dra_harness.contention.ahead.Room`'s count, which holds wherever the scheduler places): then the
        step gave devices back that no placement can follow, whatever the control plane's timing. False without a
        Room (every step settles fully) and with an admission layer (its quota is not counted)."""
        if self.room is None or self.extra is not None:
            return False
        self._ends_landed(t)
        with self.rec.lock:
            held = self._held()
            jobs = {self.rec.pod_job.get(pod, pod) for pod, (phase, node, _, deleting) in self.rec.pod_state.items()
                    if not node and not deleting and phase not in ("Succeeded", "Failed")}
        if not jobs or not jobs <= self.by_name.keys():
            return False
        return self._no_slot(jobs, held)

    def _parks(self, arrivals: list[str]) -> bool:
        """Whether no job arriving in this step can be placed: its tier has no whole slot among the free devices
        its class may take (:class:`~dra_harness.contention.ahead.Room`), counting as free those of pods ended and
        not yet seen ended. Then its attempt only marks it unschedulable, and nothing follows from that. False
        without a Room, with an admission layer, or while jobs sent ahead are not yet placed."""
        if self.room is None or self.extra is not None or self.ahead or not arrivals:
            return False
        with self.rec.lock:
            held = self._held(but=self.ending)
        return self._no_slot(arrivals, held)

    def _held(self, but: Collection[str] = ()) -> set[str]:
        """Devices allocated now, except those of the pods ``but`` (call under the recorder's lock)."""
        return {d for h in self.rec.holds.values() if h.pod not in but for d in h.devices}

    def _no_slot(self, jobs: Collection[str], held: set[str]) -> bool:
        """Whether no job of ``jobs`` finds a whole slot for its tier among the devices not ``held`` (needs a Room)."""
        assert self.room is not None
        return all(self.room.slots(tier, held) == 0 for tier in {self.by_name[j].tier for j in jobs})

    def _parked(self) -> bool:
        """Whether a pod of the run is parked as unschedulable for devices (not bound, marked ``PodScheduled=False``
        with a message naming claims). One turned away for anything else (a node selector no node matches) is not
        moved by devices coming back, so waiting for the scheduler to move it would only wait out MOVED_WITHIN_S."""
        with self.rec.lock:
            return any(not node and unschedulable and not deleting and phase not in ("Succeeded", "Failed")
                       and pod in self.rec.waits_for_devices
                       for pod, (phase, node, unschedulable, deleting) in self.rec.pod_state.items())

    def _waiting(self) -> bool:
        """Whether any pod of the run is not bound to a node: one that a device coming back could serve (a pod sent
        ahead has its devices by the bound)."""
        with self.rec.lock:
            return any(not node and not deleting and phase not in ("Succeeded", "Failed")
                       and self.rec.pod_job.get(pod, pod) not in self.ahead
                       for pod, (phase, node, _, deleting) in self.rec.pod_state.items())

    def _complete(self, pod: str, t: float) -> None:
        with self.rec.lock:
            if pod in self.rec.pod_ended or pod not in self.rec.pod_state:
                return  # taken away (evicted) before its end came: its next pod has its own
        self.ending.add(pod)
        self.ended_at[pod] = t
        try:  # asked again through a busy or restarting API server: a lost end would hold its devices for ever
            rest.answered(lambda: self.kube.patch(rest.PODS, pod, completed_status(self.containers), self.namespace,
                                                  sub="status"), 30)
        except rest.NotFound:  # deleted meanwhile (evicted): it has no end to write
            self.ending.discard(pod)
            self.ended_at.pop(pod, None)
            return
        if self.extra is not None:
            with self.rec.lock:
                job = self.rec.pod_job.get(pod, pod)
            self.extra.end(job)

    def _observe(self, t: float) -> None:
        """Pods seen starting this step get their end scheduled; pods seen ending close their run there."""
        with self.rec.lock:
            started = [(p, self.rec.pod_job.get(p, p)) for p in self.rec.pod_started if p not in self.started]
            gone = [p for p in self.live if p in self.rec.pod_ended or p not in self.rec.pod_state
                    or self.rec.pod_state[p][0] in ("Succeeded", "Failed") or self.rec.pod_state[p][3]]
            jobs = {p: self.rec.pod_job.get(p, p) for p in gone}
        self._seen_running()
        for pod, job in started:
            if pod in self.started:  # sent ahead and confirmed just now
                continue
            self.started.add(pod)
            self.live.add(pod)
            self.runs.setdefault(job, []).append([t, -1.0])
            heapq.heappush(self.events, (t + self._left(job), COMPLETE, next(self.seq), pod))
        for pod in gone:  # ended by us, or taken away while it ran (an eviction): its run ends at this step
            for run in self.runs.get(jobs[pod], []):
                if run[1] < 0:
                    run[1] = self.ended_at.get(pod, t)
                    if pod in self.ending:
                        run.append(1.0)  # completed: not work to resume from
            self.live.discard(pod)
            self.ending.discard(pod)

    def _left(self, job: str) -> float:
        """Scenario seconds this job's new pod runs: its duration, less the work kept at its last checkpoint."""
        j = self.by_name[job]
        ckpt = self.sc.tier(j.tier).checkpoint_interval_s
        interrupted = [r[:2] for r in self.runs.get(job, []) if r[1] >= 0 and len(r) == 2]
        if not interrupted or not ckpt:
            return j.duration_s
        return max(0.0, j.duration_s - metrics.saved_work(interrupted, ckpt)[0])

    def _events(self) -> int:
        """What the watches delivered and Kueue wrote so far: the quiet window waits for both to stop."""
        return len(self.rec.samples) + getattr(self.extra, "changes", 0)

    def _done(self) -> int:
        with self.rec.lock:
            return sum(1 for n in self.arrived if (r := self.rec.jobs.get(n)) and (r.completed or r.failed))

    def _unsettled(self) -> list[str]:
        out: list[str] = []
        with self.rec.lock:
            state = self.rec.pod_state
            holding = {h.pod for h in self.rec.holds.values()}
            for name in self.arrived if self.extra is None else ():  # a queued Job's pod waits for Kueue
                if name not in state and not self.rec.jobs[name].deleted:
                    out.append(f"pod {name} not seen created")
            out += self._ends_left(holding)
            for pod, (phase, node, unschedulable, deleting) in state.items():
                if deleting or phase in ("Succeeded", "Failed"):
                    continue
                if node and phase != "Running":
                    out.append(f"pod {pod} bound to {node}, not Running")
                elif node and pod not in holding:
                    out.append(f"pod {pod} Running, its claim's allocation not seen")
                elif not node and not unschedulable:
                    out.append(f"pod {pod} not yet tried by the scheduler")
            for hold in self.rec.holds.values():
                if hold.pod not in state or state[hold.pod][0] in ("Succeeded", "Failed"):
                    out.append(f"claim {hold.claim} of ended pod {hold.pod} still allocated")
        if not out and self.extra:
            with self.rec.lock:
                ended = {self.rec.pod_job.get(p, p) for p in self.ending}
            out = self.extra(ended)
        return out[:20]

    # -- results in scenario time ----------------------------------------------------
    def records(self) -> dict[str, JobRecord]:
        """The watches' records with every stamp moved to the scenario time of its step."""
        at, on = self.clock.at, self.clock.on
        out = {}
        with self.rec.lock:
            for name, r in self.rec.jobs.items():
                # A job's last pod is the one that completed; the harness knows when it ended it.
                ended = max((self.ended_at[p] for p, j in self.rec.pod_job.items() if j == name and p in self.ended_at),
                            default=None)
                completed = (at(r.completed) if ended is None else ended) if r.completed else None
                early = self.early.get(name)  # sent ahead: allocated, bound and running at its arrival, by the bound
                out[name] = replace(r, created=at(r.created), allocated=early if early is not None else at(r.allocated),
                                    scheduled=early if early is not None else at(r.scheduled),
                                    running=early if early is not None else at(r.running), completed=completed, failed=at(r.failed),
                                    deleted=at(r.deleted), devices=list(r.devices),
                                    runs=[[early if early is not None and i == 0 else on(a), on(b)]
                                          for i, (a, b) in enumerate(r.runs)],
                                    evictions=[on(e) for e in r.evictions])
        return out

    def holds(self) -> list[Hold]:
        at = self.clock.at
        return [Hold(h.claim, h.pod, list(h.devices), self.early_pods.get(h.pod, self.clock.on(h.start)),
                     self.ended_at[h.pod] if h.pod in self.ended_at else at(h.end)) for h in self.rec.all_holds()]

    def end(self) -> float:
        """The scenario time of the last step (the last completion, when every job completed)."""
        return self.clock.times[-1] if self.clock.times else 0.0
