"""The ``dra-harness`` command line.

Every expected failure (bad input, a cluster that is not up, a build that broke)
ends as one line on stderr and a non-zero exit; a traceback means a bug in the harness.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from dra_harness.cli import logs
from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.components.gomod import GoError
from dra_harness.kube.client import KubeconfigError
from dra_harness.kube.rest import ApiError, Unreachable
from dra_harness.providers.embedded.cluster import (
    DEFAULT_NAME,
    ClusterError,
    ClusterSpec,
    LocalCluster,
    all_clusters,
)

err = Console(stderr=True)
EXPECTED = (ClusterError, builder.BuildError, GoError, KubeconfigError, ApiError, Unreachable, ValueError, KeyError)


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _usage_error(e: click.UsageError) -> None:
    """Click's usage error as one line with its hint (click itself prints the usage and a blank line too)."""
    if isinstance(e, _NO_ARGS_IS_HELP):  # a bare group: its help is what was asked for
        e.show()
        sys.exit(e.exit_code)
    hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
    err.print(f"[red]error:[/] {escape(' '.join(e.format_message().split()))}{escape(hint)}", highlight=False, soft_wrap=True)
    sys.exit(e.exit_code)


class Cli(click.Group):
    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[no-untyped-def, override]
        try:  # the top level's own options; a subcommand's are parsed inside invoke()
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            _usage_error(e)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            _usage_error(e)
        except EXPECTED as e:
            first, _, rest = str(e).strip().partition("\n")
            err.print(f"[red]error:[/] {escape(first)}", highlight=False, soft_wrap=True)  # one line, never wrapped
            if rest and isinstance(e, (builder.BuildError, ClusterError)):
                # Build and start-up failures end with the tail of the failing log.
                err.print(rest, highlight=False, markup=False)
            sys.exit(2)
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)


@click.group(cls=Cli)
@click.version_option(package_name="dra-harness")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              help=f"Log what the harness does on stderr; INFO shows every write to a cluster (default {logs.DEFAULT}).")
@click.option("-v", "--verbose", count=True, help="-v: --log-level INFO; -vv: DEBUG (reads and watches too).")
def main(log_level: str | None, verbose: int) -> None:
    """Evidence of how Kubernetes DRA behaves on your cluster, driver and design."""
    logs.configure(logs.level_for(log_level, verbose))


# -- cluster -------------------------------------------------------------------
@main.group()
def cluster() -> None:
    """The embedded local cluster (real control plane, KWOK nodes, example driver)."""


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # The name becomes a directory: keep it a plain DNS label.
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", value):
        raise click.BadParameter("use lowercase letters, digits and '-' (at most 40)")
    return value


name_option = click.option("--name", default=DEFAULT_NAME, show_default=True, help="Cluster name.", callback=_cluster_name)


@cluster.command()
@name_option
@click.option("--nodes", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--k8s-version",
    default=catalog.DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    type=click.Choice(catalog.KUBERNETES_VERSIONS),
)
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
@click.option("--real-nodes", type=click.IntRange(0, 4), default=None,
              help="Nodes with a real kubelet and containerd (default: 1 where possible, else 0 with the reason).")
@click.option("--provider", type=click.Choice(["local", "kind"]), default="local", show_default=True,
              help="local: embedded cluster; kind: a kind cluster (Docker) with the example driver installed.")
@click.option("--node-image", help="kind: node image (default kindest/node:v<k8s-version>).")
@click.option("--driver-image", help="kind: example-driver image (default: built from the Go-built plugin).")
@click.option("--install", type=click.Choice(["auto", "helm", "manifests"]), default="auto", show_default=True,
              help="kind: install the driver with its Helm chart (auto: when helm is on PATH) or our manifests.")
def up(name: str, nodes: int, gpus_per_node: int, k8s_version: str, timeout: float, real_nodes: int | None,
       provider: str, node_image: str | None, driver_image: str | None, install: str) -> None:
    """Start a cluster; returns when every node's slices hold all its devices."""
    if provider == "kind":
        from dra_harness.providers.kind.commands import up_kind

        return up_kind(name, nodes, gpus_per_node, k8s_version, timeout, node_image, driver_image, install, err)
    from dra_harness.providers.embedded.realnode import choose_real_nodes

    c = LocalCluster(name)
    real = choose_real_nodes(real_nodes, err.print)
    spec = ClusterSpec(name=name, nodes=nodes, gpus_per_node=gpus_per_node, k8s_version=k8s_version, real_nodes=real)
    builder.build_all(catalog.for_cluster(k8s_version, real_nodes=real > 0))
    with err.status("starting") as status:
        state = c.up(spec, timeout=timeout, say=lambda s: status.update(s))
    err.print(
        f"cluster {name!r} up in {state.timings['up']:.1f}s: Kubernetes v{k8s_version}, "
        f"{nodes} simulated + {real} real nodes x {gpus_per_node} devices ({state.server})"
    )
    click.echo(str(c.kubeconfig))


@cluster.command()
@name_option
@click.option("--all", "all_", is_flag=True, help="Every cluster of this user, including stale ones.")
@click.option("--provider", type=click.Choice(["local", "kind"]), default="local", show_default=True)
def down(name: str, all_: bool, provider: str) -> None:
    """Stop a cluster's processes and remove its state (kind: delete the kind cluster)."""
    if provider == "kind":
        from dra_harness.providers.kind.commands import down_kind

        return down_kind(name, err)
    targets = all_clusters() if all_ else [LocalCluster(name)]
    for c in targets:
        existed = c.exists()
        c.down()
        if existed:
            err.print(f"cluster {c.name!r} removed")


@cluster.command()
@name_option
@click.option("--json", "as_json", is_flag=True)
def status(name: str, as_json: bool) -> None:
    """Show whether a cluster's processes are running."""
    c = LocalCluster(name)
    if not c.exists():
        raise ClusterError(f"cluster {name!r} is not up")
    info = c.status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{info['name']}: Kubernetes v{info['k8s_version']}, {info['nodes']} nodes x {info['gpus_per_node']} devices, {info['server']}")
    for proc, state in sorted(info["processes"].items()):
        click.echo(f"  {proc:32} {state}")
    if not info["healthy"]:
        sys.exit(1)


@cluster.command()
@name_option
def kubeconfig(name: str) -> None:
    """Print the path of a cluster's admin kubeconfig."""
    c = LocalCluster(name)
    if not c.kubeconfig.exists():
        raise ClusterError(f"cluster {name!r} is not up")
    click.echo(str(c.kubeconfig))


@cluster.command()
@name_option
def env(name: str) -> None:
    """Print shell exports for the cluster: KUBECONFIG, and PATH with the matching kubectl first."""
    c = LocalCluster(name)
    st = c.state()
    if st is None:
        raise ClusterError(f"cluster {name!r} is not up")
    kubectl_dir = Path(st.binaries["kubectl"]).parent
    click.echo(f"export KUBECONFIG={c.kubeconfig}")
    click.echo(f'export PATH={kubectl_dir}:"$PATH"')


# -- diagnosis -------------------------------------------------------------------
@main.command()
@click.option("-n", "--namespace", help="Only this namespace (default: all).")
@click.option("--kubeconfig", type=click.Path(), help="Default: the embedded cluster --name, else KUBECONFIG.")
@click.option("--context")
@name_option
@click.option("--json", "as_json", is_flag=True)
def diagnose(namespace: str | None, kubeconfig: str | None, context: str | None, name: str, as_json: bool) -> None:
    """Say why each Pending pod with ResourceClaims is not scheduled."""
    from dra_harness.checks.diagnose import diagnose as run_diagnosis
    from dra_harness.kube.client import connect

    if kubeconfig is None and LocalCluster(name).kubeconfig.exists():
        kubeconfig = str(LocalCluster(name).kubeconfig)
    results = run_diagnosis(connect(kubeconfig, context), namespace)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
        return
    if not results:
        click.echo("no Pending pods with resource claims")
    for r in results:
        click.echo(f"{r.namespace}/{r.pod}: {r.cause}: {r.message}")


# -- components -------------------------------------------------------------------
@main.group()
def components() -> None:
    """Build the cluster's binaries from Go modules (cached)."""


@components.command("build")
@click.option("--k8s-version", type=click.Choice(catalog.KUBERNETES_VERSIONS), default=catalog.DEFAULT_KUBERNETES_VERSION)
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
    from dra_harness.components.gomod import go
    from dra_harness.providers.embedded import gates as gate_table

    rows = {}
    for version in catalog.KUBERNETES_VERSIONS:
        info = json.loads(go("mod", "download", "-json", f"k8s.io/kubernetes@v{version}"))
        rows[version] = gate_table.derive(Path(info["Dir"]), version)
    gate_table.TABLE_PATH.write_text(json.dumps(rows, indent=2) + "\n")
    err.print(f"wrote {gate_table.TABLE_PATH}")
    from dra_harness.providers.kind.config import (
        write_all,  # the kind configs are rendered from the same table
    )

    err.print("wrote " + ", ".join(str(p) for p in write_all()))


# -- benchmarks -------------------------------------------------------------------
@main.group()
def bench() -> None:
    """Print performance figures (nothing here is a pass/fail check)."""


@bench.command("cluster")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--nodes", default=4, show_default=True)
@click.option("--gpus-per-node", default=8, show_default=True)
@click.option("--k8s-version", type=click.Choice(catalog.KUBERNETES_VERSIONS), default=catalog.DEFAULT_KUBERNETES_VERSION)
def bench_cluster(runs: int, nodes: int, gpus_per_node: int, k8s_version: str) -> None:
    """Warm `cluster up` to all slices ready, `cluster down`, and memory."""
    from dra_harness.bench.cluster import cluster_bench

    cluster_bench(runs, nodes, gpus_per_node, k8s_version, err)


@bench.command("real-node")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--pods", default=5, show_default=True, type=click.IntRange(1, 50))
@click.option("--k8s-version", type=click.Choice(catalog.KUBERNETES_VERSIONS), default=catalog.DEFAULT_KUBERNETES_VERSION)
def bench_real_node(runs: int, pods: int, k8s_version: str) -> None:
    """Real node Ready time and pod start latency with a claim (root)."""
    from dra_harness.bench.realnode import real_node_bench

    real_node_bench(runs, pods, k8s_version, err)


@bench.command("build")
@click.option("--k8s-version", type=click.Choice(catalog.KUBERNETES_VERSIONS), default=catalog.DEFAULT_KUBERNETES_VERSION)
def bench_build(k8s_version: str) -> None:
    """Cold build of every component into empty, temporary caches."""
    from dra_harness.bench.cluster import cold_build_bench

    cold_build_bench(k8s_version, err)


# -- runs -----------------------------------------------------------------------
@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--cluster", "provider", type=click.Choice(["local", "existing", "kind"]), default="local", show_default=True)
@click.option("--kubeconfig", type=click.Path(), help="Existing cluster's kubeconfig.")
@click.option("--context", help="Existing cluster's kubeconfig context.")
@click.option("--k8s-version", type=click.Choice(catalog.KUBERNETES_VERSIONS), default=catalog.DEFAULT_KUBERNETES_VERSION)
@click.option("--nodes", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--expected-hardware", type=click.Path(), help="YAML of the hardware the cluster should publish.")
@click.option("--driver", help="Driver profile (example, nvidia) or driver name; detected by default.")
@click.option("--allow-disruptive", is_flag=True, help="Let disruptive tests touch labelled nodes of an existing cluster.")
@click.option("--dry-run", is_flag=True, help="Disruptive tests list what they would touch and touch nothing.")
@click.option("--report-dir", type=click.Path(file_okay=False), help="Default: reports/out/<run-id>.")
@click.option("--real-nodes", type=click.IntRange(0, 4), default=0, show_default=True,
              help="Embedded cluster: nodes with a real kubelet and containerd, for the container-level checks (root).")
@click.option("--design-file", type=click.Path(), help="YAML design record to compare with the run (see fixtures/designs/).")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run(provider, kubeconfig, context, k8s_version, nodes, gpus_per_node, expected_hardware, driver,
        allow_disruptive, dry_run, report_dir, real_nodes, design_file, pytest_args) -> None:
    """Run every suite against a cluster and write the sign-off report (the main job)."""
    from dra_harness.providers.embedded.realnode import choose_real_nodes
    from dra_harness.cli.runner import RunOptions, run_suites

    real = choose_real_nodes(real_nodes, err.print) if provider == "local" else 0

    options = RunOptions(
        provider=provider, kubeconfig=kubeconfig, context=context, k8s_version=k8s_version, nodes=nodes,
        gpus_per_node=gpus_per_node, expected_hardware=expected_hardware, driver=driver, report_dir=report_dir,
        real_nodes=real, design_file=design_file,
        pytest_args=list(pytest_args) + (["--allow-disruptive"] if allow_disruptive else []) + (["--dry-run"] if dry_run else []),
    )
    sys.exit(run_suites(options, err))


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def selftest(pytest_args: tuple[str, ...]) -> None:
    """Run the project's own tests (unit and integration, against real embedded clusters)."""
    import subprocess

    root = builder.checkout_root()
    if root is None:
        raise click.UsageError("selftest runs the tests of a dra-harness checkout; this one is an installed package")
    # Build first, with progress on the terminal, so the test session's timeouts never include a cold build.
    from dra_harness.providers.embedded.realnode import unavailable_reason

    # The kubelet and containerd too where real nodes can run (their tests skip elsewhere).
    builder.build_all(catalog.for_cluster(real_nodes=unavailable_reason() is None))
    code = subprocess.call([sys.executable, "-m", "pytest", "tests", *pytest_args], cwd=root)
    sys.exit(code)


from dra_harness.cli.report import diff, report  # noqa: E402 - the report commands live in their own module

main.add_command(report)
main.add_command(diff)
from dra_harness.cli.contention import bench_allocation, contention  # noqa: E402 - so do the contention commands

main.add_command(contention)
bench.add_command(bench_allocation)

if __name__ == "__main__":  # pragma: no cover
    main()
