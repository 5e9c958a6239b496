"""Clean up after a test run that was killed outright (SIGKILL, OOM killer, a lost CI runner).

Nothing in a process killed with SIGKILL runs, so this small process, started by the
run's pytest (or ``dra-harness preflight``) in a session of its own, waits for that pid to go and then does what the
run's teardown would have: undo the run's cordons recorded on nodes (a kill mid-drain
would leave a node unschedulable for good), delete every object labelled with the run id
from a cluster that outlives the run (DeviceTaintRules first: a NoExecute rule left behind
would evict other tenants' pods), retrying what the API server turns away for a moment
(:func:`dra_harness.providers.sweep.sweep_run`), and remove the run's private lock directory. A run that ends
normally stops this process after its own cleanup.

Meanwhile it holds the run's Lease (:mod:`dra_harness.providers.liveness`), from the start until its own sweep
is done: while it is renewed, no other command takes the run for dead. A sweep that leaves something is tried
again for up to :data:`SWEEP_TRIES_S`; what is still there then stays under a Lease left to expire, and a later
run, ``dra-harness preflight`` or ``cluster down --all`` removes it (:mod:`dra_harness.providers.dead_runs`).
Everything it does and meets goes to its log (the run directory's ``watchdog.log``), never to /dev/null.

Usage: ``python -m dra_harness.plugin.run_watchdog OWNER_PID RUN_ID LOCK_DIR [SWEEP KUBECONFIG CONTEXT LEASE_NAMESPACE
LEASE_SECONDS]`` (an empty KUBECONFIG means the KUBECONFIG environment variable, an empty CONTEXT the current one).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dra_harness.components.build import cache_root
from dra_harness.lifetime import alive
from dra_harness.options import LEASE_SECONDS

if TYPE_CHECKING:
    from dra_harness.kube.rest import Kube

#: How long a sweep that leaves something is tried again (a control plane being upgraded), after the first one.
SWEEP_TRIES_S = 600.0
#: The pause between two such sweeps.
SWEEP_PAUSE_S = 15.0
log = logging.getLogger("dra_harness.watchdog")


def log_path(run_id: str, run_dir: Path | str | None) -> Path:
    """Where the watchdog of ``run_id`` writes: the run directory, else ``$DRA_HARNESS_CACHE/runs/<run>/`` (a
    preflight, a plain pytest run without ``--report-dir``)."""
    return (Path(run_dir) if run_dir else cache_root() / "runs" / run_id) / "watchdog.log"


def start(owner: int, run_id: str, lock_dir: Path, sweep: bool, kubeconfig: str | None = None,
          context: str | None = None, lease_namespace: str = "default", run_dir: Path | str | None = None,
          lease_seconds: int = LEASE_SECONDS) -> subprocess.Popen:
    """Start the watchdog of ``owner``, logging to :func:`log_path` (appended); with ``sweep``, record where the run
    is for ``cluster down --all`` (:mod:`dra_harness.providers.run_records`)."""
    from dra_harness.providers import run_records

    argv = [sys.executable, "-m", "dra_harness.plugin.run_watchdog", str(owner), run_id, str(lock_dir)]
    if sweep:
        argv += ["sweep", kubeconfig or "", context or "", lease_namespace, str(lease_seconds)]
    path = log_path(run_id, run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    if sweep:
        run_records.write(run_records.Record(run_id, kubeconfig or "", context or "", lease_namespace, proc.pid))
    return proc


def ended_clean(watchdog: subprocess.Popen, kube: Kube, run_id: str, lease_namespace: str,
                run_dir: Path | str | None = None) -> None:
    """The run swept itself clean: stop its watchdog, and delete its Lease and record (a Lease that cannot be deleted
    now expires unrenewed, and a later sweep of dead runs deletes it), and its log where no run directory keeps it."""
    from dra_harness.errors import KubeApiError
    from dra_harness.providers import liveness, run_records

    watchdog.kill()
    watchdog.wait()
    try:
        liveness.release(kube, run_id, lease_namespace)
    except KubeApiError as e:
        log.warning("the Lease of run %s stays until it expires: %s", run_id, e)
    run_records.remove(run_id)
    if not run_dir:
        shutil.rmtree(log_path(run_id, None).parent, ignore_errors=True)


class _Renewer(threading.Thread):
    """Renews the run's Lease every sixth of its duration until stopped; errors are logged and tried again."""

    def __init__(self, connect: Callable[[], Kube], run_id: str, namespace: str, seconds: int) -> None:
        super().__init__(daemon=True, name="run-lease")
        self.connect, self.run_id, self.namespace, self.seconds = connect, run_id, namespace, seconds
        self.stop = threading.Event()

    def run(self) -> None:
        from dra_harness.providers import liveness

        holder = f"{self.run_id}/watchdog-{os.getpid()}"
        failing = False
        while not self.stop.is_set():
            try:
                liveness.hold(self.connect(), self.run_id, self.namespace, holder, self.seconds)
                if failing:
                    log.info("renewing the run's Lease again")
                failing = False
            except Exception as e:  # noqa: BLE001 - any error (an exec plugin's too) is tried again; said once
                if not failing:
                    log.warning("could not renew the run's Lease (tried again every %.0f s): %s", self.seconds / 6, e)
                failing = True
            self.stop.wait(self.seconds / 6)


def main(argv: list[str]) -> int:
    owner, run_id, lock_dir = int(argv[0]), argv[1], Path(argv[2])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    renewer = None
    if len(argv) > 3:
        from dra_harness.kube.client import connect
        from dra_harness.providers import liveness, run_records

        kubeconfig, context, lease_namespace = argv[4] or None, argv[5] or None, argv[6]
        seconds = liveness.duration(float(argv[7]) if len(argv) > 7 else LEASE_SECONDS)
        clients: list[Kube] = []

        def kube() -> Kube:  # connected once, at first use: a kubeconfig gone bad is logged by whoever asks
            if not clients:
                clients.append(connect(kubeconfig, context))
            return clients[0]

        renewer = _Renewer(kube, run_id, lease_namespace, seconds)
        renewer.start()
        log.info("watching pid %d of run %s; holding its Lease %s/%s", owner, run_id, lease_namespace,
                 liveness.lease_name(run_id))
    while alive(owner):
        time.sleep(0.5)
    if renewer is not None:
        log.info("pid %d is gone: sweeping run %s", owner, run_id)
        left = _sweep(kube, run_id, lease_namespace)
        renewer.stop.set()
        renewer.join()
        if left:
            log.warning("run %s left %s; its Lease expires %d s after its last renewal, then a later run, "
                        "`dra-harness preflight` or `dra-harness cluster down --all` on this cluster removes them",
                        run_id, ", ".join(left), seconds)
        else:
            try:
                liveness.release(kube(), run_id, lease_namespace)
                run_records.remove(run_id)
                log.info("run %s swept; nothing left", run_id)
            except Exception as e:  # noqa: BLE001 - it expires unrenewed, and a later sweep deletes it
                log.warning("run %s swept, but its Lease stays until it expires: %s", run_id, e)
    shutil.rmtree(lock_dir, ignore_errors=True)
    return 0


def _sweep(kube: Callable[[], Kube], run_id: str, lease_namespace: str) -> list[str]:
    """Sweep the run, again while something is left, for up to :data:`SWEEP_TRIES_S`; what is left at the end."""
    from dra_harness.providers.sweep import sweep_run

    give_up = time.monotonic() + SWEEP_TRIES_S
    while True:
        try:
            left = sweep_run(kube(), run_id, lease_namespace=lease_namespace)
        except Exception as e:  # noqa: BLE001 - nobody is left to show a traceback to: its log says why
            left = [f"? (could not clean up: {e})"]
        if not left or time.monotonic() + SWEEP_PAUSE_S > give_up:
            return left
        log.warning("run %s left %s; swept again in %.0f s", run_id, ", ".join(left), SWEEP_PAUSE_S)
        time.sleep(SWEEP_PAUSE_S)


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv[1:]))
