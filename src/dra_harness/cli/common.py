"""What several command groups share: click options (the run options live in :mod:`dra_harness.options`)
and a throwaway embedded cluster."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console

from dra_harness import heartbeat
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.kube.rest import Kube
from dra_harness.errors import ClusterError
from dra_harness.providers import open_cluster
from dra_harness.providers.local import LocalClusterApi
from dra_harness.providers.localstate import ClusterSpec

from dra_harness.components.catalog import DEFAULT_KUBERNETES_VERSION
from dra_harness.options import BY_DEST, Option


def click_option(o: Option, *also: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click form of one option of the shared table; ``also``: other spellings a command still accepts."""
    if o.is_flag:
        return click.option(o.flag, *also, is_flag=True, help=o.help)
    kind: Any = (click.Choice(o.choices) if o.choices else click.IntRange(*o.range) if o.range
                 else click.Path(file_okay=o.path == "file", dir_okay=o.path == "dir") if o.path else o.type)
    if o.multiple:
        return click.option(o.flag, *also, o.dest, type=kind, multiple=True, metavar=o.metavar, help=o.help)
    return click.option(o.flag, *also, o.dest, type=kind, default=o.default, show_default=o.default is not None,
                        metavar=o.metavar, help=o.help)


def table_option(dest: str, *also: str, **changes: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's option declared by the run options' table (one flag, one spelling, one help), with the
    ``changes`` (default, range, help) that command needs."""
    return click_option(dataclasses.replace(BY_DEST[dest], **changes), *also)


#: ``--k8s-version`` for commands that start or build a cluster of one version.
k8s_version_option = table_option("k8s_version", default=DEFAULT_KUBERNETES_VERSION, help="Kubernetes version.")


@contextmanager
def embedded_cluster(name: str | None, k8s_version: str, console: Console, prefix: str,
                     nodes: int = 1, gpus_per_node: int = 1) -> Iterator[tuple[LocalClusterApi, Kube, str]]:
    """A running embedded cluster by name, or a fresh small one (``<prefix>-<pid>``) removed at the end."""
    if name:
        c = open_cluster(name)
        st = c.state()
        if st is None:
            raise ClusterError(f"no running embedded cluster named {name!r}")
        yield c, c.kube(), st.spec.k8s_version
        return
    c = open_cluster(f"{prefix}-{os.getpid()}")
    builder.build_all(catalog.for_cluster(k8s_version))
    with heartbeat.status(console, f"starting an embedded cluster (Kubernetes {k8s_version})"):
        c.up(ClusterSpec(name=c.name, nodes=nodes, gpus_per_node=gpus_per_node, k8s_version=k8s_version, owner_pid=os.getpid()))
    try:
        yield c, c.kube(), k8s_version
    finally:
        c.down()
