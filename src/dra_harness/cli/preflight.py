"""``dra-harness preflight``: what a cluster lets the harness test, before a run.

The same facts the first stage of ``run`` gathers (:mod:`dra_harness.checks.preflight`),
for a platform team asking before a run what it would establish on a cluster of theirs.
It creates one namespace of its own for the image probe and removes it (and anything of
its run id) before it returns, however it ends: killed outright, its watchdog does, as a run's. Like a run, it
first removes what dead runs left on the cluster (:mod:`dra_harness.providers.dead_runs`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dra_harness.cli.common import click_option
from dra_harness.options import OPTIONS, RULE_OPTIONS

err = Console(stderr=True)
#: The run options that say which cluster and driver, and how to reach and probe them.
_OPTIONS = ("--kubeconfig", "--context", "--driver", "--driver-daemonset", "--shell-image", "--expected-hardware",
            "--lease-namespace", "--lease-seconds", "--cluster-profile",
            *(f"--{dest.replace('_', '-')}" for dest in RULE_OPTIONS))


def _with_options(f: Any) -> Any:
    for o in reversed([o for o in OPTIONS if o.flag in _OPTIONS]):
        f = click_option(o)(f)
    return f


@click.command()
@_with_options
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the facts as JSON (preflight.json) here.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of a table.")
def preflight(out: str | None, as_json: bool, **values: Any) -> None:
    """Say what this cluster lets the harness test: rights, driver pods, images, admission, free devices."""
    from dra_harness import heartbeat, lifetime, providers
    from dra_harness.checks import preflight as facts_mod
    from dra_harness.cli.runner import new_run_id
    from dra_harness.options import RunConfig, cluster_rules
    from dra_harness.plugin import inputs, run_watchdog
    from dra_harness.errors import LockLost, LockTimeout, one_line
    from dra_harness.providers import dead_runs
    from dra_harness.providers.lock import ClusterLock
    from dra_harness.providers.sweep import sweep_run
    from dra_harness.report.files import write_json

    values = {**values, "cluster": "existing"}
    if values.get("kubeconfig"):
        values["kubeconfig"] = str(Path(values["kubeconfig"]).resolve())
    provider = providers.create(RunConfig.of(values), new_run_id().lower())
    inputs.check(provider, None)  # one line for a bad kubeconfig, an unreachable cluster, a bad profile
    lifetime.terminate_as_interrupt()
    lease_namespace = values.get("lease_namespace") or "default"
    # As a run's: a kill -9 of the preflight leaves its probe namespace to the watchdog, not to anyone's luck.
    kubeconfig, context = provider.watchdog_target() or (None, None)
    lock_dir = Path(tempfile.mkdtemp(prefix=f"dra-harness-{provider.run_id}-"))
    watchdog = run_watchdog.start(os.getpid(), provider.run_id, lock_dir, True, kubeconfig, context, lease_namespace,
                                  lease_seconds=provider.config.lease_seconds)
    handle = provider.open(owner_pid=os.getpid())
    dead_runs.sweep(handle.kube, lease_namespace, lambda line: click.echo(line, err=True),  # one line, never wrapped
                    spare=frozenset({provider.run_id}))
    handle.shell_image = values.get("shell_image")
    handle.kube.rules = cluster_rules(provider.config)  # judged as the run would create its pods
    if values.get("driver_daemonset"):
        namespace, _, name = values["driver_daemonset"].partition("/")
        handle.profile = dataclasses.replace(handle.profile, driver_daemonset=(namespace, name))
    # As a run reads its facts: under a shared Lease, never in the middle of another run's drain or driver restart.
    lock = ClusterLock(handle.kube, provider.run_id, lease_namespace, lease_s=provider.config.lease_seconds)
    try:
        with heartbeat.status(err, "asking the cluster what it lets us test"), lock.shared():
            facts = facts_mod.collect(handle, lease_namespace)
    except (LockTimeout, LockLost) as e:
        raise click.ClickException(f"not read: {one_line(e)}") from None
    finally:
        lock.close()
        with lifetime.cleaning_up():
            left = sweep_run(handle.kube, provider.run_id, lease_namespace=lease_namespace)
            if left:
                err.print(f"could not remove: {', '.join(left)}; the watchdog (pid {watchdog.pid}) tries again, its log: "
                          f"{run_watchdog.log_path(provider.run_id, None)}", highlight=False)
            else:
                run_watchdog.ended_clean(watchdog, handle.kube, provider.run_id, lease_namespace)
                shutil.rmtree(lock_dir, ignore_errors=True)
    if out:
        write_json(Path(out), facts.to_json())
    if as_json:
        import json

        click.echo(json.dumps(facts.to_json(), indent=2))
        return
    table = Table(title=f"what {handle.kubeconfig} lets dra-harness test ({facts.seconds:.1f} s)")
    for column in ("fact", "found", "evidence"):
        table.add_column(column, overflow="fold")
    for row in facts_mod.describe(facts):
        table.add_row(escape(row["fact"]), escape(row["value"]), escape(row["evidence"]))
    Console(file=sys.stdout, width=max(120, Console().width)).print(table)
