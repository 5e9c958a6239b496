"""What the driver configurations' checks count beside the slices: the cpu a node has left for the cpu profile.

(Whether a node's slices show a configuration is :func:`dra_harness.providers.driver_configs.wait_published`.)
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube


def free_cpu(kube: Kube, node: str) -> Decimal:
    """The node's allocatable cpu less what its pods' containers request, as kube-scheduler counts it
    before any cpu a claim is charged (the cpu profile's node-allocatable devices)."""
    free = parse_quantity(kube.get(rest.NODES, node)["status"]["allocatable"]["cpu"])
    for p in kube.list(rest.PODS, field_selector=f"spec.nodeName={node}"):
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            free -= sum((parse_quantity(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                         for c in p["spec"]["containers"]), Decimal(0))
    return free
