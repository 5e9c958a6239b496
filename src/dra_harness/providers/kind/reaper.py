"""Delete a run's own kind cluster when the process that owns it is gone, however it went (kill -9 included).

Nothing in a process killed with SIGKILL runs, and a kind cluster is a set of Docker
containers that outlive it. This small process, started in a session of its own before
the cluster is created, waits for the owner's pid to go and then does what ``close``
would have done: ``kind delete cluster``, the Docker network kind made for us, and the
engine we started with its host changes (``provider.down``). A run that ends normally
deletes its cluster itself and stops this process.

Usage: ``python -m dra_harness.providers.kind.reaper OWNER_PID CLUSTER_NAME``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from dra_harness.lifetime import alive


def start(owner: int, name: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "dra_harness.providers.kind.reaper", str(owner), name]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def main(argv: list[str]) -> int:
    owner, name = int(argv[0]), argv[1]
    while alive(owner):
        time.sleep(0.5)
    from dra_harness.providers.kind import provider

    try:
        provider.down(name)
    except Exception as e:  # noqa: BLE001 - nobody is left to show a traceback to
        sys.stderr.write(f"dra-harness kind reaper: could not delete kind cluster {name}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv[1:]))
