"""``dra-harness upgrade --from V1 --to V2``: an in-place upgrade of the embedded cluster under live claims.

Exit 0 when every invariant held after every step, 1 when one broke (each breach printed), 2 for
bad input or an upgrade that could not be performed; the evidence goes under the report directory.
Each step is a line as it starts; without a terminal a heartbeat repeats the current one at least
every 15 s while it waits (:mod:`dra_harness.heartbeat`).
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from dra_harness import heartbeat
from dra_harness.components import catalog
from dra_harness.providers.localstate import DRIVER_DAEMONSET_STRATEGIES
from dra_harness.components.real_node_host import choose_real_nodes
from dra_harness.providers.profiles import EXAMPLE_DRIVER as DRIVER_NAME
from dra_harness.report import rundir, summary
from dra_harness.report.files import write_json
from dra_harness.upgrade import faults, plan, record, runner
from dra_harness.cli.common import table_option

console = Console(width=None if Console().is_terminal else 130)
VERSIONS = click.Choice(sorted(catalog.KUBERNETES_VERSIONS))


def print_result(result: runner.UpgradeResult) -> None:
    sp = result.spec
    drivers = (f", driver v{sp.driver_from} -> v{sp.driver_to}" + (" and back" if sp.and_back else "")
               if sp.driver_from != sp.driver_to else "")
    table = Table(title=f"in-place upgrade v{sp.from_version} -> v{sp.to_version}{drivers}: each step")
    for col in ("step", "at (s)", "stopping (s)", "then serving after (s)", "new claim's pod ran after (s)", "real-node pod (s)", "broken"):
        table.add_column(col, justify="left" if col in ("step", "broken") else "right")
    for s in result.steps:
        broken = sum(len(v) for v in s.broken.values())
        table.add_row(f"{s.process} -> v{s.version}", f"{s.started_at:.1f}", f"{s.stopping_s:.2f}", f"{s.serving_after_s:.2f}",
                      "-" if s.first_allocation_after_s is None else f"{s.first_allocation_after_s:.2f}",
                      ", ".join(f"{n} {t:.1f}" for n, t in s.real_node_pod_s.items()) or "-",
                      f"[red]{broken}[/]" if broken else "0")
    console.print(table)
    for name, breaches in result.invariants().items():
        mark = "[green]held[/]" if not breaches else f"[red]broken ({len(breaches)})[/]"
        console.print(f"{mark}  {name}: {runner.INVARIANT_TEXT[name]}", highlight=False)
        for b in breaches[:10]:
            console.print(f"      {b}", highlight=False, markup=False)
    for f in result.findings():
        console.print(f"[yellow]finding[/]  {f}", highlight=False)
    console.print(f"stored in etcd after the upgrade: {result.stored_after}; served: {', '.join(result.served_after)}",
                  highlight=False, markup=False)


@click.group("upgrade", invoke_without_command=True)
@click.option("--from", "from_version", type=VERSIONS, help="The release the cluster starts at (required without a subcommand).")
@click.option("--to", "to_version", type=VERSIONS, help="The release it is upgraded to: the next minor (default: --from, for a driver roll).")
@click.option("--driver-from", default=catalog.EXAMPLE_DRIVER_VERSION, show_default=True,
              type=click.Choice(catalog.EXAMPLE_DRIVER_VERSIONS), help="The example driver's release at the start.")
@click.option("--driver-to", default=catalog.EXAMPLE_DRIVER_VERSION, show_default=True,
              type=click.Choice(catalog.EXAMPLE_DRIVER_VERSIONS), help="The release every node's driver is rolled to.")
@click.option("--and-back", is_flag=True, help="Then roll every driver back to --driver-from (a downgrade).")
@click.option("--unsupported-skew", is_flag=True,
              help="First try the new kubelet under the old control plane on a real node (reported as a finding), then put it back.")
@click.option("--driver-daemonset", type=click.Choice(sorted(DRIVER_DAEMONSET_STRATEGIES)),
              help="Run the first real node's driver as a DaemonSet's pod, as clusters do, and roll it by its image: "
                   "surge (the chart's: the new pod beside the old) or replace (a DaemonSet's default: the old pod goes first).")
@table_option("real_nodes", help="Nodes with a real kubelet and containerd (default: 1 where this host can run one, as root).")
@table_option("nodes", range=(2, 16))
@click.option("--report-dir", type=click.Path(file_okay=False),
              help="The run directory: upgrade/ holds the evidence, signoff.html the report (default: reports/out/<run-id>).")
@click.option("--inject", multiple=True, type=click.Choice(sorted(faults.FAULTS)),
              help="Negative control: cause this fault after the first step (driver-gone-at-unprepare: during the "
                   "unprepared check; class-typo: for the last step; stored-unserved: while storage is read); "
                   "the run must then exit 1.")
@click.pass_context
def upgrade(ctx: click.Context, from_version: str | None, to_version: str | None, driver_from: str, driver_to: str, and_back: bool,
            unsupported_skew: bool, driver_daemonset: str | None, real_nodes: int | None, nodes: int, report_dir: str | None, inject: tuple[str, ...]) -> None:
    """Upgrade an embedded cluster in place with claims held throughout: Kubernetes to the next minor
    (control plane, then each kubelet, then each driver restarted), the example driver from one release
    to another (and back), or both. `upgrade check --to VERSION` says before an upgrade of any cluster
    what it would break."""
    if ctx.invoked_subcommand is not None:
        return
    if from_version is None:
        raise click.UsageError("Missing option '--from'.")
    to_version = to_version or from_version
    plan.check(from_version, to_version, driver_from, driver_to)
    real = choose_real_nodes(real_nodes, console.print)
    spec = runner.UpgradeSpec(from_version, to_version, real_nodes=real, nodes=nodes, inject=inject,
                              driver_from=driver_from, driver_to=driver_to, and_back=and_back,
                              unsupported_skew=unsupported_skew, driver_daemonset=driver_daemonset)
    runner.check(spec)
    run_id = uuid.uuid4().hex[:12]
    run_dir = Path(report_dir or rundir.default_root() / run_id).resolve()
    summary.start_run(run_dir, run_id, ["dra-harness", *sys.argv[1:]], None)  # refuses a directory that is not ours
    started = time.monotonic()
    # Not rich's status: the build inside runner.run draws its own bars, and rich allows one live display.
    beat = heartbeat.Heartbeat(console.file, "upgrade", enabled=heartbeat.plain_console(console))
    beat.update("building what is not cached")  # runner.run builds both releases' components first

    def say(step: str) -> None:
        console.print(f"[dim]{step}[/]", highlight=False)
        beat.update(step)  # printed just above; the heartbeat repeats it while the step waits

    try:
        with beat:
            result = runner.run(spec, say=say)
    except BaseException:
        summary.finish_run(run_dir, complete=False, exit_code=2)
        raise
    result.timings["total_s"] = time.monotonic() - started
    written = record.write(result, run_dir / "upgrade")
    # What the cluster ended as, for the report's header and diff (the full fingerprint is a suite run's).
    write_json(run_dir / "fingerprint.json", {
        "provider": "local", "command": ["dra-harness", *sys.argv[1:]],
        "kubernetes": {"gitVersion": f"v{to_version}", "upgraded_from": f"v{from_version}"},
        "drivers": [{"name": DRIVER_NAME, "version": f"v{driver_from if and_back else driver_to}"}],
    })
    rundir.record(run_dir, [*written.values(), run_dir / "fingerprint.json"])
    code = 0 if result.held else 1
    signoff = summary.finish_run(run_dir, complete=True, exit_code=code)
    print_result(result)
    console.print(f"evidence: {written['json']}, {written['plot']}; sign-off report: {signoff} "
                  f"({result.timings['total_s']:.0f} s in all)")
    sys.exit(code)


@upgrade.command("check")
@click.option("--to", "target", required=True, help="The release the cluster would be upgraded to, e.g. 1.38.")
@click.option("--kubeconfig", help="The cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).")
@click.option("--context", help="kubeconfig context.")
@click.option("--manifests", multiple=True, help="A manifest file of yours to check too (repeatable): the ones nothing has applied yet.")
@click.option("--json", "as_json", is_flag=True, help="The verdict as JSON.")
def check(target: str, kubeconfig: str | None, context: str | None, manifests: tuple[str, ...], as_json: bool) -> None:
    """Go/no-go for upgrading a cluster to --to: the DRA API versions it removes, the clients still
    requesting them (apiserver_requested_deprecated_apis), your manifests using them, the stored objects
    last written through them and by whom, and the DRA feature gates that change. Exit 1 when a client or
    manifest would break; nothing on the cluster is changed."""
    import json

    from dra_harness.kube.client import connect
    from dra_harness.upgrade import api_check

    api_check.minor(target, "--to")  # one line before any connection
    docs = api_check.documents(list(manifests))
    verdict = api_check.check(connect(kubeconfig, context), target, docs)
    if as_json:
        click.echo(json.dumps(verdict.as_json(), indent=2))
    else:
        for line in api_check.text(verdict):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    sys.exit(1 if verdict.breaks else 0)
