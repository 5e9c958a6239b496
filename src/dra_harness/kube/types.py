"""Shapes of the Kubernetes objects the harness reads, for mypy; nothing here runs.

Objects arrive from the API server as plain JSON dicts, :data:`Obj`. The ``TypedDict``
classes below name the parts of ResourceSlice, ResourceClaim and Pod (resource.k8s.io/v1,
core/v1) that the code reads, so that a mistyped key (``status.alocation``) or a wrong
nesting is a mypy error instead of a ``KeyError`` on a cluster. They are ``total=False``:
the API omits empty fields, so every key may be missing and the code reads optional ones
with ``.get``. Fields the code does not read are left out; add them when you read them.

A function that reads one of these objects declares its parameter as ``Pod | Obj`` (or
``ResourceClaim | Obj``, ...): callers hold plain dicts from :class:`~dra_harness.kube.rest.Kube`,
which mypy does not accept for a ``TypedDict``, and inside the function mypy checks
every lookup against the shape.
"""

from __future__ import annotations

from typing import Any, TypedDict

Obj = dict[str, Any]
"""Any Kubernetes object (or part of one) as JSON: the type of whatever the API returns."""


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm]


# ResourceSlice (resource.k8s.io/v1)


class DeviceAttribute(TypedDict, total=False):
    """Exactly one of the fields is set."""

    int: int
    bool: bool
    string: str
    version: str


class DeviceCapacity(TypedDict, total=False):
    value: str


class SliceDevice(TypedDict, total=False):
    name: str
    attributes: dict[str, DeviceAttribute]
    capacity: dict[str, DeviceCapacity]
    consumesCounters: list[Obj]
    allowMultipleAllocations: bool
    nodeName: str
    allNodes: bool


class ResourcePool(TypedDict, total=False):
    name: str
    generation: int
    resourceSliceCount: int


class ResourceSliceSpec(TypedDict, total=False):
    driver: str
    pool: ResourcePool
    nodeName: str
    nodeSelector: NodeSelector
    allNodes: bool
    perDeviceNodeSelection: bool
    devices: list[SliceDevice]
    sharedCounters: list[Obj]


class ResourceSlice(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceSliceSpec


# ResourceClaim (resource.k8s.io/v1)


class CELSelector(TypedDict, total=False):
    expression: str


class DeviceSelector(TypedDict, total=False):
    cel: CELSelector


class DeviceSubRequest(TypedDict, total=False):
    """One alternative of ``firstAvailable``, and the shape of ``exactly``."""

    name: str
    deviceClassName: str
    selectors: list[DeviceSelector]
    allocationMode: str
    count: int
    adminAccess: bool


class DeviceRequest(TypedDict, total=False):
    name: str
    exactly: DeviceSubRequest
    firstAvailable: list[DeviceSubRequest]


class DeviceClaim(TypedDict, total=False):
    requests: list[DeviceRequest]
    constraints: list[Obj]
    config: list[Obj]


class ResourceClaimSpec(TypedDict, total=False):
    devices: DeviceClaim


class DeviceRequestAllocationResult(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str
    adminAccess: bool
    shareID: str


class DeviceAllocationResult(TypedDict, total=False):
    results: list[DeviceRequestAllocationResult]
    config: list[Obj]


class AllocationResult(TypedDict, total=False):
    devices: DeviceAllocationResult
    nodeSelector: NodeSelector


class ResourceClaimConsumerReference(TypedDict, total=False):
    apiGroup: str
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(TypedDict, total=False):
    allocation: AllocationResult
    reservedFor: list[ResourceClaimConsumerReference]
    devices: list[Obj]


class ResourceClaim(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceClaimSpec
    status: ResourceClaimStatus


# Pod (core/v1)


class PodResourceClaim(TypedDict, total=False):
    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str


class PodSpec(TypedDict, total=False):
    nodeName: str
    nodeSelector: dict[str, str]
    resourceClaims: list[PodResourceClaim]
    containers: list[Obj]
    tolerations: list[Obj]


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class ContainerStatus(TypedDict, total=False):
    name: str
    ready: bool
    restartCount: int
    state: Obj
    lastState: Obj
    containerID: str


class PodResourceClaimStatus(TypedDict, total=False):
    name: str
    resourceClaimName: str


class PodStatus(TypedDict, total=False):
    phase: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]
    resourceClaimStatuses: list[PodResourceClaimStatus]
    reason: str
    message: str


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus
