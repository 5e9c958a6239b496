"""``dra-harness cluster ...`` (start, stop and inspect a cluster) and ``dra-harness diagnose``."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import click
from rich.console import Console

from dra_harness.cli.common import k8s_version_option, table_option
from dra_harness import providers
from dra_harness.providers import driver_configs
from dra_harness.providers.chart_values import helm_user_args
from dra_harness.providers.base import StandaloneSpec
from dra_harness.errors import ClusterError
from dra_harness.providers import open_cluster, running
from dra_harness.providers.localstate import DEFAULT_NAME

err = Console(stderr=True)
#: Providers whose clusters ``cluster up`` and ``cluster down`` start and remove.
STANDALONE = [name for name, p in providers.registry().items() if p.standalone]


@click.group()
def cluster() -> None:
    """The embedded local cluster (real control plane, KWOK nodes, example driver)."""


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # The name becomes a directory: keep it a plain DNS label.
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", value):
        raise click.BadParameter("use lowercase letters, digits and '-' (at most 40)")
    return value


def _config_names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [v for v in value if v not in driver_configs.CONFIGS]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r} is no driver configuration; known: {CONFIG_NAMES}")
    return value


CONFIG_NAMES = ", ".join(driver_configs.CONFIGS)
name_option = click.option("--name", default=DEFAULT_NAME, show_default=True, help="Cluster name.", callback=_cluster_name)


@cluster.command()
@name_option
@table_option("nodes")
@table_option("gpus_per_node")
@k8s_version_option
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
@table_option("real_nodes", help="Nodes with a real kubelet and containerd (default: 1 where possible, else 0 with the reason).")
@click.option("--provider", type=click.Choice(STANDALONE), default="local", show_default=True,
              help="local: embedded cluster; kind: a kind cluster (Docker) with the driver installed by its own Helm chart.")
@table_option("kind_node_image", "--node-image")
@table_option("driver_image")
@table_option("kind_install", "--install")
@click.option("--driver", type=click.Choice(["example", "nvidia"]), default="example", show_default=True,
              help="example: the SIGs example driver; nvidia: NVIDIA's DRA driver on emulated GPUs (H100, at most 8 per node).")
@click.option("--driver-config", "driver_config", multiple=True, metavar="NAME", callback=_config_names,
              help=f"The example driver started in this configuration on every node (repeat to combine): {CONFIG_NAMES}.")
@click.option("--helm-set", "helm_set", multiple=True, metavar="KEY=VALUE",
              help="kind: a value for the driver's Helm chart (repeatable), e.g. kubeletPlugin.gpuPartitions=4.")
@click.option("--helm-values", "helm_values", multiple=True, metavar="FILE",
              help="kind: a values file for the driver's Helm chart (repeatable); --helm-set pairs win over it.")
def up(name: str, nodes: int, gpus_per_node: int, k8s_version: str, timeout: float, real_nodes: int | None,
       provider: str, kind_node_image: str | None, driver_image: str | None, kind_install: str, driver: str,
       driver_config: tuple[str, ...], helm_set: tuple[str, ...], helm_values: tuple[str, ...]) -> None:
    """Start a cluster; returns when every node's slices hold all its devices."""
    chosen = providers.registry()[provider]
    if driver_config and (driver != "example" or not chosen.controls_driver):
        raise click.BadParameter(f"the example driver's configurations, on a cluster whose driver the harness runs "
                                 f"(--provider local), not --provider {provider} --driver {driver}; on kind, "
                                 "give the chart's values with --helm-set", param_hint="--driver-config")
    if (helm_set or helm_values) and chosen.controls_driver:
        raise click.BadParameter(f"the driver's Helm chart runs on kind, not --provider {provider} "
                                 "(use --driver-config there)", param_hint="--helm-set/--helm-values")
    kubeconfig = chosen.up_standalone(
        StandaloneSpec(name, nodes, gpus_per_node, k8s_version, timeout, real_nodes, kind_node_image, driver_image, kind_install, driver,
                       helm_user_args(helm_set, helm_values)), err)
    if driver_config:
        chosen.configure_standalone(name, driver_config, (), timeout, err)
    click.echo(str(kubeconfig))


@cluster.command("driver-config")
@name_option
@click.argument("config", nargs=-1, required=True, callback=_config_names)
@click.option("--node", "nodes", multiple=True, help="Only this node (repeatable; default: every node).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for each node's slices.")
@click.option("--provider", type=click.Choice(STANDALONE), default="local", show_default=True)
def driver_config(name: str, config: tuple[str, ...], nodes: tuple[str, ...], timeout: float, provider: str) -> None:
    """Restart a running cluster's example driver in CONFIG (names that combine, or ``default`` to go back):
    returns once every node's slices show it. ``cluster status`` shows each node's."""
    providers.registry()[provider].configure_standalone(name, config, nodes, timeout, err)


@cluster.command()
@name_option
@click.option("--all", "all_", is_flag=True, help="Every cluster of this user, including stale ones; and what dead runs "
              "of this machine left on clusters that outlive them (--cluster existing).")
@click.option("--provider", type=click.Choice(STANDALONE), default="local", show_default=True)
def down(name: str, all_: bool, provider: str) -> None:
    """Stop a cluster's processes and remove its state (kind: delete the kind cluster)."""
    providers.registry()[provider].down_standalone(name, all_, err)
    if all_:
        from dra_harness.providers import run_records

        run_records.sweep_recorded(lambda line: click.echo(line, err=True))  # one line each, never wrapped


@cluster.command()
@name_option
@click.option("--json", "as_json", is_flag=True)
def status(name: str, as_json: bool) -> None:
    """Show whether a cluster's processes are running."""
    info = running(name).status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{info['name']}: Kubernetes v{info['k8s_version']}, {info['nodes']} nodes x {info['gpus_per_node']} devices, {info['server']}")
    for proc, state in sorted(info["processes"].items()):
        click.echo(f"  {proc:32} {state}")
    for node, driver in info["drivers"].items():
        click.echo(f"  driver on {node:22} {driver}")
    if not info["healthy"]:
        sys.exit(1)


@cluster.command()
@name_option
def kubeconfig(name: str) -> None:
    """Print the path of a cluster's admin kubeconfig."""
    c = open_cluster(name)
    if not c.kubeconfig.exists():
        raise ClusterError(f"cluster {name!r} is not up")
    click.echo(str(c.kubeconfig))


@cluster.command()
@name_option
def env(name: str) -> None:
    """Print shell exports for the cluster: KUBECONFIG, and PATH with the matching kubectl first."""
    c = open_cluster(name)
    st = c.state()
    if st is None:
        raise ClusterError(f"cluster {name!r} is not up")
    kubectl_dir = Path(st.binaries["kubectl"]).parent
    click.echo(f"export KUBECONFIG={c.kubeconfig}")
    click.echo(f'export PATH={kubectl_dir}:"$PATH"')


# -- diagnosis -------------------------------------------------------------------
@click.command()
@click.option("-n", "--namespace", help="Only this namespace (default: all).")
@click.option("--kubeconfig", type=click.Path(), help="Default: the embedded cluster --name if given, else KUBECONFIG "
              f"if set (as kubectl), else the embedded cluster {DEFAULT_NAME!r}.")
@click.option("--context")
@click.option("--name", help="An embedded cluster's name.", callback=lambda c, p, v: v and _cluster_name(c, p, v))
@click.option("--json", "as_json", is_flag=True)
def diagnose(namespace: str | None, kubeconfig: str | None, context: str | None, name: str | None, as_json: bool) -> None:
    """Say why each Pending pod with ResourceClaims or DRA extended resources is not scheduled."""
    from dra_harness.checks.diagnose import diagnose as run_diagnosis
    from dra_harness.kube.client import connect

    embedded = open_cluster(name or DEFAULT_NAME)
    if kubeconfig is None and (name or not os.environ.get("KUBECONFIG")) and embedded.kubeconfig.exists():
        kubeconfig = str(embedded.kubeconfig)
    results = run_diagnosis(connect(kubeconfig, context), namespace)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
        return
    if not results:
        click.echo("no Pending pods with resource claims or DRA extended resources")
    for r in results:
        click.echo(f"{r.namespace}/{r.pod}: {r.cause}: {r.message}")
