"""Simulated nodes for a suite on a cluster the run did not create: a KWOK of the run's own, if the user allowed it.

The contention and partition suites add KWOK nodes of their own. The embedded cluster has a
KWOK for them; on any other cluster the run starts one only with ``--allow-contention`` and
``--simulated-nodes N`` for at least the nodes asked for, and skips with the flags to give
otherwise: a local process (:mod:`dra_harness.providers.simulated_nodes`), or with
``--kwok-image`` a Deployment in the cluster (:mod:`dra_harness.providers.incluster_kwok`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import pytest

from dra_harness.errors import NotEstablished, Refused
from dra_harness.kube.types import Obj
from dra_harness.kube.waits import WaitError
from dra_harness.providers import incluster_kwok, node_guard, simulated_nodes
from dra_harness.plugin.stash import run_config


class SimulatedObjects(Protocol):
    """Nodes and slices a suite publishes itself (a topology fleet, a partition layout)."""

    tag: str
    kwok: tuple[str, str]

    def create(self) -> None: ...
    def delete(self) -> None: ...
    def node_bodies(self) -> list[Obj]: ...


class Kwok(Protocol):
    """A KWOK managing the nodes annotated ``annotation`` (a local process, or a Deployment in the cluster)."""

    @property
    def annotation(self) -> tuple[str, str]: ...
    def check(self) -> None: ...
    def stop(self) -> None: ...


def run_kwok(config: pytest.Config, cluster, bodies: list[Obj], tag: str, what: str) -> Kwok:
    """A started KWOK for the nodes ``bodies`` (annotated with ``tag``); skips the test where not allowed,
    and makes it not established where the nodes would hurt another's workload (the guard's refusal).
    With ``--kwok-image`` it runs in the cluster as a Deployment, else as a local process."""
    nodes = len(bodies)
    allowed, most = run_config(config).allow_contention, run_config(config).simulated_nodes
    if not allowed or most < nodes:
        pytest.skip(f"{what} adds {nodes} simulated (KWOK) nodes; on a cluster the run did not create it needs "
                    f"--allow-contention --simulated-nodes {max(nodes, most)} (given: "
                    f"{'--allow-contention, ' if allowed else ''}--simulated-nodes {most})")
    try:
        node_guard.check(cluster.kube, bodies, cluster.run_id)  # before anything is started or added
    except Refused as e:  # the cluster's tenants forbid the nodes: the check cannot be made here, no product fault
        raise NotEstablished(str(e)) from e
    if image := run_config(config).kwok_image:
        selector = run_config(config).kwok_node_selector
        key, _, value = (selector or "").partition("=")
        return incluster_kwok.ClusterKwok(cluster.kube, tag, cluster.run_id, image, {key: value} if selector else {}).start()
    kubeconfig = run_config(config).kubeconfig or os.environ.get("KUBECONFIG", "")
    if run_config(config).context or os.pathsep in kubeconfig or not kubeconfig:
        pytest.skip("simulated nodes on an existing cluster take one kubeconfig file and its current context")
    # Its log goes in the run's private directory, which the watchdog of a killed run removes.
    run_dir = os.environ.get("DRA_HARNESS_LOCK_DIR")
    return simulated_nodes.LocalKwok(kubeconfig, tag, cluster.run_id, Path(run_dir) if run_dir else None).start()


@contextmanager
def on_simulated_nodes(config: pytest.Config, cluster, objects: SimulatedObjects, what: str) -> Iterator[None]:
    """``objects`` created for the body and deleted after it; on a cluster whose provider simulates no nodes,
    on its nodes, run by a KWOK started for them (or the test skips with the flags it needs). When the
    nodes never become ready, a KWOK that has exited says why."""
    kwok = None
    if not cluster.provider.simulates_nodes:
        kwok = run_kwok(config, cluster, objects.node_bodies(), objects.tag, what)
        objects.kwok = kwok.annotation
    try:
        try:
            objects.create()
        except WaitError:
            if kwok:
                kwok.check()
            raise
        yield
    finally:
        objects.delete()
        if kwok:
            kwok.stop()
