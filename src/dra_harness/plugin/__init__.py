"""The pytest plugin (registered as the ``dra_harness`` pytest11 entry point), its options,
the input checks it shares with the CLI, and the watchdog that sweeps a killed run."""
