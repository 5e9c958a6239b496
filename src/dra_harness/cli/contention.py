"""``dra-harness contention run`` and ``dra-harness bench allocation``.

Both bring up a small embedded cluster of their own (the scenario's nodes are added as
simulated nodes), or attach to a running one with ``--cluster-name``, and write their
figures and JSON under a run directory. Without a terminal the bars and spinners are plain
lines at least every 15 s (:mod:`dra_harness.heartbeat`): a design's run says the jobs settled
and the scenario time reached.
"""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import ExitStack, nullcontext
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from dra_harness import heartbeat
from dra_harness.cli.common import embedded_cluster, k8s_version_option, table_option
from dra_harness.report import rundir
from dra_harness.components import catalog
from dra_harness.bench import scheduler_perf
from dra_harness.bench.burst import burst
from dra_harness.contention import bench as bench_mod
from dra_harness.contention import compare, plots, queue, runner
from dra_harness.contention import floor as floor_mod
from dra_harness.contention.scenario import DESIGNS, ScenarioError, load
from dra_harness.yamlfile import seconds
from dra_harness.contention.settle import SchedulerQueue
from dra_harness.contention.topology import Topology
from dra_harness.kube.rest import Kube

console = Console(width=None if Console().is_terminal else 130)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def print_table(results: list[dict]) -> None:
    virtual = all(r.get("clock") == "virtual" for r in results)
    table = Table(title="contention: waits in scenario minutes (p95 within tolerable and nothing lost = meets"
                        + ("; virtual time: no floor)" if virtual else
                           "; tolerable within ten control-plane floors = not established)"))
    for col in ("design", "tier", "prio", "jobs", "p50", "p95", "p99", "max", "tolerable", "over", "verdict"):
        table.add_column(col, justify="left" if col in ("design", "tier", "verdict") else "right")
    m = lambda s: "-" if s is None else f"{s / 60:.1f}"  # noqa: E731
    for r in results:
        for t in r["tiers"]:
            w = t["wait_s"]
            colour = {"meets": "green", "misses": "red"}.get(t["verdict"], "yellow")
            table.add_row(r["design"], t["tier"], str(t["priority"]), str(t["jobs"]), m(w["p50"]), m(w["p95"]),
                          m(w["p99"]), m(w["max"]), m(t["tolerable_wait_s"]), str(t["over_tolerable"]),
                          f"[{colour}]{t['verdict']}[/]")
    console.print(table)
    for r in results:
        console.print(f"{r['design']}: {r['jobs_completed']}/{r['jobs_total']} completed, lost {r['jobs_lost']}, "
                      f"utilisation {r['utilisation']['mean']:.0%}, idle reserved {r['idle_reserved_device_s'] / 3600:.1f} "
                      f"device-h, {r['jobs_per_s']} jobs/s end to end, wall {r['wall_s']} s", highlight=False)
        if (broken := (r.get("virtual") or {}).get("ahead_broken")):
            console.print(f"  [yellow]{broken} job(s) sent ahead as certain to find devices did not[/]: their waits are "
                          f"those the watches saw, late by up to a step (see contention.ahead)", highlight=False)
        for tier, e in (r.get("evictions") or {}).items():
            q = e["requeue_wait_s"]
            console.print(f"  {tier}: {e['evictions']} evictions, {e['lost_device_hours']:.1f} device-h of work lost, "
                          f"re-queue wait p50 {m(q['p50'])} / p95 {m(q['p95'])} min", highlight=False)


@click.group()
def contention() -> None:
    """Mixed-priority workloads under the shared / reserved / pools / queue designs."""


@contention.command("run")
@click.argument("scenario", type=click.Path())
@click.option("--design", "designs", multiple=True, type=click.Choice(DESIGNS), help="Default: every design the scenario defines.")
@k8s_version_option
@click.option("--cluster-name", help="Use this running embedded cluster instead of starting one.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>.")
@click.option("--probe/--no-probe", default=True, show_default=True, help="Run the preemption probe first.")
@click.option("--clock", type=click.Choice(["virtual", "wall"]), default="virtual", show_default=True,
              help="virtual: scenario time moves from event to event once the control plane settled (waits do not "
                   "depend on the machine); wall: compressed wall time, with the control-plane floor.")
@click.option("--check-compression", is_flag=True,
              help="With --clock wall: run the scenario again at half its time compression; exit 1 if an established verdict flips.")
def contention_run(scenario: str, designs: tuple[str, ...], k8s_version: str, cluster_name: str | None,
                   out_dir: str | None, probe: bool, clock: str, check_compression: bool) -> None:
    """Run SCENARIO under each design; print per-tier waits; write JSON and PNGs to the run directory.

    In virtual time (the default) waits are scenario time by construction. In wall time the control
    plane's floor is measured first: a tier whose tolerable wait is within ten floors gets "not
    established" rather than a verdict that would rest on this machine's speed."""
    if check_compression and clock == "virtual":
        raise click.UsageError("--check-compression compares two wall-clock compressions: give --clock wall")
    sc = load(scenario)
    chosen = list(designs) or [d for d in DESIGNS if d in sc.designs]
    missing = [d for d in chosen if d not in sc.designs]
    if missing:
        raise ScenarioError(f"scenario file {scenario}: designs.{missing[0]}: not defined in this scenario (has: {', '.join(sc.designs)})")
    run_id = uuid.uuid4().hex[:12]
    out = Path(out_dir or rundir.default_root() / run_id).resolve() / "contention"
    # Wall time only: the file's compression, and half of it to check that no verdict was about the machine.
    compressions = [] if clock == "virtual" else [sc.time_compression] + ([sc.time_compression / 2] if check_compression else [])
    runs: list[list[dict]] = []
    with embedded_cluster(cluster_name, k8s_version, console, "ctn") as (cluster, kube, version):
        topo = Topology(kube, sc, run_id)
        stack = ExitStack()
        try:
            with heartbeat.status(console, f"creating {sc.nodes} simulated nodes x {sc.devices_per_node} devices"):
                topo.create()
            with heartbeat.status(console, f"starting Kueue {catalog.KUEUE.version} (the queue design)") if "queue" in chosen \
                    else nullcontext():
                admission = stack.enter_context(queue.kueue_running(cluster, kube, topo, "queue" in chosen))
            probe_result = None
            if probe and sc.probe.get("enabled", True):
                with heartbeat.status(console, "preemption probe: every device held by low priority, then one high-priority job"):
                    probe_result = runner.preemption_probe(kube, topo, low_run_s=seconds(sc.probe.get("low_duration", 20)))
                console.print(f"preemption probe: freed by preemption: {probe_result['freed_by_preemption']}, "
                              f"high-priority wait {probe_result['high_priority_wait_s']} s (wall); "
                              f"scheduler: {probe_result['scheduler_message']!r}", highlight=False, markup=False)
            if clock == "virtual":
                scheduler = SchedulerQueue.of_embedded(cluster)
                try:
                    runs.append([_run_design(kube, topo, d, out, version, probe_result, None, scheduler, admission)
                                 for d in chosen])
                finally:
                    scheduler.close()
                print_table(runs[-1])
                plots.designs(out / f"{sc.name}-designs.png", f"{sc.name}: p95 wait per design in virtual time (k8s {version})",
                              runs[-1])
            walls: dict[str, list[float]] = {}
            waited: dict[str, list[str]] = {}
            for kind in sorted({floor_mod.kind(d) for d in chosen} if compressions else ()):
                with heartbeat.status(console, f"control-plane floor: {floor_mod.SAMPLES} jobs one at a time on idle devices"
                                      + (" through Kueue" if kind == "queue" else "")):
                    waited[kind] = []
                    walls[kind] = floor_mod.measure(kube, topo, design=kind, quota_waits=waited[kind])
            for compression in compressions:
                topo.scenario = replace(sc, time_compression=compression)
                floors = {kind: floor_mod.summarise(w, compression, kind, len(waited[kind]) if kind == "queue" else None)
                          for kind, w in walls.items()}
                for floor in floors.values():
                    print_floor(floor)
                where = out if compression == sc.time_compression else out.parent / f"contention-at-{compression:g}x"
                runs.append([])
                for design in chosen:
                    runs[-1].append(_run_design(kube, topo, design, where, version, probe_result, floors[floor_mod.kind(design)]))
                print_table(runs[-1])
                plots.designs(where / f"{sc.name}-designs.png", f"{sc.name}: p95 wait per design at {compression:g}x "
                              f"(k8s {version})", runs[-1])
        finally:
            topo.scenario = sc
            stack.close()  # Kueue first: it lets go of its objects while the topology is still there
            topo.delete()
    console.print(f"JSON and figures: {out}")
    if check_compression:
        flips = compare.flips(runs[0], runs[1])
        for f in flips:
            console.print(f"[red]verdict flipped[/] {f}", highlight=False)
        console.print(f"compression check ({compressions[0]:g}x vs {compressions[1]:g}x): "
                      + (f"{len(flips)} verdict(s) flipped" if flips else "every established verdict held"), highlight=False)
        if flips:
            sys.exit(1)


def _run_design(kube: Kube, topo: Topology, design: str, where: Path, version: str, probe_result: dict | None,
                floor: dict | None, scheduler: SchedulerQueue | None = None, admission: queue.KueueQueue | None = None) -> dict:
    """One design's run: a bar of jobs settled on a terminal; elsewhere plain lines with the scenario time reached."""
    sc = topo.scenario
    at = "in virtual time" if scheduler else f"at {sc.time_compression:g}x"
    seen: list[runner.Reached] = []

    def how_far() -> str:
        if not seen:
            return "setting up (namespace, classes, watches)"
        r = seen[-1]
        return f"{r.settled}/{r.total} jobs settled, scenario t={heartbeat.duration(r.scenario_s())}"

    with _progress() as bar, heartbeat.Heartbeat(console.file, f"{sc.name} / design {design} {at}",
                                                 describe=how_far, enabled=heartbeat.plain_console(console)):
        task = bar.add_task(f"{sc.name} / {design} {at}: jobs settled", total=sc.jobs_total)

        def reached(r: runner.Reached) -> None:
            seen[:] = [r]
            bar.update(task, completed=r.settled)

        return runner.run_design(kube, topo, design, where, version, probe_result, floor=floor, progress=reached,
                                 scheduler=scheduler, admission=admission)


def print_floor(floor: dict) -> None:
    w = floor["wall_s"]
    through = " through Kueue" if "Kueue" in floor["measure"] else ""
    console.print(f"control-plane floor{through} at {floor['time_compression']:g}x: p95 {w['p95']:.2f} s wall "
                  f"({floor['samples']} jobs one at a time; p50 {w['p50']:.2f} s) = {floor['p95_s'] / 60:.1f} scenario min; "
                  f"a tolerable wait needs to exceed {floor['established_above_s'] / 60:.1f} min for a verdict", highlight=False)
    if floor.get("quota_waits"):
        console.print(f"  [yellow]{floor['quota_waits']} of its jobs waited for Kueue's quota[/]: the floor is higher than "
                      "the control plane's own", highlight=False)


@click.command("allocation")
@click.option("--rate", default=20.0, show_default=True, type=click.FloatRange(0.1, 200), help="Claims created per second.")
@table_option("nodes", default=100, range=(1, 200), help="Simulated nodes.")
@click.option("--devices-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--claims", default=400, show_default=True, type=click.IntRange(1, 5000), help="Claims (one pod each) in all.")
@click.option("--hold", default=2.0, show_default=True, type=click.FloatRange(0.1, 600), help="Seconds each pod holds its device.")
@k8s_version_option
@click.option("--cluster-name", help="Use this running embedded cluster instead of starting one.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>.")
@click.option("--burst", "burst_workload", type=click.Choice(list(scheduler_perf.WORK)), default=None,
              help="Instead: scheduler_perf's work of that workload, its pods created at once (pods/s as upstream counts them).")
def bench_allocation(rate: float, nodes: int, devices_per_node: int, claims: int, hold: float, k8s_version: str,
                     cluster_name: str | None, out_dir: str | None, burst_workload: str | None) -> None:
    """Claim created -> allocated under churn (like clusterloader2's ResourceClaimAllocationLatency)."""
    run_id = uuid.uuid4().hex[:12]
    out = Path(out_dir or rundir.default_root() / run_id).resolve() / "bench"
    started = time.monotonic()
    if burst_workload:
        _bench_burst(burst_workload, k8s_version, cluster_name, run_id, out)
        return
    with embedded_cluster(cluster_name, k8s_version, console, "ctn") as (_, kube, version):
        with _progress() as bar, heartbeat.follow(bar, "bench allocation"):
            task = bar.add_task(f"{claims} claims at {rate}/s on {nodes} nodes", total=claims)
            result = bench_mod.allocation(kube, run_id, version, rate, nodes, devices_per_node, claims, hold, out,
                                          progress=lambda n: bar.update(task, completed=n))
    lat = result["allocation_latency_s"]
    table = Table(title=f"claim created -> allocated, {claims} claims at {rate}/s, {nodes} nodes (Kubernetes {version})")
    for col in ("p50", "p95", "p99", "max", "allocated", "achieved rate"):
        table.add_column(col, justify="right")
    f = lambda s: "-" if s is None else f"{s * 1000:.0f} ms"  # noqa: E731
    table.add_row(f(lat["p50"]), f(lat["p95"]), f(lat["p99"]), f(lat["max"]), f"{result['allocated']}/{claims}",
                  f"{result['achieved_rate']:.1f}/s")
    console.print(table)
    console.print(f"JSON and figure: {out} ({time.monotonic() - started:.0f} s)")


def _bench_burst(workload: str, k8s_version: str, cluster_name: str | None, run_id: str, out: Path) -> None:
    nodes, per_node, init, pods = scheduler_perf.WORK[workload]
    with embedded_cluster(cluster_name, k8s_version, console, "ctn") as (_, kube, version):
        with _progress() as bar, heartbeat.follow(bar, "bench burst"):
            task = bar.add_task(f"{pods} pods at once; {nodes} nodes x {per_node} devices, {init} pre-allocated", total=pods)
            result = burst(kube, run_id, version, nodes, per_node, init, pods, out,
                           progress=lambda n: bar.update(task, completed=n))
    tp = result["scheduling_throughput"]
    avg = "-" if tp is None else f"{tp['Average']:.1f} pods/s (p50 {tp['Perc50']:.1f}, p90 {tp['Perc90']:.1f}, p99 {tp['Perc99']:.1f})"
    console.print(f"burst of {workload}'s work (Kubernetes {version}): scheduling throughput {avg}; "
                  f"created -> scheduled {result['created_to_scheduled_per_s'] or 0:.1f} pods/s, "
                  f"created -> allocated {result['created_to_allocated_per_s'] or 0:.1f} pods/s, "
                  f"pods created at {result['creation_per_s'] or 0:.1f}/s; {result['wall_s']:.0f} s", highlight=False)
    if api := result["api_server"]:
        console.print(f"API server during the burst: watchers closed for falling behind {api['watchers_closed_pods']} "
                      f"(pods), {api['watchers_closed_claims']} (claims); pod status patches refused (422) "
                      f"{api['pod_status_patches_refused']}", highlight=False)
    console.print(f"JSON: {out}")
