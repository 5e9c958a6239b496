"""Faults a drawn shape injects while the run under test goes on, so harm-none is tested where it is hard.

Each fault is one a CI pipeline meets on a shared cluster (issue #34), injected through the
real thing, never a stand-in:

- ``clock-skew``: the second run's wall clock a minute ahead (every Lease it writes stamped by
  it, see :mod:`.hooks`), both runs taking turns through the cluster's Leases; the skew is
  measured on the Leases themselves (``acquireTime`` against the server's creation time);
- ``api-away-mid-drain``: the API server killed the moment the run cordons a node, and
  started again :data:`API_AWAY_S` later, longer than the run's lease lasts (the run is given
  :data:`API_LEASE_S`, so the outage can be half the default lease's minute; either way the
  cluster's components, their watches backing off while the server was away, then took about a
  minute, 57-70 s, to end the run's pods on the real node and give their devices back, which the
  run waits for);
- ``kill-mid-drain``: the run's pytest killed with SIGKILL two seconds after it cordons a
  node: only its watchdog is left to uncordon the node and sweep;
- ``throttled-sweep``: from the last test's teardown on, API Priority and Fairness answers 429
  to every write of the run's identity for :data:`STORM_S`, while the run cleans up and sweeps:
  a FlowSchema sends them to a priority level with no seats that rejects, whose one turn
  (APF runs a request where none runs) a slow reader holds.

An :class:`Injector` gives each run its environment and extra arguments, watches the cluster
beside the runs, injects, and afterwards says what it did (``injected``), or why it could
not (``not_reached``: the run never drained, say, because the shape left no node to drain).
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import psutil
import yaml

from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.rest import Kube
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.embedded.cluster import LocalCluster
from dra_harness.providers.embedded.twin import CI_NAMESPACE, Twin
from dra_harness.providers.lock import KIND_LABEL, LEASES

SKEW_S = 60
API_LEASE_S = 20
API_AWAY_S = 30.0
#: Longer than a test's teardown asks again for its namespace's deletion (the plugin's NAMESPACE_DELETE_S), so the
#: storm leaves the sweep work to do under it.
STORM_S = 45.0
#: How long the watchdog of a killed run may take to uncordon and sweep.
WATCHDOG_S = 180.0
#: The pytest plugin the run under test loads for faults that must act at a point in its life (``throttled-sweep``).
HOOKS = "tests.integration.twins.hooks"
GATE_ENV = "DRA_HARNESS_TWIN_GATE"
#: Put one rule of the harness back as it was before #34 in the run under test (negative controls; see hooks).
OLD_ENV = "DRA_HARNESS_TWIN_OLD"
SKEW_ENV = "DRA_HARNESS_TWIN_SKEW_S"

FLOW_GROUP = "flowcontrol.apiserver.k8s.io"
FLOW_SCHEMAS = rest.Resource(FLOW_GROUP, "v1", "flowschemas", "FlowSchema", False)
PRIORITY_LEVELS = rest.Resource(FLOW_GROUP, "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False)
STORM = "twin-storm"


@dataclass
class Injector:
    """What one shape's fault does to its runs; ``injected`` or ``not_reached`` says how it went."""

    cluster: LocalCluster
    made: Twin
    old: str = ""  # a rule put back as before #34 in the runs (negative controls)
    injected: str = ""
    not_reached: str = ""
    evidence: dict = field(default_factory=dict)
    _procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _gate: Path | None = None
    _storm_token: str = ""

    @property
    def fault(self) -> str:
        return self.made.shape.fault

    # -- what each run is given -------------------------------------------------------------
    def env(self, i: int) -> dict[str, str]:
        env = dict(os.environ)
        if self.old:
            env[OLD_ENV] = self.old
        if self.fault == "clock-skew" and i == 1:
            env[SKEW_ENV] = str(SKEW_S)
        if self._gate is not None:
            env[GATE_ENV] = str(self._gate)
        return env

    def args(self, i: int) -> list[str]:
        skewed = self.fault == "clock-skew" and i == 1
        lease = [f"--lease-seconds={API_LEASE_S}"] if self.fault == "api-away-mid-drain" else []
        return lease + (["-p", HOOKS] if self._gate is not None or self.old or skewed else [])

    def started(self, i: int, proc: subprocess.Popen) -> None:
        self._procs[i] = proc

    # -- beside the runs ----------------------------------------------------------------------
    def __enter__(self) -> Injector:
        if self.fault == "throttled-sweep":
            self._gate = Path(tempfile.mkdtemp(prefix="dra-harness-twin-gate-"))
            self._storm_token = _jail(self.cluster.kube())
        target = {"api-away-mid-drain": self._api_away, "kill-mid-drain": self._kill,
                  "throttled-sweep": self._storm, "clock-skew": self._measure_skew}.get(self.fault)
        if target is not None:
            self._thread = threading.Thread(target=self._guarded, args=(target,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=API_AWAY_S + STORM_S + 30)
        if self.fault == "throttled-sweep":
            _unjail(self.cluster.kube())

    def runs_over(self) -> None:
        """Called once every run has ended: nothing more to inject."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=API_AWAY_S + STORM_S + 30)
        if not self.injected and not self.not_reached:
            self.not_reached = {"throttled-sweep": "the run ended without its tests ending (no sweep seen)"}.get(
                self.fault, "the run never cordoned a node (no drain)")

    def _guarded(self, target) -> None:
        try:
            target()
        except Exception as e:  # noqa: BLE001 - said in the judgement, not lost in a thread
            self.not_reached = f"the injector failed: {e.__class__.__name__}: {e}"

    def _newly_cordoned(self) -> str | None:
        """Wait for the run to cordon a node; its name, or None once the runs are over."""
        kube = self.cluster.kube()
        before = {n["metadata"]["name"] for n in kube.list(rest.NODES) if n["spec"].get("unschedulable")}
        while not self._done.is_set():
            try:
                now = {n["metadata"]["name"] for n in kube.list(rest.NODES) if n["spec"].get("unschedulable")}
            except (rest.ApiError, rest.Unreachable):
                now = set()
            if now - before:
                return sorted(now - before)[0]
            time.sleep(0.1)
        return None

    def _measure_skew(self) -> None:
        """How far ahead of the API server each run's clock stamps its Leases: ``acquireTime`` (the run's clock)
        against ``creationTimestamp`` (the server's, whole seconds)."""
        kube, ahead = self.cluster.kube(), {}
        while not self._done.wait(0.3):
            try:
                leases = kube.list(LEASES, "default", label_selector=KIND_LABEL)
            except (rest.ApiError, rest.Unreachable):
                continue
            held = {(lo["metadata"]["labels"].get(RUN_LABEL), lo["metadata"]["labels"].get(KIND_LABEL)) for lo in leases}
            if len({run for run, _ in held}) > 1 and any(kind == "exclusive" for _, kind in held):
                self.evidence["contended"] = self.evidence.get("contended", 0) + 1  # both runs' leases at once
            for lease in leases:
                run = lease["metadata"]["labels"].get(RUN_LABEL, "?")
                stamped = dt.datetime.fromisoformat(lease["spec"]["acquireTime"].replace("Z", "+00:00"))
                created = dt.datetime.fromisoformat(lease["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
                ahead[run] = max(ahead.get(run, -1e9), (stamped - created).total_seconds())
        self.evidence["ahead"] = ahead
        if len(ahead) == 2:
            self.injected = ("run clocks ahead of the API server's by " + " and ".join(f"{s:.0f} s" for s in sorted(ahead.values()))
                             + f"; an exclusive Lease beside the other run's seen {self.evidence.get('contended', 0)} times")
        else:
            self.not_reached = f"Leases of {len(ahead)} run(s) seen, not 2: the runs never took turns"

    def _api_away(self) -> None:
        node = self._newly_cordoned()
        if node is None:
            return
        started = time.monotonic()
        self.cluster.restart_component("kube-apiserver", kill=True, down_for=API_AWAY_S)
        kube = self.cluster.kube()
        while time.monotonic() - started < API_AWAY_S * 2:  # serving again, before anything is judged
            try:
                kube.raw("/readyz")
                break
            except (rest.ApiError, rest.Unreachable):
                time.sleep(0.5)
        self.injected = (f"API server killed when the run cordoned {node}, serving again {time.monotonic() - started:.0f} s "
                         "later")

    def _kill(self) -> None:
        node = self._newly_cordoned()
        if node is None:
            return
        time.sleep(2)  # mid-drain: its evictions under way
        pytest = _pytest_of(self._procs.get(0))
        if pytest is None:
            self.not_reached = f"the run cordoned {node} but its pytest was gone before the kill"
            return
        pytest.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        self.injected = f"pytest (pid {pytest.pid}) killed with SIGKILL 2 s after the run cordoned {node}"
        self.evidence.update(node=node, killed_at=killed)

    def _storm(self) -> None:
        assert self._gate is not None
        while not (self._gate / "tests-over").exists():
            if self._done.wait(0.1):
                return
        kube = self.cluster.kube()
        rejected = _rejected(kube)
        _storm_on(kube)
        holder = _hold_the_turn(self.made.kubeconfig, self._storm_token)
        try:
            first = _until_rejected(connect(self.made.kubeconfig))
            (self._gate / "storm-on").touch()
            time.sleep(STORM_S)
        finally:
            holder.close()
            kube.delete(FLOW_SCHEMAS, STORM)
        self.evidence["rejected"] = _rejected(kube) - rejected
        self.injected = (f"every write of the run's ServiceAccount answered 429 by APF for {STORM_S:.0f} s from the "
                         f"last test's teardown ({self.evidence['rejected']} rejected; the first probe after {first:.1f} s)")

    # -- after the runs -------------------------------------------------------------------------
    def settle(self, leftovers) -> str:
        """For a killed run, wait until its watchdog has put the cluster right; what was seen, or ""."""
        if self.fault != "kill-mid-drain" or not self.injected:
            return ""
        deadline = time.monotonic() + WATCHDOG_S
        while (left := leftovers()) and time.monotonic() < deadline:
            time.sleep(1)
        took = time.monotonic() - self.evidence["killed_at"]
        self.evidence["watchdog_s"] = round(took, 1)
        return f"the watchdog left {left} {took:.0f} s after the kill" if left else \
            f"nothing of the run left and no cordon recorded {took:.0f} s after the kill (the watchdog's sweep)"


def _pytest_of(proc: subprocess.Popen | None) -> psutil.Process | None:
    """The main pytest process ``dra-harness run`` started (not its xdist workers or its watchdog)."""
    if proc is None or proc.poll() is not None:
        return None
    for child in psutil.Process(proc.pid).children():
        try:
            if "pytest" in child.cmdline():
                return child
        except psutil.NoSuchProcess:
            continue
    return None


# -- API Priority and Fairness ------------------------------------------------------------------
#: The storm's own identity and namespace: a ServiceAccount whose one slow request holds the jail's only turn.
STORM_NAMESPACE, STORM_SA = "twin-storm", "storm"
#: ConfigMaps the slow request lists: more than the kernel buffers between it and the API server hold.
BALLAST, BALLAST_BYTES = 20, 650_000
_RBAC = "rbac.authorization.k8s.io"
ROLES = rest.Resource(_RBAC, "v1", "roles", "Role", True)
ROLE_BINDINGS = rest.Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True)


def _jail(kube: Kube) -> str:
    """A priority level with no seats of its own and none to borrow, rejecting what it cannot run: a jail. APF
    still runs a request there while none is running (so a lone client is never starved): the storm's own
    ServiceAccount, whose listing of :data:`BALLAST` large ConfigMaps is read so slowly that it holds that one
    turn. Returns the storm ServiceAccount's token."""
    kube.create(PRIORITY_LEVELS, {"metadata": {"name": STORM}, "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
        "limitResponse": {"type": "Reject"}}}})
    kube.create(rest.NAMESPACES, {"metadata": {"name": STORM_NAMESPACE}})
    kube.create(rest.SERVICE_ACCOUNTS, {"metadata": {"name": STORM_SA}}, STORM_NAMESPACE)
    kube.create(ROLES, {"metadata": {"name": STORM}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}, STORM_NAMESPACE)
    kube.create(ROLE_BINDINGS, {"metadata": {"name": STORM}, "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": STORM},
                                "subjects": [{"kind": "ServiceAccount", "name": STORM_SA, "namespace": STORM_NAMESPACE}]},
                STORM_NAMESPACE)
    for i in range(BALLAST):
        kube.create(rest.CONFIG_MAPS, {"metadata": {"name": f"ballast-{i}"},
                                       "data": {"x": base64.b64encode(os.urandom(BALLAST_BYTES)).decode()}}, STORM_NAMESPACE)
    return kube.request("POST", rest.SERVICE_ACCOUNTS.path(STORM_NAMESPACE, STORM_SA, "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600},
    })["status"]["token"]


def _storm_on(kube: Kube) -> None:
    """Every write of the twin's ServiceAccount, and every request of the storm's, to the jail (matched before the
    built-in schemas). Writes only: the client rides out 429s on reads for a while by itself (``rest.BUSY_RETRY_S``),
    so a storm on reads shorter than that would only delay the run; writes it does not retry, the sweep must."""
    writes = ["create", "update", "patch", "delete", "deletecollection"]
    everything = {"apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
    kube.create(FLOW_SCHEMAS, {"metadata": {"name": STORM}, "spec": {
        "priorityLevelConfiguration": {"name": STORM}, "matchingPrecedence": 100,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "dra-harness", "namespace": CI_NAMESPACE}}],
                   "resourceRules": [{"verbs": writes, **everything}]},
                  {"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": STORM_SA, "namespace": STORM_NAMESPACE}}],
                   "resourceRules": [{"verbs": ["*"], **everything}]}]}})


def _unjail(kube: Kube) -> None:
    for res in (FLOW_SCHEMAS, PRIORITY_LEVELS, rest.NAMESPACES):
        try:
            kube.delete(res, STORM if res is not rest.NAMESPACES else STORM_NAMESPACE)
        except rest.NotFound:
            pass


def _hold_the_turn(kubeconfig: Path, token: str) -> ssl.SSLSocket:
    """Ask for the ballast as the storm's ServiceAccount and read none of it: the API server's handler blocks
    writing the answer, and holds the jail's turn until the socket is closed."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    server = urlparse(cluster["server"])
    context = (ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
               if "certificate-authority-data" in cluster else ssl.create_default_context(cafile=cluster["certificate-authority"]))
    raw = socket.create_connection((server.hostname, server.port), timeout=10)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn = context.wrap_socket(raw, server_hostname=server.hostname)
    conn.sendall(f"GET /api/v1/namespaces/{STORM_NAMESPACE}/configmaps HTTP/1.1\r\nHost: {server.netloc}\r\n"
                 f"Authorization: Bearer {token}\r\nAccept: application/json\r\n\r\n".encode())
    return conn


def _until_rejected(probe: Kube, timeout: float = 15.0) -> float:
    """Seconds until the ServiceAccount's requests are turned away (the API server's APF config is eventually
    consistent). A delete: the client retries reads on 429, not writes."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            probe.delete(rest.CONFIG_MAPS, "twin-storm-probe", CI_NAMESPACE)
        except rest.ApiError as e:
            if e.status == 429:
                return time.monotonic() - started
        time.sleep(0.2)
    raise TimeoutError(f"APF did not turn the run's ServiceAccount away within {timeout:.0f} s")


def _rejected(kube: Kube) -> int:
    """Requests APF rejected under the storm's flow schema so far (the API server's own counter)."""
    total = 0
    for line in kube.raw("/metrics").splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and f'flow_schema="{STORM}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total
