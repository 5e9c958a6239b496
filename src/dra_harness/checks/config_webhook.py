"""Whether a driver's validating webhook refuses an invalid opaque config before any pod waits on it.

Without a webhook the API server stores any opaque parameters; the driver reads them only at
NodePrepareResources, so a typo in a claim's config surfaces as a pod stuck in
ContainerCreating on some node. The example driver's own e2e asks its webhook to refuse a
``GpuConfig`` with an unknown time-slice interval in a v1 claim, a v1beta1 claim and a v1
template; these build the same objects, and ask by server-side dry run (nothing is stored).
"""

from __future__ import annotations

import re

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

#: Upstream's wording for the refusal (``GpuConfig.Validate``).
REFUSAL = "unknown time-slice interval"
#: NVIDIA's driver (plugin and webhook): '"TimeSlicing" is selected as the GPU sharing strategy, but the
#: "TimeSlicingSettings" feature gate is not enabled' (a cluster's choice, not a fault: the strategy is not offered).
GATE_OFF = re.compile(r"feature gate is not enabled")


def gpu_config(interval: str, api_version: str = "gpu.resource.example.com/v1alpha1") -> Obj:
    """A time-slicing ``GpuConfig`` of ``api_version``: the example driver's, or NVIDIA's
    ``resource.nvidia.com/v1beta1`` (same kind, same fields, same refusal wording)."""
    return {"apiVersion": api_version, "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}}


def config_object(kind: str, version: str, device_class: str, driver: str, interval: str,
                  api_version: str = "gpu.resource.example.com/v1alpha1") -> tuple[rest.Resource, Obj]:
    """A ``kind`` (ResourceClaim or ResourceClaimTemplate) of ``resource.k8s.io/<version>`` with one request
    ``ts-gpu`` and a GpuConfig (of ``api_version``, the driver's config API) for it with ``interval``."""
    plural = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}[kind]
    request: Obj = ({"name": "ts-gpu", "deviceClassName": device_class} if version == "v1beta1"
                    else {"name": "ts-gpu", "exactly": {"deviceClassName": device_class}})
    spec: Obj = {"devices": {"requests": [request], "config": [
        {"requests": ["ts-gpu"], "opaque": {"driver": driver, "parameters": gpu_config(interval, api_version)}}]}}
    res = rest.Resource("resource.k8s.io", version, plural, kind, True)
    body = {"apiVersion": f"resource.k8s.io/{version}", "kind": kind, "metadata": {"name": "webhook-test"},
            "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec}
    return res, body


def refusal(kube: Kube, res: rest.Resource, body: Obj, namespace: str) -> str | None:
    """The API server's message if it refuses ``body`` (dry run), else None."""
    try:
        kube.create(res, body, namespace, dry_run=True)
    except rest.ApiError as e:
        return e.message
    return None
