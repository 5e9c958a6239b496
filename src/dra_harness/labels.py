"""Labels that mark what the harness created, so it can delete exactly that."""

from __future__ import annotations

RUN_LABEL = "dra-harness.io/run"
TEST_LABEL = "dra-harness.io/test"
#: Label a node must carry before any disruptive action (drain, driver restart) may touch it.
DISRUPTABLE_LABEL = "dra-harness.io/disruptable"


def run_selector(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"
