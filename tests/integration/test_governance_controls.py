"""Negative controls for the governance suite, and the audit of the harness's own driver manifests.

- The driver audit on the example driver's ServiceAccount as our DaemonSet manifest grants it
  (``data/kind/manifests/dra-example-driver.yaml``): RBAC gives it nothing beyond what a node-local
  driver needs, but without an admission policy it may write any node's ResourceSlices (finding).
  With ``deploy/policies/driver-slices-own-node.yaml`` installed, that finding goes (another node's
  slice refused, its own accepted); bound to a role that reads Secrets, the audit finds that.
- Class limits: a namespace the policy does not select (annotated, not labelled) lets another
  class in, and the check's wait for the policy's refusal ends empty.
"""

from __future__ import annotations

import time
import uuid

import pytest

from dra_harness import data, yamlfile
from dra_harness.checks import admin_access, driver_rbac
from dra_harness.checks.class_limits import ClassLimits
from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.providers import driver_manifests

pytestmark = pytest.mark.cluster
SA_NAMESPACE, SA = "dra-example-driver", "dra-example-driver-service-account"
IDENTITY = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
OTHER_NODES_SLICES = "may write ResourceSlices of other nodes"


def _audit(kube) -> driver_rbac.Audit:
    return driver_rbac.audit(kube, SA_NAMESPACE, SA, "gpu.example.com", "gpu-node-0", "gpu-node-1")


def test_the_audit_finds_what_the_drivers_manifest_and_a_missing_node_policy_allow(small_cluster):
    kube = small_cluster.kube()
    docs = [d for d in driver_manifests.render_driver_manifests("unused:1", "/var/lib/kubelet") if d["kind"] in IDENTITY]
    driver_manifests.apply(kube, docs)
    policy = yamlfile.load_all(data.path("policies", "driver-slices-own-node.yaml"), InputError, "policy")
    secrets = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "audit-secrets"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "audit-secrets"},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": SA_NAMESPACE}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "audit-secrets"}}]
    # Our manifest: nothing granted beyond need, but no policy ties slice writes to the driver's node.
    bare = _audit(kube)
    print(f"audit of the DaemonSet manifest's ServiceAccount: {bare}")
    assert not bare.granted_beyond and not bare.missing_needed, bare
    assert bare.slice_probe == {"own_node": "accepted", "other_node": "accepted"}, bare.slice_probe
    assert [f for f in bare.findings if OTHER_NODES_SLICES in f], bare.findings

    kube.create(rest.VALIDATING_ADMISSION_POLICIES, policy[0])
    kube.create(rest.VALIDATING_ADMISSION_POLICY_BINDINGS, policy[1])
    deadline = time.monotonic() + 15  # an admission policy takes effect a moment after it is created
    while OTHER_NODES_SLICES in " ".join((guarded := _audit(kube)).findings) and time.monotonic() < deadline:
        time.sleep(0.5)
    print(f"with the node policy: {guarded.slice_probe}")
    assert not guarded.findings, guarded.findings
    assert guarded.slice_probe["own_node"] == "accepted"
    assert "may not write ResourceSlices of node gpu-node-1" in guarded.slice_probe["other_node"], guarded.slice_probe

    kube.create(rest.CLUSTER_ROLES, secrets[0])
    kube.create(rest.CLUSTER_ROLE_BINDINGS, secrets[1])
    deadline = time.monotonic() + 15  # RBAC changes reach the authorizer through its informer
    while not (leaky := _audit(kube)).granted_beyond and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leaky.granted_beyond == ["get secrets"], leaky
    assert any("may read Secrets" in f for f in leaky.findings), leaky.findings


def test_a_namespace_the_class_limit_policy_does_not_select_lets_another_class_in(small_cluster):
    kube = small_cluster.kube()
    ns = f"limits-{uuid.uuid4().hex[:6]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": {"dra-harness.io/run": "controls"}}})
    limits = ClassLimits(kube, "controls")
    limits.install()
    try:
        limits.limit(ns, ["gpu.example.com"], label=False)
        assert limits.first_refusal(ns, "not-gpu.example.com", timeout=15) is None
    finally:
        limits.remove()
        kube.delete(rest.NAMESPACES, ns)


def test_a_namespace_labelled_for_admin_access_beforehand_makes_the_admin_access_check_fail(small_cluster):
    """Negative control of the adminAccess check: in a namespace someone already labelled, a claim for every
    device is accepted before the probe labels it, and the check says so. Control of the control: an unlabelled
    namespace passes."""
    kube = small_cluster.kube()
    results = {}
    for name, labels in (("pre-labelled", {admin_access.LABEL: "true"}), ("plain", {})):
        ns = f"admin-{name}-{uuid.uuid4().hex[:6]}"
        kube.create(rest.NAMESPACES, {"metadata": {"name": ns, "labels": {"dra-harness.io/run": "controls", **labels}}})
        try:
            results[name] = admin_access.probe(kube, ns, "gpu.example.com", "controls")
            assert kube.list(rest.RESOURCE_CLAIMS, ns) == []  # dry runs: nothing was created
        finally:
            kube.delete(rest.NAMESPACES, ns)
    assert results["pre-labelled"].problems() == [
        f"an adminAccess claim was accepted before the probe labelled the namespace {admin_access.LABEL}=true"], results
    assert results["plain"].problems() == [], results
