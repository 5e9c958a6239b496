"""The ClusterRoles we ship (deploy/rbac/dra-harness.yaml) are enough, and the disruptive one is separate.

Checked on the embedded cluster (RBAC on): the roles are applied with the kind provider's
server-side apply, bound to ServiceAccounts, asked about every verb the harness uses
(SubjectAccessReview), and then suites run for real as the ServiceAccount holding only
the non-disruptive role, through ``--cluster=existing``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_harness.kind.apply import apply_all
from dra_harness.kube import rest

ROLES = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "dra-harness.yaml"
BINDINGS = rest.Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False)
ROLE_RES = rest.Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
NS_ROLES = rest.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True)
NS_BINDINGS = rest.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)

# (verb, group, resource, subresource) the harness uses; every one must be allowed.
EVERYDAY = [
    ("create", "", "namespaces", ""), ("delete", "", "namespaces", ""), ("patch", "", "namespaces", ""),
    ("watch", "", "namespaces", ""), ("create", "", "pods", ""), ("deletecollection", "", "pods", ""),
    ("get", "", "pods", "log"), ("create", "", "configmaps", ""), ("create", "", "resourcequotas", ""),
    ("list", "", "events", ""), ("get", "", "serviceaccounts", ""), ("list", "", "nodes", ""),
    ("deletecollection", "apps", "deployments", ""), ("list", "apps", "daemonsets", ""),
    ("deletecollection", "batch", "jobs", ""), ("create", "scheduling.k8s.io", "priorityclasses", ""),
    ("create", "policy", "poddisruptionbudgets", ""),
    ("create", "resource.k8s.io", "resourceclaims", ""), ("deletecollection", "resource.k8s.io", "resourceclaims", ""),
    ("list", "resource.k8s.io", "resourceclaims", ""), ("create", "resource.k8s.io", "resourceclaimtemplates", ""),
    ("watch", "resource.k8s.io", "resourceslices", ""), ("get", "resource.k8s.io", "deviceclasses", ""),
]
DISRUPTIVE = [
    ("patch", "", "nodes", ""), ("create", "", "pods", "eviction"),
    ("create", "resource.k8s.io", "devicetaintrules", ""), ("delete", "resource.k8s.io", "resourceslices", ""),
]


def _allowed(kube, namespace: str, sa: str, verb: str, group: str, resource: str, sub: str) -> bool:
    review = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{namespace}:{sa}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                 "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": sub,
                                        "namespace": "any-namespace"}},
    })
    return bool(review["status"].get("allowed"))


@pytest.fixture
def bound(cluster, namespace):
    """Two ServiceAccounts: ``everyday`` (dra-harness) and ``disruptor`` (both roles); cleaned up after."""
    kube = cluster.kube
    roles = [d for d in yaml.safe_load_all(ROLES.read_text()) if d]
    applied = apply_all(kube, roles)
    assert applied == ["ClusterRole/dra-harness", "ClusterRole/dra-harness-disruptive", "Role/dra-harness-leases"]
    bindings = {
        f"{namespace}-everyday": ("everyday", "dra-harness"),
        f"{namespace}-disruptor": ("disruptor", "dra-harness"),
        f"{namespace}-disruptor-d": ("disruptor", "dra-harness-disruptive"),
    }
    for sa in ("everyday", "disruptor"):
        kube.create(rest.SERVICE_ACCOUNTS, {"metadata": {"name": sa}}, namespace)
    try:
        for name, (sa, role) in bindings.items():
            kube.create(BINDINGS, {
                "metadata": {"name": name, "labels": {"dra-harness.io/run": cluster.run_id}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            })
        for sa in ("everyday", "disruptor"):
            kube.create(NS_BINDINGS, {
                "metadata": {"name": f"{namespace}-{sa}-leases", "labels": {"dra-harness.io/run": cluster.run_id}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dra-harness-leases"},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            }, "default")
        yield kube
    finally:
        for name in bindings:
            kube.delete(BINDINGS, name)
        for sa in ("everyday", "disruptor"):
            kube.delete(NS_BINDINGS, f"{namespace}-{sa}-leases", "default")
        for role in roles:
            if role["kind"] == "Role":
                kube.delete(NS_ROLES, role["metadata"]["name"], role["metadata"]["namespace"])
            else:
                kube.delete(ROLE_RES, role["metadata"]["name"])


def test_every_verb_the_harness_uses_is_granted_and_disruption_only_by_its_own_role(cluster, namespace, bound):
    denied = [c for c in EVERYDAY if not _allowed(bound, namespace, "everyday", *c)]
    assert not denied, f"dra-harness role lacks {denied}"
    granted = [c for c in DISRUPTIVE if _allowed(bound, namespace, "everyday", *c)]
    assert not granted, f"the everyday role can already disrupt: {granted}"
    denied = [c for c in DISRUPTIVE + EVERYDAY if not _allowed(bound, namespace, "disruptor", *c)]
    assert not denied, f"the two roles together lack {denied}"
    # Control: the review does deny what no role grants.
    assert not _allowed(bound, namespace, "disruptor", "delete", "", "nodes", "")


def test_suites_pass_as_a_serviceaccount_holding_only_the_everyday_role(cluster, namespace, bound, tmp_path):
    token = bound.request("POST", rest.SERVICE_ACCOUNTS.path(namespace, "everyday", "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 900},
    })["status"]["token"]
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    kubeconfig = tmp_path / "sa-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    kubeconfig.chmod(0o600)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "suites/test_sharing.py", "suites/test_allocation.py",
         "--cluster=existing", f"--kubeconfig={kubeconfig}", "-q", "-p", "no:cacheprovider", "-x"],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
    assert out.returncode == 0, tail
    assert " passed" in tail and "Forbidden" not in out.stdout + out.stderr
    assert token not in out.stdout + out.stderr
