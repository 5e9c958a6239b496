"""Draw a staging cluster's shape from a seed.

Each draw picks from the ways real clusters differ from the one the checks were written on:
where the driver runs (the profile's DaemonSet, a Helm release named otherwise, no pod at
all), whether a probe image can be pulled, tenants holding devices (sometimes one on every
node, so no node is whole), cordoned and tainted nodes, nodes not labelled disruptable, an
identity without the disruptive role, another DRA driver with the same generic labels,
PodSecurity ``restricted`` enforced by default, a LimitRange and a device quota furnished into
every new namespace, a second run of the harness at the same time, simulated nodes allowed
beside a platform team's tolerate-all DaemonSet and hostname-spread Deployment, and a fault while the
run goes on (:data:`~dra_harness.providers.embedded.twin.FAULTS`, injected by :mod:`.faults`). The
seed is printed with every shape, so a failure reproduces: ``python -m tests.integration.twins
--seed N``.
"""

from __future__ import annotations

import random
import time

import dataclasses

from dra_harness.providers.embedded import twin_managed
from dra_harness.providers.embedded.twin import DRIVER_FORMS, FAULTS, Shape


def daily_seed() -> int:
    """A seed that changes every day (UTC), so CI walks through shapes over time."""
    return int(time.strftime("%Y%m%d", time.gmtime()))


def draw(seed: int, nodes: int, gpus: int) -> Shape:
    """A shape for a cluster of ``nodes`` nodes (simulated first, then real) of ``gpus`` devices each."""
    rng = random.Random(seed)
    held = [0] * nodes
    holdings: list[tuple[int, int]] = []
    if rng.random() < 0.3:  # someone on every node: no whole node is free
        holdings = [(i, 1) for i in range(nodes)]
    else:
        for _ in range(rng.randint(0, 3)):
            node = rng.randrange(nodes)
            count = min(rng.randint(1, 3), gpus - held[node] - 1)
            if count > 0:
                held[node] += count
                holdings.append((node, count))
    everyone = list(range(nodes))
    shape = Shape(
        seed=seed,
        driver=rng.choice(DRIVER_FORMS),
        shell_image=rng.random() < 0.5,
        tenants=tuple(holdings),
        cordoned=tuple(sorted(rng.sample(everyone, rng.randint(0, 2)))),
        tainted=tuple(sorted(rng.sample(everyone, rng.randint(0, 1)))),
        not_disruptable=tuple(sorted(rng.sample(everyone, rng.randint(0, 2)))),
        disruptive_role=rng.random() < 0.7,
        other_driver=rng.random() < 0.7,
        pod_security="restricted" if rng.random() < 0.4 else "",
        limit_range=rng.random() < 0.4,
        device_quota=rng.choice((0, 0, 4, 6)),
        runs=2 if rng.random() < 0.25 else 1,
        simulated_nodes=rng.choice((0, 0, 2, 4)),
        tolerate_all=rng.random() < 0.4,
        hostname_spread=rng.random() < 0.4,
    )
    # Drawn last, so the shapes of earlier seeds keep every other dimension.
    return with_fault(shape, rng.choice(("", *FAULTS)), nodes)


def with_fault(shape: Shape, fault: str, nodes: int) -> Shape:
    """``shape`` with ``fault`` and what the fault needs to happen: two runs to skew, one run to kill or throttle
    (a storm on the identity both share would hit the other's tests), a drain the run may make (the disruptive role,
    and the last node, the real one where there is one, drainable)."""
    if fault == "clock-skew":
        return dataclasses.replace(shape, fault=fault, runs=2)
    if fault == "throttled-sweep":
        return dataclasses.replace(shape, fault=fault, runs=1)
    if fault.endswith("-mid-drain"):
        last = nodes - 1

        def without(positions: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(p for p in positions if p != last)

        return dataclasses.replace(shape, fault=fault, runs=1, disruptive_role=True, cordoned=without(shape.cordoned),
                                   tainted=without(shape.tainted), not_disruptable=without(shape.not_disruptable))
    return dataclasses.replace(shape, fault=fault)


def draw_managed(seed: int) -> Shape:
    """A managed GPU offering's rules over the fixed twin: a provider's taint on the GPU pool, a namespace-label
    policy, a RuntimeClass GPU pods must name, an image policy admitting one registry, PodSecurity ``restricted``
    by the API server's default, at least one of them; and sometimes the GPU pool selected by label beside a system
    pool without devices, down to a single GPU node."""
    rng = random.Random(seed)
    while True:
        taint = rng.randrange(len(twin_managed.PROVIDER_TAINTS)) if rng.random() < 0.6 else -1
        label, runtime, registry = rng.random() < 0.5, rng.random() < 0.4, rng.random() < 0.4
        if taint >= 0 or label or runtime or registry:
            break
    shape = Shape(seed=seed, gpu_taint=taint, namespace_label="team" if label else "", runtime_class=runtime,
                  registry=registry, pod_security="restricted" if rng.random() < 0.3 else "",
                  other_driver=rng.random() < 0.5)
    # Drawn last, so earlier seeds keep their shapes: a GPU pool by label beside a system pool, of 2 nodes or of one;
    # the tenants' pod, on a node with devices.
    pool = rng.choice((0, 0, 2, 1))
    return dataclasses.replace(shape, gpu_pool=pool, tenants=((-1, 1),) if pool else shape.tenants)
