"""``dra-harness cluster up/down --provider kind``: the CLI side of the kind provider (progress and figures)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from dra_harness.providers.kind import provider


def up_kind(name: str, workers: int, gpus_per_node: int, k8s_version: str, timeout: float,
            node_image: str | None, driver_image: str | None, install: str, err: Console) -> Path:
    spec = provider.KindSpec(
        name=name, k8s_version=k8s_version, workers=workers, gpus_per_node=gpus_per_node, node_image=node_image,
        driver_image=driver_image or provider.LOCAL_DRIVER_IMAGE, install=install,
        # kind pulls a node image and creates containers: far slower than the embedded cluster.
        timeout=max(timeout, 600.0),
    )
    started = time.monotonic()
    with err.status("kind") as status:
        kubeconfig = provider.up(spec, say=lambda s: status.update(s))
    err.print(f"kind cluster {name!r} up in {time.monotonic() - started:.0f}s: Kubernetes v{k8s_version}, "
              f"{workers} workers, example driver publishing")
    return Path(kubeconfig)


def down_kind(name: str, err: Console) -> None:
    if provider.down(name):
        err.print(f"kind cluster {name!r} deleted")
    else:
        err.print(f"no kind cluster {name!r}")
