"""Kueue's API as the harness speaks it: its group version and the kinds the queue design creates.

Why here and not with the process that runs Kueue: the contention designs build Kueue's objects and
the run's sweep deletes them on any cluster where Kueue is served, including clusters whose Kueue
is not ours; only starting Kueue beside the embedded cluster is that provider's business.
"""

from __future__ import annotations

from dra_harness.kube import rest
from dra_harness.kube.rest import Kube

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API = f"{GROUP}/{VERSION}"


def kueue_resource(plural: str, kind: str, namespaced: bool) -> rest.Resource:
    return rest.Resource(GROUP, VERSION, plural, kind, namespaced)


CLUSTER_QUEUES = kueue_resource("clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = kueue_resource("localqueues", "LocalQueue", True)
RESOURCE_FLAVORS = kueue_resource("resourceflavors", "ResourceFlavor", False)
WORKLOADS = kueue_resource("workloads", "Workload", True)
WORKLOAD_PRIORITY_CLASSES = kueue_resource("workloadpriorityclasses", "WorkloadPriorityClass", False)
#: Kueue's objects, in the order they are let go: workloads before the queues that count them.
OBJECTS = (WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS, WORKLOAD_PRIORITY_CLASSES)
#: The cluster-scoped kinds a run creates (its LocalQueue goes with the run's namespace), in the order a sweep
#: deletes them: a ResourceFlavor in use is kept by its finalizer until its ClusterQueue is gone.
CLUSTER_SCOPED = (CLUSTER_QUEUES, WORKLOAD_PRIORITY_CLASSES, RESOURCE_FLAVORS)

#: The namespace Kueue runs its own objects in, as its manifests name it.
NAMESPACE = "kueue-system"
#: Who reads Kueue's /metrics (its admission queue, for the virtual clock): a ServiceAccount of ours bound to the
#: built-in ``system:monitoring`` role. Kueue's metrics server takes bearer tokens only (TokenReview), not certificates.
METRICS_READER = "dra-harness-metrics-reader"


def metrics_token(kube: Kube, seconds: int = 86400) -> str:
    """A short-lived token of :data:`METRICS_READER` (TokenRequest; kept in memory only, never written)."""
    path = rest.SERVICE_ACCOUNTS.path(NAMESPACE, METRICS_READER, "token")
    token: str = kube.request("POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                             "spec": {"expirationSeconds": seconds}})["status"]["token"]
    return token
