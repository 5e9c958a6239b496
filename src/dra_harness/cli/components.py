"""``dra-harness components ...``: build the Go components, regenerate their wrapper modules and the gate table."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from dra_harness.cli.common import k8s_version_option
from dra_harness.components import build as builder
from dra_harness.components import catalog

err = Console(stderr=True)


@click.group()
def components() -> None:
    """Build the cluster's binaries from Go modules (cached)."""


@components.command("build")
@k8s_version_option
@click.option("--all-versions", is_flag=True, help="Every supported Kubernetes version.")
def build_cmd(k8s_version: str, all_versions: bool) -> None:
    """Build what the embedded cluster needs; print each binary directory."""
    wanted = catalog.all_components() if all_versions else catalog.for_cluster(k8s_version)
    for built in builder.build_all(wanted).values():
        how = "cached" if built.cached else f"built in {built.seconds:.0f}s"
        err.print(f"{built.component.dirname}: {how}")
        click.echo(built.directory)


@components.command()
@click.argument("which", nargs=-1)
def generate(which: tuple[str, ...]) -> None:
    """Regenerate the wrapper modules in data/components/ (all, or those named by directory)."""
    from dra_harness.components.gomod import generate as gen

    for comp in catalog.all_components():
        if not which or comp.dirname in which:
            err.print(f"generating {comp.dirname}")
            gen(comp)


@components.command()
def gates() -> None:
    """Rewrite the feature-gate table from each supported release's source, and the kind configs from it."""
    from dra_harness.components.gomod import go, toolchain_env
    from dra_harness.components import gates as gate_table

    rows = {}
    for version in catalog.KUBERNETES_VERSIONS:
        info = json.loads(go("mod", "download", "-json", f"k8s.io/kubernetes@v{version}",
                             env=toolchain_env(catalog.kubernetes(version))))
        rows[version] = gate_table.derive(Path(info["Dir"]), version)
    gate_table.TABLE_PATH.write_text(json.dumps(rows, indent=2) + "\n")
    err.print(f"wrote {gate_table.TABLE_PATH}")
    from dra_harness.providers.kind.config import (
        write_all,  # the kind configs are rendered from the same table
    )

    err.print("wrote " + ", ".join(str(p) for p in write_all()))


@components.command("kwok-image")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, writable=True),
              help="Where to write the image, as an OCI tarball (push it with skopeo or crane, or import it with ctr).")
def kwok_image_cmd(out: str) -> None:
    """Write KWOK's image for --kwok-image: the binary built from its module, with the harness's pod stages."""
    from dra_harness.components.images import KWOK_IMAGE, kwok_image
    from dra_harness.components.oci import write_layout

    if Path(out).is_dir():
        raise click.UsageError(f"--out {out}: is a directory; name the tarball to write")
    write_layout(kwok_image(), Path(out))
    err.print(f"{KWOK_IMAGE} -> {out}")
