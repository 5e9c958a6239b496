"""The cluster's policy refusals are told from everything else by the API server's own words."""

from __future__ import annotations

import pytest

from dra_harness.kube.policy import policy_refusal
from dra_harness.kube.rest import ApiError
from dra_harness.kube.waits import WaitTimeout

REFUSED = [
    (403, 'pods "p" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false', "PodSecurity"),
    (403, 'resourceclaims "c" is forbidden: exceeded quota: q, requested: gpu.example.com.deviceclass.resource.k8s.io/devices=8, '
          'used: ...=0, limited: ...=4', "ResourceQuota"),
    (403, 'pods "p" is forbidden: maximum cpu usage per Container is 2, but limit is 4', "LimitRange"),
    (422, 'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "4": must be less than or equal to cpu limit of 500m',
     "LimitRange"),
    (403, "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding 'b' denied request: no", "ValidatingAdmissionPolicy"),
    (403, 'pods "p" is forbidden: pod rejected: RuntimeClass "nvidia" not found', "RuntimeClass admission"),
    (403, 'admission webhook "validation.gatekeeper.sh" denied the request: [team-label] you must provide labels: {"team"}',
     "policy engine"),
    (403, 'admission webhook "validate.kyverno.svc-fail" denied the request: policy Namespace/require-team: label team',
     "policy engine"),
]


@pytest.mark.parametrize(("status", "message", "kind"), REFUSED)
def test_a_refusal_by_the_clusters_policy_is_named_with_its_kind(status, message, kind):
    said = policy_refusal(ApiError(status, "Forbidden", message))
    assert said and kind in said and message[:40] in said


@pytest.mark.parametrize("error", [
    ApiError(403, "Forbidden", "admission webhook \"gpu.example.com\" denied the request: bad config"),  # the driver's: the product
    ApiError(403, "Forbidden", "ValidatingAdmissionPolicy 'dra-harness-own-objects-only' with binding 'x' denied request"),
    ApiError(403, "Forbidden", "ValidatingAdmissionPolicy 'device-class-limits-ab12-cd34' with binding 'x' denied request"),
    ApiError(409, "Conflict", "exceeded quota: q"),
    ApiError(500, "InternalError", 'violates PodSecurity "restricted:latest"'),
    ValueError('violates PodSecurity "restricted:latest"'),
])
def test_anything_else_is_no_policy_refusal_so_a_product_fault_still_fails(error):
    assert policy_refusal(error) is None


def test_a_wait_that_ran_out_because_the_quota_kept_a_claim_from_its_pod_is_the_quotas_doing():
    why = ("last state: phase Pending, not yet seen by the scheduler; warnings: FailedResourceClaimCreation: PodResourceClaim "
           'gpu: create ResourceClaim : resourceclaims "x" is forbidden: exceeded quota: platform-device-quota, requested: d=1')
    said = policy_refusal(WaitTimeout("pod ns/solo-6 to be Running", 60, None, why))
    assert said and said.startswith("the cluster's ResourceQuota refused a claim") and "platform-device-quota" in said
    # Negative control: a wait that ran out for any other reason is still the check's failure.
    assert policy_refusal(WaitTimeout("pod ns/solo-6 to be Running", 60, None, "last state: phase Pending")) is None
