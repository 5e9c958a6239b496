"""The ``dra-harness`` command line: one module per command group, :mod:`.app` holds the group."""

from dra_harness.cli.app import main

__all__ = ["main"]
