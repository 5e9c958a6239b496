"""The root of a checkout. The harness's pytest plugin is not registered here: it is the
``dra_harness`` pytest11 entry point of the installed package, so the suites and the project's
tests get it from any directory, checkout or not."""
