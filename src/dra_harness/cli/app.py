"""The ``dra-harness`` command line.

Every expected failure (bad input, a cluster that is not up, a build that broke) is a
:class:`~dra_harness.errors.HarnessError`: it ends as one line on stderr and exit status 2
(build and start-up failures add the tail of the failing log). Anything else is a bug in
the harness: its traceback is shown, then a line asking to report it, and the exit status
is 70 (``EX_SOFTWARE``), so a script can tell a bug from a failed test run (1) or bad input (2).
"""

from __future__ import annotations

import sys
import traceback

import click
from rich.console import Console
from rich.markup import escape

from dra_harness.errors import BuildError, ClusterError, HarnessError
from dra_harness.cli import logs

err = Console(stderr=True)
#: Exit status for a bug in the harness (sysexits.h EX_SOFTWARE): not 1, which a failed test run returns.
BUG_EXIT = 70
BUG_HINT = "dra-harness: this is a bug in dra-harness; please report it with the traceback above"


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
    def make_context(self, info_name, args, parent=None, **extra):
        try:  # the top level's own options; a subcommand's are parsed inside invoke()
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            _usage_error(e)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            _usage_error(e)
        except HarnessError as e:
            first, _, rest = str(e).strip().partition("\n")
            err.print(f"[red]error:[/] {escape(first)}", highlight=False, soft_wrap=True)  # one line, never wrapped
            if rest and isinstance(e, (BuildError, ClusterError)):
                # Build and start-up failures end with the tail of the failing log.
                err.print(rest, highlight=False, markup=False)
            sys.exit(2)
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own, which click prints and turns into its exit status
        except Exception:  # noqa: BLE001 - not an expected failure: a bug, shown in full
            traceback.print_exc()
            sys.stderr.flush()
            err.print(BUG_HINT, highlight=False, markup=False, soft_wrap=True)
            sys.exit(BUG_EXIT)


@click.group(cls=Cli)
@click.version_option(package_name="dra-harness")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              help=f"Log what the harness does on stderr; INFO shows every write to a cluster (default {logs.DEFAULT}).")
@click.option("-v", "--verbose", count=True, help="-v: --log-level INFO; -vv: DEBUG (reads and watches too).")
def main(log_level: str | None, verbose: int) -> None:
    """Evidence of how Kubernetes DRA behaves on your cluster, driver and design."""
    logs.configure(logs.level_for(log_level, verbose))


from dra_harness.cli.report import compare, diff, report  # noqa: E402 - each command group lives in its own module
from dra_harness.cli.run import run, selftest  # noqa: E402
from dra_harness.cli.cluster import cluster, diagnose  # noqa: E402
from dra_harness.cli.components import components  # noqa: E402
from dra_harness.cli.bench import bench  # noqa: E402

main.add_command(report)
main.add_command(run)
main.add_command(cluster)
main.add_command(diagnose)
main.add_command(components)
main.add_command(bench)
main.add_command(selftest)
main.add_command(diff)
main.add_command(compare)
from dra_harness.cli.contention import bench_allocation, contention  # noqa: E402 - so do the contention commands

main.add_command(contention)
from dra_harness.cli.sizing import size  # noqa: E402 - `contention size` lives beside the group, in its own module

contention.add_command(size)
from dra_harness.cli.kind import kind  # noqa: E402

main.add_command(kind)
bench.add_command(bench_allocation)
from dra_harness.cli.upgrade import upgrade  # noqa: E402

main.add_command(upgrade)
from dra_harness.cli.canary import canary_group  # noqa: E402

main.add_command(canary_group)
from dra_harness.cli.lint import lint  # noqa: E402

main.add_command(lint)
from dra_harness.cli.preflight import preflight  # noqa: E402

main.add_command(preflight)
