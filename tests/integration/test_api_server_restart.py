"""A control-plane restart mid-run costs a wait time, never a false verdict or a hang.

Staging clusters restart their API servers (upgrades, certificate rotation, a crash).
A wait in progress must reconnect and carry on until its own deadline; when the
deadline passes, the failure says the server was away. The negative control shows a
bare watch, the thing waits are built on, does break on the same restart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dra_harness.kube import rest
from dra_harness.kube.waits import WaitTimeout, wait_for_object, watch_until

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _configmap(kube: rest.Kube, data: dict[str, str]) -> None:
    body = {"metadata": {"name": "signal"}, "data": data}
    try:
        kube.create(rest.CONFIG_MAPS, body, "default")
    except rest.Conflict:
        kube.patch(rest.CONFIG_MAPS, "signal", {"data": data}, "default")


def test_a_wait_survives_a_killed_api_server_and_sees_the_change_made_after_it_returns(small_cluster):
    kube = small_cluster.kube()
    _configmap(kube, {"go": "no"})
    outcome: dict[str, object] = {}

    def wait() -> None:
        started = time.monotonic()
        try:
            obj = wait_for_object(kube, rest.CONFIG_MAPS, "signal", lambda o: o.get("data", {}).get("go") == "yes",
                                  90, "the signal to turn yes", namespace="default")
            outcome["data"] = obj["data"]
        except Exception as e:  # noqa: BLE001 - the assertion below names it
            outcome["error"] = e
        outcome["took"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)
    small_cluster.restart_component("kube-apiserver", kill=True, down_for=3.0)
    deadline = time.monotonic() + 60
    while True:  # the harness's own readiness probe: /readyz answers again
        try:
            kube.raw("/readyz")
            break
        except (rest.Unreachable, rest.ApiError):
            assert time.monotonic() < deadline, "the API server did not come back within 60s"
            time.sleep(0.2)
    _configmap(kube, {"go": "yes"})
    waiter.join(timeout=120)
    assert not waiter.is_alive(), "the wait hung past its deadline"
    assert "error" not in outcome, f"the wait failed across the restart: {outcome.get('error')!r}"
    assert outcome["data"] == {"go": "yes"}
    assert outcome["took"] < 90


def test_a_wait_given_the_action_sees_a_change_that_is_over_before_a_plain_wait_would_begin(small_cluster):
    """A pod a KWOK node evicts is gone within milliseconds, with the condition that says who evicted it.

    ``then`` acts after the wait's first list, so the watch sees every step; the control makes
    the same change first and waits after, as the eviction tests once did, and sees only the end.
    """
    kube = small_cluster.kube()

    def flash() -> None:  # marked, then gone at once, like an evicted pod
        kube.patch(rest.CONFIG_MAPS, "signal", {"metadata": {"labels": {"evicted": "yes"}}}, "default")
        kube.delete(rest.CONFIG_MAPS, "signal", "default")

    def follow(then) -> list[str]:
        marks: list[str] = []

        def gone(items: list[dict]) -> bool:
            marks.extend(i["metadata"].get("labels", {}).get("evicted", "") for i in items)
            return not items
        watch_until(kube, rest.CONFIG_MAPS, gone, 30, "the signal to go", namespace="default",
                    field_selector="metadata.name=signal", then=then)
        return [m for m in marks if m]

    _configmap(kube, {"go": "no"})
    assert follow(flash) == ["yes"], "the wait missed the mark made after its first list"
    _configmap(kube, {"go": "no"})
    flash()
    assert follow(None) == [], "control: a wait begun after the change cannot have seen the mark"


def test_a_wait_that_cannot_succeed_ends_at_its_deadline_and_says_the_server_was_away(small_cluster):
    kube = small_cluster.kube()
    _configmap(kube, {"go": "no"})
    failure: dict[str, object] = {}

    def wait() -> None:
        started = time.monotonic()
        try:
            wait_for_object(kube, rest.CONFIG_MAPS, "signal", lambda o: False, 20, "a condition that never holds",
                            namespace="default")
        except WaitTimeout as e:
            failure["text"] = str(e)
        failure["took"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)
    small_cluster.restart_component("kube-apiserver", kill=True, down_for=5.0)
    waiter.join(timeout=60)
    assert not waiter.is_alive(), "the wait hung past its deadline"
    assert 19 <= failure["took"] <= 30, f"the wait ended after {failure['took']:.1f}s, not at its 20s deadline"
    assert "timed out after 20s" in failure["text"] and "the API server was unreachable for" in failure["text"], failure["text"]


def test_a_bare_watch_breaks_when_the_api_server_is_killed(small_cluster):
    """Negative control: without the waits' reconnects, the same restart ends the stream and the re-watch fails."""
    kube = small_cluster.kube()
    _configmap(kube, {"go": "no"})
    _, version = kube.list_with_version(rest.CONFIG_MAPS, "default")
    broke: dict[str, object] = {}

    def follow() -> None:
        try:
            for _ in kube.watch(rest.CONFIG_MAPS, "default", version, timeout_seconds=30):
                pass
            broke["ended"] = True  # the stream ended early: the server went away
            list(kube.watch(rest.CONFIG_MAPS, "default", version, timeout_seconds=30))
        except rest.Unreachable as e:
            broke["error"] = e

    watcher = threading.Thread(target=follow)
    watcher.start()
    time.sleep(1.0)
    small_cluster.restart_component("kube-apiserver", kill=True, down_for=5.0)
    watcher.join(timeout=60)
    assert broke.get("ended") and isinstance(broke.get("error"), rest.Unreachable), broke


#: Loaded into the suite's pytest with -p: the first wait of the test itself (not the namespace's
#: ServiceAccount wait) kills the API server, which comes back 3 s later, while that wait runs.
RESTART_PLUGIN = '''
import os, threading, time
from dra_harness.kube import rest, waits
from dra_harness.providers.embedded.cluster import LocalCluster

_real, _fired = waits.watch_until, []


def watch_until(kube, res, *args, **kwargs):
    if not _fired and res is not rest.SERVICE_ACCOUNTS:
        _fired.append(time.monotonic())
        cluster = LocalCluster(os.environ["RESTART_CLUSTER"])
        threading.Thread(target=cluster.restart_component, args=("kube-apiserver",),
                         kwargs={"kill": True, "down_for": 3.0}).start()
        time.sleep(0.3)  # the server is going down as the wait starts
    return _real(kube, res, *args, **kwargs)


waits.watch_until = watch_until
if os.environ.get("RESTART_NO_RECONNECT"):  # the negative control: waits as they were, giving up at once
    waits._transient = lambda error: False
'''


def _suite_across_a_restart(cluster, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, float, bool]:
    (tmp_path / "restart_plugin.py").write_text(RESTART_PLUGIN)
    before = cluster.supervisor.get("kube-apiserver").pid
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_allocation.py", "-k", "claim_template_get_distinct",
         "-p", "restart_plugin", "--cluster=local", f"--cluster-name={cluster.name}", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "RESTART_CLUSTER": cluster.name, **env})
    after = cluster.supervisor.get("kube-apiserver")
    return out, time.monotonic() - started, after.pid != before and after.alive()


def test_a_suite_whose_wait_spans_an_api_server_restart_passes(small_cluster, tmp_path):
    """The acceptance case: kube-apiserver killed and restarted while a suite test waits; no false verdict."""
    out, took, restarted = _suite_across_a_restart(small_cluster, tmp_path)
    assert restarted, "the API server was not restarted during the suite"
    assert out.returncode == 0 and "1 passed" in out.stdout, (out.stdout + out.stderr)[-3000:]
    print(f"suite test across an API server restart: {took:.1f}s")


def test_without_reconnects_the_same_restart_costs_the_verdict(small_cluster, tmp_path):
    """Negative control: with waits that give up on an unreachable server, the same restart leaves no verdict (the
    test is not established: the API server did not take its request; a false FAIL before a test's unanswered
    request counted as the server away)."""
    out, _, restarted = _suite_across_a_restart(small_cluster, tmp_path, RESTART_NO_RECONNECT="1")
    assert restarted
    assert "1 passed" not in out.stdout and "1 skipped" in out.stdout, out.stdout[-3000:]
