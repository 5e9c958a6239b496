"""``dra-harness bench ...``: performance figures, never pass/fail checks."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import click
from rich.console import Console

from dra_harness.bench.scheduler_perf import WORKLOADS
from dra_harness.bench.throughput import Throughput
from dra_harness.cli.common import k8s_version_option, table_option

err = Console(stderr=True)


@click.group()
def bench() -> None:
    """Print performance figures (nothing here is a pass/fail check)."""


@bench.command("cluster")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 20))
@table_option("nodes")
@table_option("gpus_per_node")
@k8s_version_option
def bench_cluster(runs: int, nodes: int, gpus_per_node: int, k8s_version: str) -> None:
    """Warm `cluster up` to all slices ready, `cluster down`, and memory."""
    from dra_harness.bench.cluster import cluster_bench

    cluster_bench(runs, nodes, gpus_per_node, k8s_version, err)


@bench.command("real-node")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--pods", default=5, show_default=True, type=click.IntRange(1, 50))
@k8s_version_option
def bench_real_node(runs: int, pods: int, k8s_version: str) -> None:
    """Real node Ready time and pod start latency with a claim (root)."""
    from dra_harness.bench.realnode import real_node_bench

    real_node_bench(runs, pods, k8s_version, err)


@bench.command("build")
@k8s_version_option
def bench_build(k8s_version: str) -> None:
    """Cold build of every component into empty, temporary caches."""
    from dra_harness.bench.cluster import cold_build_bench

    cold_build_bench(k8s_version, err)


@bench.command("floor")
@click.option("--samples", default=20, show_default=True, type=click.IntRange(3, 500))
@click.option("--gap", default=0.5, show_default=True, type=click.FloatRange(0.05, 10.0),
              help="Idle seconds before each pod of the idle pass.")
@click.option("--cluster-name", help="A running embedded cluster (default: a fresh one, removed after).")
@k8s_version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>/bench.")
def bench_floor(samples: int, gap: float, cluster_name: str | None, k8s_version: str, out_dir: str | None) -> None:
    """Where the contention floor's time goes: each hop of an uncontended job, idle and warm, and the machine's wake-up."""
    from rich.table import Table

    from dra_harness.bench import floor
    from dra_harness.cli.common import embedded_cluster

    before = _load()
    with embedded_cluster(cluster_name, k8s_version, err, "bench") as (_, kube, version):
        result = floor.run(kube, uuid.uuid4().hex[:12], samples, gap, lambda line: err.print(line, highlight=False))
    table = Table(title=f"one uncontended job, Kubernetes {version}: ms p50 / p95 over {samples} pods")
    for heading in ("hop", f"after {gap:g} s idle", "back to back"):
        table.add_column(heading, justify="left" if heading == "hop" else "right")
    for row in floor.rows(result):
        table.add_row(*row)
    Console().print(table)
    print(f"{before} before, {_load()} after; JSON: {floor.save({**result, 'k8s_version': version}, _out(out_dir))}")


_WORKLOAD = click.option("--workload", default="2000pods_200nodes", show_default=True,
                         type=click.Choice(WORKLOADS),
                         help="scheduler_perf's SchedulingWithResourceClaimTemplate workload.")


def _load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def _throughput(label: str, tp: Throughput | None) -> str:
    if tp is None:
        return f"{label}: no throughput (everything was scheduled within one sampling second)"
    return (f"{label}: average {tp['Average']:.1f} pods/s (p50 {tp['Perc50']:.1f}, p90 {tp['Perc90']:.1f}, "
            f"p99 {tp['Perc99']:.1f})")


@bench.command("scheduler-perf")
@_WORKLOAD
@k8s_version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>/bench.")
def bench_scheduler_perf(workload: str, k8s_version: str, out_dir: str | None) -> None:
    """Upstream scheduler_perf's DRA workload on this machine: its SchedulingThroughput."""
    from dra_harness.bench import scheduler_perf

    out = _out(out_dir)
    before = _load()
    tp = scheduler_perf.run(k8s_version, workload, out, lambda line: err.print(line, highlight=False))
    print(_throughput(f"scheduler_perf {scheduler_perf.TESTCASE}/{workload} (Kubernetes {k8s_version})", tp))
    print(f"{before} before, {_load()} after; data and log: {out}")


@bench.command("compare")
@_WORKLOAD
@k8s_version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>/bench.")
def bench_compare(workload: str, k8s_version: str, out_dir: str | None) -> None:
    """scheduler_perf, then the harness on the same work: both throughputs and the ratios (burst, half-full, sustained)."""
    from dra_harness.bench import compare, scheduler_perf
    from dra_harness.cli.common import embedded_cluster

    say = lambda line: err.print(line, highlight=False)  # noqa: E731
    out = _out(out_dir)
    loads = [_load()]
    reference = scheduler_perf.run(k8s_version, workload, out, say)
    loads.append(_load())
    if reference is None:
        raise click.ClickException(f"scheduler_perf scheduled {workload} within one sampling second: no rate to compare with")
    with embedded_cluster(None, k8s_version, err, "bench") as (_, kube, version):
        result = compare.run_harness_side(kube, uuid.uuid4().hex[:12], version, workload, reference, out, say)
    loads.append(_load())
    print(_throughput(f"scheduler_perf {workload}", reference))
    print(_throughput("harness burst (same work)", result["burst"]["scheduling_throughput"]))
    print(_throughput("harness half-full", result["half-full"]["scheduling_throughput"]))
    rate = result["sustained"]["rate"]
    print(f"harness sustained: {'none held' if rate is None else f'{rate:.1f} pods/s'} "
          f"(pods finishing after {compare.HOLD_S:g} s, claim p50 under {compare.SUSTAINED_P50_S:g} s)")
    for name, value in result["ratios"].items():
        print(f"ratio {name} {'-' if value is None else f'{value:.2f}'}")
    print(f"{loads[0]} before; {loads[1]} after scheduler_perf; {loads[2]} after the harness")
    (out / f"compare-{workload}.json").write_text(json.dumps(
        {"workload": workload, "k8s_version": k8s_version, "scheduler_perf": reference, "loads": loads, **result}, indent=1))
    print(f"JSON: {out / f'compare-{workload}.json'}")


def _out(out_dir: str | None) -> Path:
    from dra_harness.report import rundir

    return Path(out_dir or rundir.default_root() / uuid.uuid4().hex[:12]).resolve() / "bench"


@bench.command("contention")
@click.argument("scenario", type=click.Path())
@click.option("--design", "designs", multiple=True, help="Default: every design the scenario defines.")
@click.option("--cluster-name", help="A running embedded cluster (default: a fresh one, removed after).")
@k8s_version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>/bench.")
def bench_contention(scenario: str, designs: tuple[str, ...], cluster_name: str | None, k8s_version: str,
                     out_dir: str | None) -> None:
    """Wall time of each design of SCENARIO in virtual time: what a machine-independent verdict costs here."""
    from contextlib import ExitStack, nullcontext

    from rich.table import Table

    from dra_harness import heartbeat
    from dra_harness.cli.common import embedded_cluster
    from dra_harness.components import catalog
    from dra_harness.contention import queue, runner
    from dra_harness.contention.scenario import ScenarioError, load
    from dra_harness.contention.settle import SchedulerQueue
    from dra_harness.contention.topology import Topology

    sc = load(scenario)
    chosen = list(designs) or list(sc.designs)
    if unknown := [d for d in chosen if d not in sc.designs]:
        raise ScenarioError(f"scenario file {scenario}: designs.{unknown[0]}: not defined in this scenario (has: {', '.join(sc.designs)})")
    out = _out(out_dir) / f"contention-{sc.name}"
    before, rows = _load(), []
    with embedded_cluster(cluster_name, k8s_version, err, "bench") as (cluster, kube, version):
        topo = Topology(kube, sc, uuid.uuid4().hex[:12])
        scheduler = SchedulerQueue.of_embedded(cluster)
        with ExitStack() as stack:  # unwound last to first: Kueue stopped, the topology deleted, the scheduler's connection closed
            stack.callback(scheduler.close)
            stack.callback(topo.delete)
            topo.create()
            with (heartbeat.status(err, f"starting Kueue {catalog.KUEUE.version} (the queue design)") if "queue" in chosen
                  else nullcontext()):
                admission = stack.enter_context(queue.kueue_running(cluster, kube, topo, "queue" in chosen))
            seen: list[runner.Reached] = []
            for design in chosen:
                seen.clear()
                with heartbeat.Heartbeat(err.file, f"{sc.name} / {design} in virtual time", enabled=True,
                                         describe=lambda: (f"{seen[-1].settled}/{seen[-1].total} jobs, scenario t="
                                                           f"{heartbeat.duration(seen[-1].scenario_s())}") if seen else "setting up"):
                    r = runner.run_design(kube, topo, design, out, version, scheduler=scheduler, admission=admission,
                                          progress=lambda reached: seen.append(reached))
                rows.append(r)
    table = Table(title=f"{sc.name} in virtual time, Kubernetes {version}: wall time per design")
    for heading in ("design", "jobs", "steps (settled, no room)", "sent ahead (broken)", "settle p50 / p95 ms", "wall s", "lost"):
        table.add_column(heading, justify="left" if heading == "design" else "right")
    for r in rows:
        v, s = r["virtual"], r["virtual"]["settle_wall_s"]
        table.add_row(r["design"], str(r["jobs_total"]), f"{v['steps']} ({v['settled']}, {v['no_room']})",
                      f"{v['sent_ahead']} ({v['ahead_broken']})",
                      f"{(s['p50'] or 0) * 1000:.0f} / {(s['p95'] or 0) * 1000:.0f}", f"{r['wall_s']:.1f}", str(r["jobs_lost"]))
    Console().print(table)
    print(f"{before} before, {_load()} after; all designs {sum(r['wall_s'] for r in rows):.0f} s; JSON: {out}")
