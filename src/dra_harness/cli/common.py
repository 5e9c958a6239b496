"""Click options several command groups share (the run options live in :mod:`dra_harness.options`)."""

from __future__ import annotations

import click

from dra_harness.components.catalog import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS

#: ``--k8s-version`` for commands that start or build a cluster of one version.
k8s_version_option = click.option("--k8s-version", type=click.Choice(KUBERNETES_VERSIONS), default=DEFAULT_KUBERNETES_VERSION,
                                  show_default=True, help="Kubernetes version.")
