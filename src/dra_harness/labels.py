"""Labels that mark what the harness created, so it can delete exactly that."""

from __future__ import annotations

RUN_LABEL = "dra-harness.io/run"
TEST_LABEL = "dra-harness.io/test"
#: A failed test's namespace kept for inspection (--keep-on-failure); the sweep spares it.
KEPT_LABEL = "dra-harness.io/kept"
#: Label a node must carry before any disruptive action (drain, driver restart) may touch it.
DISRUPTABLE_LABEL = "dra-harness.io/disruptable"
#: On a node: the run created it (a simulated contention node), so its sweep may delete it. A run's
#: label alone never makes a node deletable: real nodes it labelled keep existing.
SIMULATED_NODE_LABEL = "dra-harness.io/contention"
#: On a real node: the user allows the contention suite's jobs there (with --allow-contention). Only read.
CONTENTION_ALLOWED_LABEL = "dra-harness.io/contention-allowed"
#: On a node the run does not own: the run that cordoned it, set in the same patch as the cordon, so the
#: run's sweep or watchdog can undo it after a kill; removed with the uncordon. An operator who wants the
#: cordon kept removes it (:mod:`dra_harness.providers.node_changes`).
#: On a ``dra-harness canary``'s namespace: held across a cluster's upgrade on purpose, with no run alive; the sweep
#: of dead runs leaves it to ``canary stop``.
CANARY_LABEL = "dra-harness.io/canary"
CORDONED_BY_ANNOTATION = "dra-harness.io/cordoned-by"
#: On a node: KWOK (the embedded cluster's, ``=fake``) runs it; only simulated nodes carry it.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def run_selector(run_id: str, include_kept: bool = True) -> str:
    selector = f"{RUN_LABEL}={run_id}"
    return selector if include_kept else f"{selector},{KEPT_LABEL}!=true"
