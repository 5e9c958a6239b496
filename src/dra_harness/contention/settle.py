"""When has the control plane settled on the scenario's current instant? The virtual clock's gate.

Why: in virtual time (:mod:`.virtual`) the scenario clock moves to the next event only once the
control plane has done everything the current one asks of it; a wait is then measured in scenario
time and the control plane's own latency is outside it by construction. Settled means, all at once
and still so after a quiet window:

- every pod the step created was seen by the run's watch, and every pod it ended was seen ended with
  its claims' devices given back (the resourceclaim controller's part);
- every pod bound to a node was seen Running (KWOK's part) with its claim allocated; every pod not
  bound carries the scheduler's ``PodScheduled=False`` (tried at least once);
- kube-scheduler's own queue (``scheduler_pending_pods``) holds nothing in ``active``, ``backoff`` or
  any other queue but ``unschedulable`` and ``gated``: no pod waits for an attempt;
- for the queue design, Kueue's: no workload waits for an admission attempt, and every admitted Job's
  pod exists (:class:`Conditions` gets it as ``extra``);
- for :data:`QUIET_S`, the scheduler made no new attempt and the watch delivered no new event.

What it cannot see: a reaction that has not begun within the quiet window (an informer further behind
than that), and the scheduler's own timers — a pod parked as unschedulable is retried after 5
minutes of wall time whatever happens, and is retried at once only when a cluster event's queueing
hint says it may now fit. A retry that only a timer would bring never comes within a step, so the pod
waits on in scenario time until an event (a completion) moves it: what an idle real scheduler would do
within seconds is then late by up to the next event. docs/contention.md's *Contention in virtual time* says so.
"""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_harness.errors import CheckError

#: How long every condition must hold unchanged before the step counts as settled (wall seconds).
QUIET_S = 0.04
#: How long a step that gave devices back waits for the scheduler to move a parked pod (wall seconds):
#: a version whose queueing hints move none would otherwise never settle.
MOVED_WITHIN_S = 2.0
#: The scheduler's queues a settled step may hold pods in: parked (waits for an event) or gated.
PARKED = ("unschedulable", "gated")


class NotSettled(CheckError):
    """The control plane did not settle on a step within its deadline; the message says what was still moving."""


@dataclass(frozen=True)
class QueueState:
    """kube-scheduler's queues and attempt counter, as its /metrics says now."""

    pending: dict[str, int]
    attempts: int
    moved: int = 0  # pods a claim's change moved out of the unschedulable queue (``scheduler_queue_incoming_pods_total``)

    @property
    def waiting(self) -> int:
        """Pods waiting for an attempt: any queue but the parked ones."""
        return sum(n for q, n in self.pending.items() if q not in PARKED)


def family(text: str, name: str) -> list[str]:
    """The labelled sample lines of one metric family. The text format keeps a family's samples together, so
    they are found with ``str.find``: a tenth of a millisecond in the scheduler's half megabyte, where going
    through every line took one to two."""
    prefix = f"{name}{{"
    start = 0 if text.startswith(prefix) else text.find(f"\n{prefix}") + 1  # not found: 0, which does not match
    out = []
    while text.startswith(prefix, start):
        end = text.find("\n", start)
        out.append(text[start:end] if end >= 0 else text[start:])
        if end < 0:
            break
        start = end + 1
    return out


def parse(text: str) -> QueueState:
    """``scheduler_pending_pods`` per queue and the sum of ``scheduler_schedule_attempts_total`` from Prometheus text."""
    pending: dict[str, int] = {}
    attempts = moved = 0
    for line in family(text, "scheduler_pending_pods"):
        pending[line.split('queue="', 1)[1].split('"', 1)[0]] = int(float(line.rsplit(" ", 1)[1]))
    for line in family(text, "scheduler_schedule_attempts_total"):
        attempts += int(float(line.rsplit(" ", 1)[1]))
    for line in family(text, "scheduler_queue_incoming_pods_total"):
        if line.startswith('scheduler_queue_incoming_pods_total{event="resource.k8s.io/ResourceClaim'):
            moved += int(float(line.rsplit(" ", 1)[1]))
    return QueueState(pending, attempts, moved)


class Metrics:
    """A component's /metrics over one kept-alive TLS connection (5 ms a read instead of 40 with a new one).

    ``token`` gives a bearer token for a component that takes only those (Kueue); it is asked again once
    when the component answers 401 (an expired token)."""

    def __init__(self, what: str, port: int, ctx: ssl.SSLContext, token: Callable[[], str] | None = None) -> None:
        self.what, self.port, self.ctx, self.token = what, port, ctx, token
        self.conn: http.client.HTTPSConnection | None = None
        self._bearer = token() if token else None

    def text(self) -> str:
        for attempt in (1, 2):  # a kept-alive connection the component closed is opened again once
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
                self.conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {self._bearer}"} if self._bearer else {})
                resp = self.conn.getresponse()
                body = resp.read().decode()
                if resp.status == 401 and self.token and attempt == 1:
                    self._bearer = self.token()
                    continue
                if resp.status != 200:
                    raise NotSettled(f"{self.what} /metrics answered {resp.status}: {body[:200]}")
                return body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        raise NotSettled(f"{self.what} /metrics refused a fresh token")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class SchedulerQueue(Metrics):
    """kube-scheduler's queues and attempts, read as a client certificate's holder."""

    def __init__(self, port: int, cert: Path, key: Path) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False  # the scheduler serves a self-signed certificate on loopback
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(cert, key)
        super().__init__("kube-scheduler", port, ctx)

    @classmethod
    def of_embedded(cls, cluster) -> SchedulerQueue:
        """The embedded cluster's scheduler, read as the cluster admin."""
        st = cluster.state()
        pki = cluster.state_dir / "pki"
        return cls(st.ports["scheduler"], pki / "admin.crt", pki / "admin.key")

    def read(self) -> QueueState:
        return parse(self.text())


@dataclass
class Snapshot:
    """One look at everything settling depends on; equal snapshots a quiet window apart mean settled."""

    unsettled: list[str]   # what still moves, one phrase each (empty: settled as far as this look sees)
    attempts: int
    events: int

    def key(self) -> tuple[int, int]:
        return self.attempts, self.events


#: A step's own conditions over the run's watches: phrases of what is not yet so (empty when all hold).
Conditions = Callable[[], list[str]]


def wait_settled(queue: SchedulerQueue, conditions: Conditions, events: Callable[[], int], deadline_s: float,
                 what: str, quiet_s: float = QUIET_S, every_s: float = 0.004, moved_above: int | None = None) -> int:
    """Until ``conditions`` hold, the scheduler waits on nothing, and neither moved for ``quiet_s``; the reads
    of the scheduler's queue it took.

    ``events`` counts what the run's watches delivered so far. ``moved_above``: the step gave devices back
    while pods were parked as unschedulable, so the scheduler must first move some of them on the claims'
    change (its counter above this), a positive sign that a quiet window alone cannot give on a loaded
    machine; waited for at most :data:`MOVED_WITHIN_S`. Within the quiet window only the watches are looked
    at; the scheduler (8 ms a read of its half-megabyte /metrics) is read where the window begins and where it
    ends: its attempts are a counter, so any attempt in between shows at the end, and a pod that entered its
    queue and left it again made an attempt. On the deadline, :class:`NotSettled` names what was still
    unsettled at the last look."""
    started = time.monotonic()
    deadline = started + deadline_s
    calm: Snapshot | None = None
    calm_since = 0.0
    reads = 0
    last = Snapshot(["not yet looked at"], -1, 0)
    while True:
        unsettled = conditions()
        now = time.monotonic()
        if unsettled or (calm is not None and events() != calm.events):
            calm = None
            last = Snapshot(unsettled, -1, events())
        elif calm is None or now - calm_since >= quiet_s:
            state = queue.read()
            reads += 1
            if state.waiting:
                unsettled = [f"{state.waiting} pod(s) waiting in kube-scheduler's queue "
                             f"({', '.join(f'{q} {n}' for q, n in sorted(state.pending.items()) if n)})"]
            elif moved_above is not None and state.moved <= moved_above and time.monotonic() - started < MOVED_WITHIN_S:
                unsettled = ["devices came back; kube-scheduler has not yet moved the pods parked as unschedulable"]
            last = Snapshot(unsettled, state.attempts, events())
            now = time.monotonic()
            if last.unsettled:
                calm = None
            elif calm is None or calm.key() != last.key():
                calm, calm_since = last, now
            else:
                return reads
        if now > deadline:
            raise NotSettled(f"{what}: the control plane had not settled after {deadline_s:.0f} s; last seen: "
                             + ("; ".join(last.unsettled[:5]) or "moving (new attempts or events within the quiet window)"))
        time.sleep(every_s)
