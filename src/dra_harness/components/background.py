"""Build components in a background process at the lowest CPU priority while the tests run.

``selftest`` needs, beyond the embedded cluster, components only some tests use: kind's
(kind, Helm, crictl, CoreDNS, kubeadm and kube-proxy), Kueue, and an older Kubernetes,
kubelet and example driver for the upgrade tests, and the oldest release's control plane for
``upgrade check`` there. Built one after another before the tests,
they add about 45 minutes to a CI run on an empty cache, which then overruns its limit. Built
here, niced, they take the CPU the tests leave idle while they wait on clusters; the tests
that need them run last (``tests/integration/conftest.py``). A test that needs a component
before it is done waits on that component's build lock, so nothing is built twice.

Run as ``python -m dra_harness.components.background DIRNAME...``; it leads its own process
group and takes its ``go`` children with it when it is told to stop or its parent dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from dra_harness import lifetime
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.components.catalog import Component
from dra_harness.errors import BuildError

#: Set by ``selftest`` for its pytest: "1" while this module builds behind the tests, "0" when nothing was
#: left to build. The tests' order reads it (all workers the same value: it is decided before they start).
BUILDING_ENV = "DRA_HARNESS_BACKGROUND_BUILDING"


def known() -> dict[str, Component]:
    """Every component a test may build, by directory name."""
    versions = catalog.KUBERNETES_VERSIONS
    comps = catalog.all_components() + [catalog.kubelet(v) for v in versions] + [catalog.kind_node(v) for v in versions if v not in catalog.NO_KIND_NODE]
    return {c.dirname: c for c in comps}


def for_tests() -> list[Component]:
    """What the project's tests build beyond the embedded cluster, in the order the last tests need it."""
    old, oldest = catalog.KUBERNETES_VERSIONS[1:3]  # the upgrade tests' from-version; upgrade check's oldest
    return [catalog.KUEUE, catalog.kubernetes(old), catalog.kubelet(old), catalog.example_driver("0.3.0"),
            catalog.KIND, catalog.CRI_TOOLS, catalog.HELM, catalog.COREDNS, catalog.kind_node(), catalog.nvidia_driver(),
            catalog.kubernetes(oldest)]


class Background:
    """The niced build process; :meth:`stop` ends it and every ``go`` it started."""

    def __init__(self, components: list[Component], log: Path) -> None:
        self.log = log
        missing = [c.dirname for c in components if not builder.is_cached(c)]
        self.proc: subprocess.Popen | None = None
        if missing:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "dra_harness.components.background", *missing],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_nice_and_die_with_parent())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _nice_and_die_with_parent() -> Callable[[], None]:
    die = lifetime.die_with_parent()

    def preexec() -> None:
        os.nice(19)
        die()
    return preexec


def _stop(signum: int, frame: FrameType | None) -> None:
    os.killpg(0, signal.SIGKILL)  # the group: this process and the go builds it started


def main(names: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    table = known()
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"background build: unknown components {', '.join(unknown)}", flush=True)
        return 2
    failed = 0
    for name in names:
        started = time.monotonic()
        try:
            built = builder.build(table[name])
        except BuildError as e:  # the test that needs it builds it again and fails with the message
            print(f"{name}: failed after {time.monotonic() - started:.0f}s: {str(e).splitlines()[0]}", flush=True)
            failed += 1
            continue
        print(f"{name}: {'cached' if built.cached else f'built in {built.seconds:.0f}s'} "
              f"(at {time.strftime('%H:%M:%S')})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
