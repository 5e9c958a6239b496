"""Waits built on list+watch, with explicit deadlines and typed errors.

A wait never sleeps-and-polls an object the API server can watch: it lists once,
then follows the watch, so it sees every intermediate state (and can time the one it
waits for). On timeout it raises :class:`WaitTimeout` carrying the last state seen
and, when the caller can tell, *why* the object is still not there (for a pod: the
scheduler's message). A ``fail`` callback stops the wait early when a state can no
longer turn good, like lightkube's ``raise_for_conditions``. A wait on pods also stops at
once, with :class:`WaitBlocked` ("not established"), when a pod cannot run for a reason of
the environment (:mod:`dra_harness.kube.podstates`: an image it cannot pull; :mod:`dra_harness.kube.refusals`:
a taint, node selector, cpu or memory that keeps it off every node that could take it), and a
timeout is judged by the cause the cluster states: one that is the environment's (a cordon that
did not lift) is not established either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import urllib3

from dra_harness import lifetime
from dra_harness.kube import events, podstates, refusals, rest
from dra_harness.kube.rest import ApiError, Gone, Kube, Resource, Unreachable
from dra_harness.kube.types import Obj
from dra_harness.errors import CheckError, NotEstablished


class WaitError(CheckError, AssertionError):
    """Base for wait failures: a harness error that explains itself, and an AssertionError so pytest reports a failed check."""


class WaitTimeout(WaitError):
    def __init__(self, what: str, timeout: float, last: object, why: str = "") -> None:
        self.what, self.timeout, self.last, self.why = what, timeout, last, why
        msg = f"timed out after {timeout:.0f}s waiting for {what}"
        if why:
            msg += f": {why}"
        super().__init__(msg)


class WaitFailed(WaitError):
    def __init__(self, what: str, reason: str, last: object) -> None:
        self.what, self.reason, self.last = what, reason, last
        super().__init__(f"gave up waiting for {what}: {reason}")


class WaitBlocked(NotEstablished):
    """A pod the wait needs cannot run in this environment (its image cannot be pulled...): the check
    is not established. Deliberately not a :class:`WaitError`: it is no failure of what is tested."""

    def __init__(self, what: str, reason: str, last: object) -> None:
        self.what, self.reason, self.last = what, reason, last
        super().__init__(f"stopped waiting for {what}: {reason}")


@dataclass
class Snapshot:
    """Objects of one list+watch, keyed by namespace/name."""

    items: dict[str, Obj] = field(default_factory=dict)

    def apply(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if kind == "DELETED":
            self.items.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.items[key] = obj

    def values(self) -> list[Obj]:
        return list(self.items.values())


#: Answers an API server gives while it restarts: the wait reconnects instead of failing.
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
#: Reconnect backoff: first retry, growth factor, ceiling (seconds).
BACKOFF = (0.2, 2.0, 2.0)


#: How long after an API server outage the cluster's components may still be catching up: client-go's
#: reflectors retry a broken watch after 0.8 s doubling to 30 s, up to twice that with jitter, and only forget
#: the backoff after 2 minutes without one (a kubelet whose API server was killed thrice in a minute saw a new pod
#: 80 s after the server was back). A wait that times out this soon after one says so.
COMPONENTS_CATCH_UP_S = 120.0
#: When the last outage any wait saw ended (monotonic) and how long it was: waits run in threads, one writes.
_last_outage: tuple[float, float] | None = None


@dataclass
class Outage:
    """Times a wait could not reach the API server; said in the timeout text if it mattered."""

    reconnects: int = 0
    seconds: float = 0.0
    last_error: str = ""
    _since: float | None = None

    def down(self, error: Exception) -> float:
        """Note a failed call; returns how long to sleep before the next try."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        self.reconnects += 1
        self.last_error = str(error).splitlines()[0][:200]
        first, factor, ceiling = BACKOFF
        return min(ceiling, first * factor ** min(self.reconnects - 1, 8))

    def up(self) -> None:
        global _last_outage
        if self._since is not None:
            now = time.monotonic()
            self.seconds += now - self._since
            _last_outage = (now, now - self._since)
            self._since = None

    def describe(self) -> str:
        self.up()
        if not self.reconnects:
            return _recent_outage()
        return (f"; the API server was unreachable for {self.seconds:.1f}s of the wait "
                f"({self.reconnects} reconnect attempts, last: {self.last_error})")


def _recent_outage() -> str:
    """A wait that saw no outage of its own but timed out soon after one that another wait saw."""
    last, now = _last_outage, time.monotonic()
    if last is None or now - last[0] > COMPONENTS_CATCH_UP_S:
        return ""
    return (f"; the API server was away {last[1]:.1f}s until {now - last[0]:.0f}s before this: the cluster's "
            f"components may still be backing off their watches (up to a minute after each outage)")


def _transient(error: Exception) -> bool:
    if lifetime.stopping.is_set():  # the run is being torn down: the cluster may be what is going away
        return False
    return isinstance(error, Unreachable) or (isinstance(error, ApiError) and error.status in TRANSIENT_STATUS)


def watch_until(
    kube: Kube,
    res: Resource,
    done: Callable[[list[Obj]], bool],
    timeout: float,
    what: str,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    fail: Callable[[list[Obj]], str | None] | None = None,
    why: Callable[[list[Obj]], str] | None = None,
    then: Callable[[], object] | None = None,
    environment: bool = True,
) -> list[Obj]:
    """Follow ``res`` until ``done(objects)`` holds; return the objects at that moment.

    On pods, unless ``environment`` is False (a wait that expects such a state), a pod that
    cannot run in this environment ends the wait at once with :class:`WaitBlocked`.

    ``then``, if given, runs once after the first list: the watch starts from that list's
    version, so every change the action causes is seen, even one over before the wait
    would otherwise have begun (a pod evicted and gone within milliseconds).

    An API server that restarts mid-wait costs the wait nothing but time: it reconnects
    with backoff and re-lists (events missed while it was away are then seen as state),
    until its own deadline; a timeout then says how long the server was away.
    """
    deadline = time.monotonic() + timeout
    snap = Snapshot()
    outage = Outage()
    placement = _Placement(kube)
    judge_refusals = environment and res.kind == "Pod"

    def relist() -> str:
        items, version = kube.list_with_version(res, namespace, label_selector, field_selector)
        snap.items.clear()
        for item in items:
            snap.apply("ADDED", item)
        return version

    def check() -> bool:
        current = snap.values()
        if done(current):
            return True
        if fail is not None:
            reason = fail(current)
            if reason:
                raise WaitFailed(what, reason, current)
        if environment and res.kind == "Pod":
            blocker = podstates.environment_blocker(current) or (placement.refusal(current) if judge_refusals else None)
            if blocker:
                raise WaitBlocked(what, blocker, current)
        return False

    def timed_out() -> WaitTimeout:
        current = snap.values()
        if judge_refusals and (refused := placement.refusal(current, final=True)):
            # judged by the cause the cluster states: a taint or cordon that did not lift is no fault of DRA's
            raise WaitBlocked(what, f"still after {timeout:.0f}s: {refused}", current)
        if why:
            detail = why(current)
        elif res.kind == "Pod":
            detail = _pods_summary(kube, current)
        else:
            detail = _summary(current)
        return WaitTimeout(what, timeout, current, detail + outage.describe())

    rv = ""
    while not rv:  # the first list: the server may be restarting as the wait begins
        try:
            rv = relist() or "0"
        except (Unreachable, ApiError) as e:
            if not _transient(e):
                raise
            pause = outage.down(e)
            if time.monotonic() + pause > deadline:
                raise timed_out() from e
            time.sleep(pause)
    outage.up()
    if then is not None:
        then()
    if check():
        return snap.values()
    must_relist = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise timed_out()
        try:
            if must_relist:  # too old a version, or back after an outage: start from the state as it is now
                rv = relist()
                must_relist = False
                outage.up()
                if check():
                    return snap.values()
            opened = time.monotonic()
            for kind, obj in kube.watch(
                res, namespace, rv, label_selector, field_selector, timeout_seconds=max(1, int(remaining))
            ):
                outage.up()
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                snap.apply(kind, obj)
                if check():
                    return snap.values()
                if time.monotonic() > deadline:
                    break
            if time.monotonic() - opened < 0.1:  # a server going down may end streams at once: do not spin
                time.sleep(0.1)
        except Gone:
            must_relist = True
        except urllib3.exceptions.ReadTimeoutError:
            pass
        except (Unreachable, ApiError) as e:
            if not _transient(e):
                raise
            must_relist = True
            time.sleep(max(0.0, min(outage.down(e), deadline - time.monotonic())))


class _Placement:
    """A wait's judge of scheduling refusals (:mod:`.refusals`): reads the nodes and slices when an unschedulable
    pod says something new (at most every few seconds), and remembers each (pod, message) it judged."""

    #: How long one read of the nodes and slices serves the judgements of one wait.
    FRESH_S = 5.0

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.read_at = -self.FRESH_S
        self.nodes: list[Obj] = []
        self.slices: list[Obj] = []
        self.judged: dict[tuple[str, str], refusals.Refusal | None] = {}

    def refusal(self, pods: list[Obj], final: bool = False) -> str | None:
        """Why the environment keeps a pod off every node that could take it; passing causes (a cordon, the node
        controller's taints) only when ``final``. The pod named, in one line."""
        if final:
            self.judged.clear()
            self.read_at = -self.FRESH_S
        for pod in pods:
            message = refusals.unschedulable_message(pod)
            if message is None:
                continue
            key = (pod["metadata"].get("uid", pod["metadata"].get("name", "")), message)
            if key not in self.judged:
                if time.monotonic() - self.read_at >= self.FRESH_S:
                    try:
                        self.nodes, self.slices = self.kube.list(rest.NODES), self.kube.list(rest.RESOURCE_SLICES)
                    except (ApiError, Unreachable):
                        return None  # judged at the next change; the wait goes on meanwhile
                    self.read_at = time.monotonic()
                self.judged[key] = refusals.environment_refusal(pod, self.nodes, self.slices, self.kube.device_drivers,
                                                                self.kube.cordoned_before)
            refused = self.judged[key]
            if refused and (final or not refused.passing):
                name = f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name', '')}"
                return f"the cluster keeps pod {name} off every node that could take it: {refused.reason}"
        return None


def wait_for_object(
    kube: Kube,
    res: Resource,
    name: str,
    condition: Callable[[Obj], bool],
    timeout: float,
    what: str,
    namespace: str | None = None,
    fail: Callable[[Obj], str | None] | None = None,
    why: Callable[[Obj | None], str] | None = None,
) -> Obj:
    """Wait until the named object exists and ``condition(obj)`` holds."""
    objs = watch_until(
        kube,
        res,
        lambda items: bool(items) and condition(items[0]),
        timeout,
        what,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        fail=(lambda items: fail(items[0]) if items else None) if fail else None,
        why=(lambda items: why(items[0] if items else None)) if why else None,
    )
    return objs[0]


def wait_for_deletion(kube: Kube, res: Resource, name: str, timeout: float, namespace: str | None = None) -> None:
    watch_until(  # a pod the scheduler refuses is no reason to stop waiting for it to go
        kube,
        res,
        lambda items: not items,
        timeout,
        f"{res.kind} {namespace + '/' if namespace else ''}{name} to be deleted",
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        why=lambda items: _summary(items),
        environment=False,
    )


def _summary(items: list[Obj]) -> str:
    if not items:
        return "last state: nothing matched"
    names = [f"{o['metadata'].get('name')}" for o in items[:5]]
    return f"last state: {len(items)} object(s) ({', '.join(names)})"


def _pods_summary(kube: Kube, pods: list[Obj]) -> str:
    """Each pod's state (the first five), then the warnings about any of them, by reason: a sandbox the runtime
    failed to create, a claim the driver failed to prepare, a claim the namespace's quota refused (which
    :func:`..policy.policy_refusal` reads from this text). "16 object(s)" was all such a timeout once said."""
    if not pods:
        return "last state: nothing matched"
    more = f" (the first 5 of {len(pods)})" if len(pods) > 5 else ""
    lines = [podstates.describe(p) for p in pods[:5]]
    names = {p["metadata"]["name"] for p in pods}
    by_reason: dict[str, tuple[set[str], str]] = {}
    for namespace in sorted({p["metadata"].get("namespace", "") for p in pods})[:3]:
        try:
            said = events.events_in(kube, namespace, "type=Warning,involvedObject.kind=Pod")
        except (ApiError, Unreachable):  # the timeout's own message matters more than its detail
            continue
        for e in said:
            pod = (e.get("involvedObject") or {}).get("name", "")
            if pod in names:
                on, _ = by_reason.get(e.get("reason", ""), (set(), ""))
                by_reason[e.get("reason", "")] = (on | {pod}, e.get("message", ""))
    lines += [f"warning {reason}: {message[:300]} (on {len(on)} pod(s), the last said)"
              for reason, (on, message) in sorted(by_reason.items())]
    return f"last state of {len(pods)} pod(s){more}:\n  " + "\n  ".join(lines)
