"""``dra-harness kind ...``: what the kind provider builds here (node images) outside a run."""

from __future__ import annotations

import time

import click
from rich.console import Console

from dra_harness import heartbeat
from dra_harness.cli.common import k8s_version_option

err = Console(stderr=True)


@click.group()
def kind() -> None:
    """kind clusters without a registry: node images built from Debian's packages and Go modules."""


@kind.command("build-node-image")
@k8s_version_option
def build_node_image(k8s_version: str) -> None:
    """Build (or reuse) the kind node image of a Kubernetes version; prints its tag."""
    from dra_harness.providers.kind import engine, nodeimage, provider

    started = time.monotonic()
    with heartbeat.status(err, "kind node image") as status:
        ours = engine.ensure(say=status.update)
        try:
            image, seconds = nodeimage.ensure(k8s_version, say=status.update)
        finally:
            if ours and not provider.clusters():  # an engine started only for this build goes with it
                engine.stop(say=status.update)
    how = f"built in {seconds:.0f}s" if seconds else f"up to date (checked in {time.monotonic() - started:.0f}s)"
    err.print(f"kind node image for Kubernetes v{k8s_version}: {image}, {how}")
    click.echo(image)
