"""``dra-harness contention size``: the smallest cluster on which each design meets every tier.

A command of the ``contention`` group, kept in its own module: the search is
:func:`dra_harness.contention.sizing.search`; this module gives it a run function that builds each
probe's simulated nodes on an embedded cluster (started here, or attached with ``--cluster-name``),
runs the design in virtual time, so a probe's verdict does not depend on this machine's speed, and
deletes the nodes again. Each probe prints one line as it ends; without a terminal the spinners are
plain lines too (:mod:`dra_harness.heartbeat`).
"""

from __future__ import annotations

import sys
import uuid
from contextlib import ExitStack, nullcontext
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from dra_harness import heartbeat
from dra_harness.cli.common import embedded_cluster, k8s_version_option
from dra_harness.components import catalog
from dra_harness.contention import queue, runner, sizing
from dra_harness.contention.scenario import DESIGNS, Scenario, ScenarioError, load
from dra_harness.contention.settle import SchedulerQueue
from dra_harness.contention.topology import Topology
from dra_harness.kube.rest import Kube
from dra_harness.providers.local import LocalClusterApi
from dra_harness.report import rundir

console = Console(width=None if Console().is_terminal else 130)


def _minutes(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f}"


def probe_line(design: str, p: dict) -> str:
    """One probe as a progress line: size, answer, each tier's p95 (scenario minutes), wall time."""
    tiers = ", ".join(f"{name} p95 {_minutes(t['p95_s'])} min ({t['verdict']})" for name, t in p["tiers"].items())
    lost = f", {p['jobs_lost']} lost" if p["jobs_lost"] else ""
    capped = ", reservation cut to leave a device unreserved" if p["reserved_capped"] else ""
    return (f"{design} at {p['nodes']} nodes ({p['devices']} devices): {'meets' if p['meets'] else 'does not meet'}"
            f" — {tiers}{lost}{capped} ({p['wall_s']} s wall)")


def _say(design: str) -> sizing.Progress:
    """Each probe's line as it ends, on a terminal or not: a search runs for minutes between table rows."""
    return lambda p: console.print(probe_line(design, p), highlight=False)


def _run_at(cluster: LocalClusterApi, kube: Kube, version: str, run_id: str, out: Path,
            scheduler: SchedulerQueue) -> sizing.RunAt:
    """A run function for the search: each probe on its own simulated nodes, deleted after it."""
    def run_at(sc: Scenario, design: str) -> dict:
        topo = Topology(kube, sc, run_id)
        with ExitStack() as stack:  # unwound last to first: Kueue stopped, then the topology deleted
            stack.callback(topo.delete)
            with heartbeat.status(console, f"{design} at {sc.nodes} nodes: creating {sc.nodes} simulated nodes x "
                                  f"{sc.devices_per_node} devices"):
                topo.create()
            # Kueue counts devices through the tiers' DeviceClasses, whose names carry the topology's tag,
            # so each probe's topology gets its own Kueue, as `contention run` gives its one topology.
            with (heartbeat.status(console, f"starting Kueue {catalog.KUEUE.version} (the queue design)")
                  if design == "queue" else nullcontext()):
                admission = stack.enter_context(queue.kueue_running(cluster, kube, topo, design == "queue"))
            with heartbeat.status(console, f"{sc.name} / {design} at {sc.nodes} nodes ({sc.total_devices} devices), "
                                  "virtual clock"):
                return runner.run_design(kube, topo, design, out / f"probe-{sc.nodes}", version, scheduler=scheduler,
                                         admission=admission)
    return run_at


def print_table(sc: Scenario, rows: list[dict], shape: dict | None) -> None:
    node = f"{rows[0]['devices_per_node']} devices per node" if rows else ""
    if shape and shape.get("model"):
        node = f"{shape['model']}, {node}"
    table = Table(title=f"{sc.name}: the smallest cluster that meets every tier ({node}; waits in scenario minutes)")
    for col in ["design", "nodes", "devices"] + [f"{t.name} p95 / tolerable" for t in sc.tiers] + [
            "utilisation", "idle reserved device-h", "one smaller: tiers over / jobs over", "probes"]:
        table.add_column(col, justify="left" if col in ("design", "one smaller: tiers over / jobs over") else "right")
    for r in rows:
        by = {t["tier"]: t for t in r["tiers"]}
        waits = [f"{_minutes(by[t.name]['p95_s'])} / {_minutes(t.tolerable_wait_s)}" if t.name in by else "-" for t in sc.tiers]
        below = r["one_smaller"]
        smaller = ("-" if below is None else
                   f"{', '.join(below['tiers_over'] + below['not_established']) or 'none'} / {below['jobs_over']}"
                   + (f", {below['jobs_lost']} lost" if below["jobs_lost"] else ""))
        util = "-" if r["utilisation_mean"] is None else f"{r['utilisation_mean']:.0%}"
        idle = "-" if r["idle_reserved_device_h"] is None else f"{r['idle_reserved_device_h']:.1f}"
        found = r["nodes"] is not None
        table.add_row(r["design"], str(r["nodes"]) if found else "[red]not met[/]", str(r["devices"] or "-"),
                      *waits, util, idle, smaller, f"{r['runs']}" + ("" if r["monotone"] else " [yellow](not monotone)[/]"))
    console.print(table)
    for r in rows:
        if r["nodes"] is None:
            console.print(f"[red]{r['design']}[/]: {r['answer']} (the search stops at --most-nodes)", highlight=False)
        if not r["monotone"]:
            console.print(f"[yellow]{r['design']}[/]: a larger size missed where a smaller one met; bisection assumes more "
                          "nodes never hurt, so its answer may not be the smallest (every probe is in the JSON)", highlight=False)
    if shape and shape.get("partitions"):
        console.print(f"partitions {', '.join(shape['partitions'])}: {sizing.PARTITIONS_NOTE}", highlight=False)


@click.command("size")
@click.argument("scenario", type=click.Path())
@click.option("--design", "designs", multiple=True, type=click.Choice(DESIGNS), help="Default: every design the scenario defines.")
@click.option("--hardware", "hardware_file", type=click.Path(), help="The node you would buy (devicesPerNode, model, memoryGiB).")
@click.option("--cluster-name", help="Use this running embedded cluster instead of starting one.")
@k8s_version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>.")
@click.option("--most-nodes", default=200, show_default=True, type=click.IntRange(1, 200), help="Search no further than this.")
def size(scenario: str, designs: tuple[str, ...], hardware_file: str | None, cluster_name: str | None, k8s_version: str,
         out_dir: str | None, most_nodes: int) -> None:
    """The fewest nodes on which each design meets every tier of SCENARIO: probes in virtual time, bisected.

    Exit 0 when every design found a size within --most-nodes, 1 otherwise. Writes <scenario>-sizing.json and
    .png to the run's contention directory, and each probe's own results under probe-<nodes>/."""
    sc = load(scenario)
    chosen = list(designs) or [d for d in DESIGNS if d in sc.designs]
    missing = [d for d in chosen if d not in sc.designs]
    if missing:
        raise ScenarioError(f"scenario file {scenario}: designs.{missing[0]}: not defined in this scenario (has: {', '.join(sc.designs)})")
    shape = sizing.hardware(hardware_file) if hardware_file else None
    per_node = shape["devicesPerNode"] if shape else None
    sizing.scaled(sc, sizing.minimum(sc), per_node)  # a node the scenario's jobs do not fit fails now, before a cluster starts
    run_id = uuid.uuid4().hex[:12]
    out = Path(out_dir or rundir.default_root() / run_id).resolve() / "contention"
    rows = []
    with embedded_cluster(cluster_name, k8s_version, console, "ctn") as (cluster, kube, version):
        scheduler = SchedulerQueue.of_embedded(cluster)
        try:
            run_at = _run_at(cluster, kube, version, run_id, out, scheduler)
            for design in chosen:
                rows.append(sizing.search(sc, design, run_at, most_nodes=most_nodes, devices_per_node=per_node,
                                          progress=_say(design)))
        finally:
            scheduler.close()
    path = sizing.write(out, sc.name, rows, shape)
    print_table(sc, rows, shape)
    console.print(f"JSON and figure: {path} and {path.with_suffix('.png').name}", highlight=False)
    if not all(r["nodes"] for r in rows):
        sys.exit(1)
