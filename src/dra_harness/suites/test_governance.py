"""Governance: which classes a namespace may claim, who may ask for admin access, what the driver may do.

- Per-namespace DeviceClass limits, enforced by the ValidatingAdmissionPolicy the harness ships
  (``deploy/policies/device-class-limits.yaml``, :mod:`dra_harness.checks.class_limits`): a
  namespace limited to one class is refused a claim (and a template, and a ``firstAvailable``
  alternative) for another, with the policy's message, and allowed its own.
- ``adminAccess`` claims: refused in a namespace without ``resource.kubernetes.io/admin-access=true``
  (the API server's own rule under DRAAdminAccess), accepted once it is there.
- The driver's ServiceAccount, from its DaemonSet (:mod:`dra_harness.checks.driver_rbac`): what it
  may do beyond publishing its own node's slices and reading claims, as findings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.checks import admin_access, driver_rbac
from dra_harness.checks.class_limits import ClassLimits
from dra_harness.kube import builders, rest

pytestmark = pytest.mark.concern("governance", "Governance")


@pytest.fixture
def limits(cluster) -> Iterator[ClassLimits]:
    lim = ClassLimits(cluster.kube, cluster.run_id)
    try:
        try:
            lim.install()
        except rest.ApiError as e:
            if e.status == 403:
                raise NotEstablished(f"installing a ValidatingAdmissionPolicy needs rights this identity lacks: {e.message[:200]}") from None
            raise
        yield lim
    finally:
        lim.remove()  # also a policy created before its binding was refused


def refusal(kube, res: rest.Resource, body: dict, namespace: str) -> str | None:
    """The API server's refusal of creating ``body``, or None when it was created."""
    try:
        kube.create(res, body, namespace)
    except rest.ApiError as e:
        return f"{e.status} {e.message}"
    return None


def test_a_namespace_limited_to_one_device_class_is_refused_any_other(cluster, namespace, limits, evidence):
    kube, own = cluster.kube, cluster.profile.device_class
    other = "not-" + own  # need not exist: admission looks at the name asked for
    limits.limit(namespace, [own])
    first = limits.first_refusal(namespace, other)
    assert first is not None, f"class {other} was let into a namespace limited to {own} for 15 s after the policy was installed"
    denied = {
        "claim": refusal(kube, rest.RESOURCE_CLAIMS, builders.claim("other", cluster.run_id, [builders.exactly("gpu", other)]),
                         namespace),
        "template": refusal(kube, rest.RESOURCE_CLAIM_TEMPLATES,
                            builders.claim_template("other", cluster.run_id, [builders.exactly("gpu", other)]), namespace),
        "firstAvailable": refusal(kube, rest.RESOURCE_CLAIMS, builders.claim("fallback", cluster.run_id, [
            builders.first_available("gpu", [builders.exactly("own", own), builders.exactly("other", other)])]), namespace),
    }
    allowed = refusal(kube, rest.RESOURCE_CLAIMS, builders.claim("own", cluster.run_id, [builders.exactly("gpu", own)]), namespace)
    evidence.record(section="governance", policy=limits.name, allowed_class=own, refused=denied, own_class=allowed or "created", first_refusal=first)
    assert allowed is None, f"the namespace's own class {own} was refused: {allowed}"
    let_in = [k for k, v in denied.items() if v is None]
    assert not let_in, f"class {other} was let into a namespace limited to {own} by: {', '.join(let_in)}"
    assert all(f"may use only the device classes [{own}]" in v for v in denied.values() if v), denied


def test_an_admin_access_claim_is_refused_without_the_namespaces_admin_access_label(cluster, namespace, evidence):
    try:
        result = admin_access.probe(cluster.kube, namespace, cluster.profile.device_class, cluster.run_id)
    except rest.ApiError as e:
        raise NotEstablished(f"labelling the namespace {admin_access.LABEL}=true needs rights this identity lacks: {e.message[:200]}") from None
    evidence.record(section="governance", without_label=result.without_label or "accepted", with_label=result.with_label or "accepted")
    problems = result.problems()
    assert not problems, "; ".join(problems)


def test_the_drivers_service_account_may_do_no_more_than_publish_its_nodes_slices_and_read_claims(cluster, evidence):
    pods = cluster.driver_pods()
    if not pods:
        pytest.skip("the driver runs as the harness's processes with the cluster's own credentials, not as a DaemonSet"
                    if cluster.controls_driver else f"no DaemonSet {'/'.join(cluster.profile.driver_daemonset)} found")
    pod = pods[0]
    sa = pod["spec"].get("serviceAccountName") or "default"
    other = next((n["metadata"]["name"] for n in cluster.kube.list(rest.NODES)
                  if n["metadata"]["name"] != pod["spec"]["nodeName"]), "dra-harness-audit-no-such-node")
    try:
        result = driver_rbac.audit(cluster.kube, pod["metadata"]["namespace"], sa, cluster.driver, pod["spec"]["nodeName"], other)
    except driver_rbac.AuditImpossible as e:
        raise NotEstablished(str(e)) from None
    evidence.record(section="governance", service_account=result.service_account, granted_beyond=result.granted_beyond,
                    missing_needed=result.missing_needed, slice_probe=result.slice_probe, findings=result.findings,
                    **({"not_established": result.not_established} if result.not_established else {}))
    assert not result.missing_needed, f"the driver's ServiceAccount lacks what it needs: {result.missing_needed}"
