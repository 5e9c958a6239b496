"""``dra-harness cluster up/down --provider kind``: the CLI side of the kind provider (progress and figures)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from dra_harness import heartbeat
from dra_harness.providers.kind import provider


def up_kind(spec: provider.KindSpec, err: Console) -> Path:
    started = time.monotonic()
    with heartbeat.status(err, "kind") as status:
        kubeconfig = provider.up(spec, say=lambda s: status.update(s))
    facts = provider.created(spec.name)
    steps = ", ".join(f"{label} {facts[key]:.0f}s" for key, label in (
        ("node_image_build_s", "node image"), ("kind_create_s", "kind create"), ("driver_to_slices_s", "driver to slices"))
        if facts.get(key))
    err.print(f"kind cluster {spec.name!r} up in {time.monotonic() - started:.0f}s ({steps}): Kubernetes v{spec.k8s_version}, "
              f"{spec.workers} workers, node image {facts.get('node_image')}, driver by {facts.get('driver_install')}")
    return Path(kubeconfig)


def down_kind(name: str, err: Console) -> None:
    with heartbeat.status(err, "kind") as status:
        existed = provider.down(name, say=lambda s: status.update(s))
    err.print(f"kind cluster {name!r} deleted" if existed else f"no kind cluster {name!r}")
