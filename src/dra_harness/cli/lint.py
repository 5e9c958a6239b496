"""``dra-harness lint FILE...``: DRA manifests checked by a real API server, then against its devices."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console

from dra_harness import yamlfile
from dra_harness.checks.lint import Document, Report, lint as run_lint
from dra_harness.cli.common import embedded_cluster
from dra_harness.components.catalog import DEFAULT_KUBERNETES_VERSION
from dra_harness.errors import InputError
from dra_harness.providers.hardware import hardware_slices, load_hardware
from dra_harness.cli.common import table_option

err = Console(stderr=True)


class LintInputError(InputError):
    """A file given to lint cannot be read as Kubernetes manifests."""


def _documents(files: tuple[str, ...]) -> list[Document]:
    docs = []
    for f in files:
        for i, obj in enumerate(yamlfile.load_all(f, LintInputError, f"manifest file {f}"), start=1):
            docs.append(Document(f, i, obj))
    return docs


@click.command()
@click.argument("files", nargs=-1, required=True)
@table_option("k8s_version", help=f"Check against an embedded cluster of this version, started and removed by lint "
                                 f"(default {DEFAULT_KUBERNETES_VERSION}, unless KUBECONFIG names a cluster).")
@click.option("--kubeconfig", help="Check against this cluster instead (server-side dry run: nothing is created).")
@click.option("--context", help="kubeconfig context.")
@click.option("--name", "cluster_name", help="Check against the running embedded cluster of this name.")
@click.option("--namespace", default="default", show_default=True, help="Namespace for objects that name none.")
@click.option("--expected-hardware", "hardware_file", help="Match requests against the devices this expected-hardware "
              "file describes (the hardware you plan for), not the target's slices.")
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
def lint(files: tuple[str, ...], k8s_version: str | None, kubeconfig: str | None, context: str | None,
         cluster_name: str | None, namespace: str, hardware_file: str | None, as_json: bool) -> None:
    """Validate DRA manifests (DeviceClass, ResourceClaim, ResourceClaimTemplate, pods and workloads) by
    server-side dry run, list the devices each request would match, and suggest fixes for known mistakes.
    Exits 1 when the API server rejects anything."""
    docs = _documents(files)
    slices = hardware_slices(load_hardware(hardware_file)) if hardware_file else None  # a bad file: one line, before any cluster
    if kubeconfig or (os.environ.get("KUBECONFIG") and not k8s_version and not cluster_name):
        from dra_harness.kube.client import connect

        report, target = run_lint(connect(kubeconfig, context), docs, namespace, slices), f"kubeconfig {kubeconfig or os.environ['KUBECONFIG']}"
    else:
        version = k8s_version or DEFAULT_KUBERNETES_VERSION
        with embedded_cluster(cluster_name, version, err, "lint", nodes=2, gpus_per_node=8) as (_, kube, served):
            report, target = run_lint(kube, docs, namespace, slices), f"embedded cluster, Kubernetes {served}"
    _print(report, target, as_json)
    sys.exit(1 if report.errors else 0)


def _print(report: Report, target: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"target": target, "findings": [f.__dict__ for f in report.findings]}, indent=2))
        return
    for f in report.findings:
        click.echo(f.line())
    warnings = sum(1 for f in report.findings if f.level == "warning")
    click.echo(f"lint against {target}: {report.errors} rejected, {warnings} warnings")
