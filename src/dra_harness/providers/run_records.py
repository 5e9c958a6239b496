"""Which clusters this machine's runs swept themselves off, for ``dra-harness cluster down --all``.

Why: ``cluster down --all`` is how a user takes everything of the harness off a machine; a run on a cluster that
outlives it (``--cluster existing``, a named embedded cluster) whose watchdog died with it, or gave up, left objects
there that no embedded cluster's removal touches. Each such run's watchdog records where the run was
(``$DRA_HARNESS_CACHE/runs/<run>.json``: kubeconfig, context, Lease namespace, the watchdog's pid) and removes the
record once the run is swept; ``cluster down --all`` sweeps the dead runs of every cluster a record names whose
watchdog is gone (:mod:`.dead_runs`), and drops the records of runs with nothing left.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dra_harness.components.build import cache_root
from dra_harness.errors import HarnessError, InputError, one_line
from dra_harness.lifetime import alive


@dataclass(frozen=True)
class Record:
    run_id: str
    kubeconfig: str  # "" : the KUBECONFIG of the run's environment, as the watchdog read it
    context: str
    lease_namespace: str
    watchdog_pid: int


def directory() -> Path:
    return cache_root() / "runs"


def write(record: Record) -> None:
    directory().mkdir(parents=True, exist_ok=True)
    (directory() / f"{record.run_id}.json").write_text(json.dumps(asdict(record)))


def remove(run_id: str) -> None:
    (directory() / f"{run_id}.json").unlink(missing_ok=True)


def orphaned() -> list[Record]:
    """Records whose watchdog is gone (a record that cannot be read is dropped: it names no cluster to sweep)."""
    out = []
    for path in sorted(directory().glob("*.json")) if directory().is_dir() else []:
        try:
            record = Record(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if not alive(record.watchdog_pid):
            out.append(record)
    return out


def sweep_recorded(say: Callable[[str], None]) -> None:
    """Sweep the dead runs of every cluster an orphaned record names, once per cluster; drop the records of runs
    with nothing left there. A cluster that cannot be reached is said in one line, and its records kept."""
    from dra_harness.kube.client import connect
    from dra_harness.providers import dead_runs
    from dra_harness.providers.sweep import refuse_reused_run_id

    targets: dict[tuple[str, str, str], list[Record]] = {}
    for record in orphaned():
        targets.setdefault((record.kubeconfig, record.context, record.lease_namespace), []).append(record)
    for (kubeconfig, context, namespace), records in targets.items():
        where = f"{kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}{f' ({context})' if context else ''}"
        try:
            kube = connect(kubeconfig or None, context or None)
            dead_runs.sweep(kube, namespace, say)
            for record in records:
                try:
                    refuse_reused_run_id(kube, record.run_id, namespace)
                except InputError:
                    continue  # something of it is still there (a Lease not yet expired): looked at again next time
                remove(record.run_id)
        except HarnessError as e:
            say(f"dra-harness: could not sweep dead runs on {where}: {one_line(e)}")
            if kubeconfig and not Path(kubeconfig).exists():  # the cluster's kubeconfig is gone (an embedded one, down)
                for record in records:
                    remove(record.run_id)
