"""Tear an ephemeral cluster down when the test run that owns it dies.

A test run killed with SIGKILL runs no cleanup; this small process, started with the
cluster and living in its own session, notices that the owner pid is gone and runs
``down``. Usage: ``python -m dra_harness.providers.embedded.watchdog OWNER_PID CLUSTER_NAME STATE_DIR``
(the state dir is in the command line so ``cluster down --all`` finds this process).
"""

from __future__ import annotations

import sys
import time

from dra_harness.lifetime import alive
from dra_harness.providers.embedded.cluster import LocalCluster


def main(argv: list[str]) -> int:
    owner, name = int(argv[0]), argv[1]
    cluster = LocalCluster(name)
    while alive(owner) and cluster.state_dir.exists():
        time.sleep(0.5)
    if cluster.state_dir.exists():
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
