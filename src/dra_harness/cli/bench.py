"""``dra-harness bench ...``: performance figures, never pass/fail checks."""

from __future__ import annotations


import click
from rich.console import Console

from dra_harness.cli.common import k8s_version_option

err = Console(stderr=True)


@click.group()
def bench() -> None:
    """Print performance figures (nothing here is a pass/fail check)."""


@bench.command("cluster")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--nodes", default=4, show_default=True)
@click.option("--gpus-per-node", default=8, show_default=True)
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
