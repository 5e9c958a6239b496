"""``dra-harness canary start | verify | stop``: claims held across an upgrade the harness does not perform.

Exit codes as everywhere: 0 when every invariant held, 1 when one broke, 2 for bad input or a
cluster that cannot be reached.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from dra_harness import heartbeat
from dra_harness.kube.rules import PAUSE_IMAGE
from dra_harness.upgrade import canary
from dra_harness.upgrade.workloads import DEVICE_CLASS

console = Console(width=None if Console().is_terminal else 130)
_KUBECONFIG = click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
                           help="Default: the one the canary was started with.")


@click.group("canary")
def canary_group() -> None:
    """Long-running pods with claims, recorded before a cluster's own upgrade and checked after it."""


@canary_group.command("start")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help="Default: $KUBECONFIG, ~/.kube/config.")
@click.option("--context", help="The kubeconfig context (default: its current one).")
@click.option("--run-dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Where the record goes.")
@click.option("--device-class", default=DEVICE_CLASS, show_default=True, help="The DeviceClass the canaries' claims ask for.")
@click.option("--image", default=PAUSE_IMAGE, show_default=True, help="The canaries' container image (pullable by the nodes).")
def start(kubeconfig: Path | None, context: str | None, run_dir: Path, device_class: str, image: str) -> None:
    """Create the canaries and record their allocations and container IDs in RUN_DIR."""
    with heartbeat.status(console, "creating canaries: a template claim, a claim shared by two pods, a two-device claim"):
        record = canary.start(kubeconfig, context, run_dir, device_class, image)
    pods = record["snapshot"]["pods"]
    console.print(f"canaries running in namespace {record['namespace']}: "
                  + ", ".join(f"{k.split('/')[1]} on {v['node']}" for k, v in pods.items()), highlight=False)
    console.print(f"after the upgrade: dra-harness canary verify {run_dir}", highlight=False)


@canary_group.command("verify")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@_KUBECONFIG
def verify(run_dir: Path, kubeconfig: Path | None) -> None:
    """Check the canaries against their record (claims, devices, containers) and allocate a new claim."""
    result = canary.verify(run_dir, kubeconfig)
    for inv in result["invariants"]:
        console.print(("[green]held[/]" if inv["held"] else f"[red]broken ({len(inv['breaches'])})[/]") + f"  {inv['name']}")
        for b in inv["breaches"][:10]:
            console.print(f"      {b}", highlight=False, markup=False)
    for name, why in result["not_established"].items():
        console.print(f"[yellow]not established[/]  {name}: {why}", highlight=False)
    console.print(f"record: {run_dir / canary.VERIFIED}", highlight=False)
    sys.exit(0 if result["held"] else 1)


@canary_group.command("stop")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@_KUBECONFIG
def stop(run_dir: Path, kubeconfig: Path | None) -> None:
    """Delete the canaries (their namespace) and the record."""
    console.print(f"removed namespace {canary.stop(run_dir, kubeconfig)}", highlight=False)
