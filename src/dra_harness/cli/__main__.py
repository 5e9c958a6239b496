"""``python -m dra_harness.cli``: the same as the ``dra-harness`` command."""

from dra_harness.cli import main

main()
