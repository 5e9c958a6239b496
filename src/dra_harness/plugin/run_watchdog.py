"""Clean up after a test run that was killed outright (SIGKILL, OOM killer, a lost CI runner).

Nothing in a process killed with SIGKILL runs, so this small process, started by the
run's pytest in a session of its own, waits for that pid to go and then does what the
run's teardown would have: undo the run's cordons recorded on nodes (a kill mid-drain
would leave a node unschedulable for good), delete every object labelled with the run id
from a cluster that outlives the run (DeviceTaintRules first: a NoExecute rule left behind
would evict other tenants' pods), retrying what the API server turns away for a moment
(:func:`dra_harness.providers.sweep.sweep_run`), and remove the run's private lock directory. A run that ends
normally stops this process after its own cleanup.

Usage: ``python -m dra_harness.plugin.run_watchdog OWNER_PID RUN_ID LOCK_DIR [SWEEP KUBECONFIG CONTEXT LEASE_NAMESPACE]``
(an empty KUBECONFIG means the KUBECONFIG environment variable, an empty CONTEXT the current one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dra_harness.lifetime import alive


def start(owner: int, run_id: str, lock_dir: Path, sweep: bool, kubeconfig: str | None = None,
          context: str | None = None, lease_namespace: str = "default") -> subprocess.Popen:
    argv = [sys.executable, "-m", "dra_harness.plugin.run_watchdog", str(owner), run_id, str(lock_dir)]
    if sweep:
        argv += ["sweep", kubeconfig or "", context or "", lease_namespace]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def main(argv: list[str]) -> int:
    owner, run_id, lock_dir = int(argv[0]), argv[1], Path(argv[2])
    while alive(owner):
        time.sleep(0.5)
    if len(argv) > 3:
        from dra_harness.providers.sweep import sweep_run
        from dra_harness.kube.client import connect

        kubeconfig, context, lease_namespace = argv[4] or None, argv[5] or None, argv[6]
        try:
            left = sweep_run(connect(kubeconfig, context), run_id, lease_namespace=lease_namespace)
        except Exception as e:  # noqa: BLE001 - nobody is left to show a traceback to
            sys.stderr.write(f"dra-harness watchdog: could not clean up run {run_id}: {e}\n")
            left = ["?"]
        if left:
            sys.stderr.write(f"dra-harness watchdog: run {run_id} left {', '.join(left)}\n")
    shutil.rmtree(lock_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv[1:]))
