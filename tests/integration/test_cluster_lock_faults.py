"""The Lease lock under the faults of issue #60, against a real API server.

- A lost answer: run a's create of its shared lease is applied by the API server and its answer
  lost on the way back (:mod:`.lossy_proxy`); asked again, the create meets 409. Before, the lock
  took the 409 for "someone else's" and ran the test anyway, under a lease nobody renewed, and run
  b's exclusive section started in the middle of it once the lease looked expired.
- Two lease namespaces: runs given different ``--lease-namespace`` never saw each other's leases,
  and their exclusive (disruptive) sections ran at once.
- An identity that may not list leases cluster-wide cannot see those runs: refused in one line.

Leases last 3 s here (``lease_s``), so each test takes seconds.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.lock import LEASES, ClusterLock, refuse_blind_runs

from .lossy_proxy import LossyProxy
from .test_cluster_lock import _overlaps, run_at_once

pytestmark = pytest.mark.cluster
LEASE_S = 3.0
_RBAC = "rbac.authorization.k8s.io"
ROLES = rest.Resource(_RBAC, "v1", "roles", "Role", True)
ROLE_BINDINGS = rest.Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True)


def _shared_create(method: str, path: str, body: bytes) -> bool:
    """Run a's create of a shared lease."""
    if method != "POST" or not path.split("?")[0].endswith("/leases"):
        return False
    meta = json.loads(body)["metadata"]
    return meta["name"].startswith("dra-harness-s-") and meta["labels"][RUN_LABEL] == "run-a"


def _versions(kube: rest.Kube, run: str) -> set[str]:
    return {lease["metadata"]["resourceVersion"] for lease in kube.list(LEASES, None, label_selector=f"{RUN_LABEL}={run}")}


def test_a_shared_lease_whose_create_answer_was_lost_is_held_and_renewed_and_another_runs_exclusive_section_waits(
        small_cluster):
    kube = small_cluster.kube()
    spans: list[tuple[str, str, float, float]] = []
    seen_versions: set[str] = set()
    with LossyProxy(kube, _shared_create) as proxy:
        a = ClusterLock(proxy.kube(), "run-a", lease_s=LEASE_S)
        b = ClusterLock(kube, "run-b", lease_s=LEASE_S)
        entered = threading.Event()

        def run_a() -> None:
            with a.shared():
                start = time.monotonic()
                entered.set()
                while time.monotonic() - start < 3 * LEASE_S:  # three lease durations: b would take it unrenewed
                    seen_versions.update(_versions(kube, "run-a"))
                    time.sleep(0.2)
                spans.append(("a", "shared", start, time.monotonic()))

        def run_b() -> None:
            entered.wait(30)
            with b.exclusive():
                start = time.monotonic()
                time.sleep(0.5)
                spans.append(("b", "exclusive", start, time.monotonic()))

        run_at_once([run_a, run_b], a, b, timeout=60)
        assert proxy.lost, "the fault was not injected: no create of run a's shared lease lost its answer"
    assert len(spans) == 2, spans
    assert not _overlaps(spans), f"run b's exclusive section ran during run a's test: {_overlaps(spans)}"
    assert len(seen_versions) >= 4, f"run a's lease was not renewed during its test: versions {sorted(seen_versions)}"
    assert not a.lost.is_set()
    assert not kube.list(LEASES, None, label_selector=RUN_LABEL), "a lease was left behind"


def _two_namespaces(kube: rest.Kube) -> list[tuple[str, str, float, float]]:
    """Runs a (leases in default) and b (leases in lease-b) each run two exclusive sections and a shared one."""
    kube.create(rest.NAMESPACES, {"metadata": {"name": "lease-b"}})
    a = ClusterLock(kube, "run-a", "default", lease_s=LEASE_S)
    b = ClusterLock(kube, "run-b", "lease-b", lease_s=LEASE_S)
    spans: list[tuple[str, str, float, float]] = []

    def section(lock: ClusterLock, run: str, kind: str, hold: float) -> None:
        with lock.exclusive() if kind == "exclusive" else lock.shared():
            start = time.monotonic()
            time.sleep(hold)
            spans.append((run, kind, start, time.monotonic()))

    def run(lock: ClusterLock, name: str, delay: float) -> None:
        time.sleep(delay)
        for kind in ("exclusive", "shared", "exclusive"):
            section(lock, name, kind, 0.8)

    run_at_once([lambda: run(a, "a", 0.0), lambda: run(b, "b", 0.1)], a, b, timeout=90)
    return spans


def test_runs_with_different_lease_namespaces_never_overlap_an_exclusive_section(small_cluster):
    kube = small_cluster.kube()
    spans = _two_namespaces(kube)
    assert len(spans) == 6, spans
    assert not _overlaps(spans), _overlaps(spans)
    assert not kube.list(LEASES, None, label_selector=RUN_LABEL), "a lease was left behind"


def test_an_identity_that_may_not_list_leases_cluster_wide_is_refused_in_one_line(small_cluster):
    """Leases in its own namespace only (the Role alone): it would not see runs of another lease namespace."""
    kube = small_cluster.kube()
    kube.create(ROLES, {"metadata": {"name": "leases-here"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "delete", "patch"]}]},
        "default")
    kube.create(ROLE_BINDINGS, {"metadata": {"name": "leases-here"}, "roleRef": {"apiGroup": _RBAC, "kind": "Role",
                                                                                  "name": "leases-here"},
                                "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": "lease-only"}]}, "default")
    here_only = kube.impersonating("lease-only")
    here_only.list(LEASES, "default")  # the Role works: what it lacks is the list across namespaces
    with pytest.raises(InputError) as refused:
        refuse_blind_runs(here_only, "default")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("--lease-namespace default:") and "list on leases" in line, line
    refuse_blind_runs(kube, "default")  # negative control: an identity that may is not refused


def _config_map_create(method: str, path: str, body: bytes) -> bool:
    return method == "POST" and path.split("?")[0].endswith("/configmaps")


def test_a_create_whose_answer_was_lost_returns_what_it_made_and_a_name_another_holds_stays_a_conflict(small_cluster):
    """Any create, not only the lock's: sent again after the connection closed without an answer, the second send
    meets 409; the object is read back and is the caller's when it carries every label the caller sent."""
    kube = small_cluster.kube()
    with LossyProxy(kube, _config_map_create) as proxy:
        made = proxy.kube().create(rest.CONFIG_MAPS, {"metadata": {"name": "lost-answer", "labels": {RUN_LABEL: "run-a"}},
                                                      "data": {"a": "1"}}, "default")
        assert proxy.lost and made["metadata"]["name"] == "lost-answer" and made["data"] == {"a": "1"}
    # Negative control: the name is someone else's; our create's refusal is lost, and its resend's 409 stays ours to see.
    kube.create(rest.CONFIG_MAPS, {"metadata": {"name": "taken", "labels": {RUN_LABEL: "someone-else"}}}, "default")
    with LossyProxy(kube, _config_map_create) as proxy:
        with pytest.raises(rest.Conflict):
            proxy.kube().create(rest.CONFIG_MAPS, {"metadata": {"name": "taken", "labels": {RUN_LABEL: "run-a"}}}, "default")
        assert proxy.lost
