"""The roles we ship (deploy/rbac/dra-harness.yaml) are enough, and grant nothing beyond the harness's own.

Checked on the embedded cluster (RBAC on): the roles and the admission policy are applied
with the kind provider's server-side apply and bound to ServiceAccounts named
``dra-harness`` (the name the policy matches). The API server is asked about every verb
the harness uses *and* about what it must not be able to do (SubjectAccessReview); the
policy's denials are tried for real with the ServiceAccount's token; and suites run for
real as the ServiceAccount holding only the everyday roles, through ``--cluster=existing``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dra_harness.providers.handle import grant_namespace_role
from dra_harness.kube.apply import apply_all, resource_for
from dra_harness.kube import rest
from dra_harness.kube.client import connect
from dra_harness.kube.waits import wait_for_deletion
from dra_harness.labels import DISRUPTABLE_LABEL, RUN_LABEL

ROLES = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "dra-harness.yaml"
_RBAC = "rbac.authorization.k8s.io"
BINDINGS = rest.Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
NS_BINDINGS = rest.Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True)
DRIVER_NAMESPACE = "dra-example-driver"

# (verb, group, resource, subresource, namespace) the harness uses; every one must be allowed.
EVERYDAY = [
    ("create", "", "namespaces", "", ""), ("delete", "", "namespaces", "", ""), ("patch", "", "namespaces", "", ""),
    ("watch", "", "namespaces", "", ""), ("list", "", "pods", "", "any"), ("list", "", "events", "", "any"),
    ("get", "", "serviceaccounts", "", "any"), ("list", "", "nodes", "", ""), ("list", "apps", "daemonsets", "", "any"),
    ("list", "apps", "deployments", "", "any"),  # the simulated-nodes preflight reads tenants' templates
    ("create", "scheduling.k8s.io", "priorityclasses", "", ""), ("list", "resource.k8s.io", "resourceclaims", "", "any"),
    ("watch", "resource.k8s.io", "resourceslices", "", ""), ("get", "resource.k8s.io", "deviceclasses", "", ""),
    ("create", _RBAC, "rolebindings", "", "any"), ("create", "coordination.k8s.io", "leases", "", "default"),
    ("list", "coordination.k8s.io", "leases", "", ""),  # other runs' leases, whatever their lease namespace
]
#: Granted only inside a namespace the harness created and bound dra-harness-namespace in ("own").
IN_OWN_NAMESPACE = [
    ("create", "", "pods", "", "own"), ("deletecollection", "", "pods", "", "own"), ("get", "", "pods", "log", "own"),
    ("create", "", "configmaps", "", "own"), ("create", "", "resourcequotas", "", "own"),
    ("deletecollection", "apps", "deployments", "", "own"), ("deletecollection", "batch", "jobs", "", "own"),
    ("create", "policy", "poddisruptionbudgets", "", "own"), ("create", "resource.k8s.io", "resourceclaims", "", "own"),
    ("deletecollection", "resource.k8s.io", "resourceclaims", "", "own"),
    ("create", "resource.k8s.io", "resourceclaimtemplates", "", "own"),
]
DISRUPTIVE = [
    ("patch", "", "nodes", "", ""), ("create", "", "pods", "eviction", "any"),
    ("create", "resource.k8s.io", "devicetaintrules", "", ""), ("delete", "", "pods", "", DRIVER_NAMESPACE),
]
#: What neither role may do: writes outside its own namespaces, kube-system, cluster-wide pod deletes.
NEVER = [
    ("delete", "", "pods", "", "any"), ("delete", "", "pods", "", "kube-system"), ("create", "", "pods", "", "kube-system"),
    ("deletecollection", "", "pods", "", "any"), ("delete", "coordination.k8s.io", "leases", "", "kube-system"),
    ("delete", "", "nodes", "", ""), ("delete", "resource.k8s.io", "resourceslices", "", ""),
    ("create", "", "secrets", "", "any"), ("get", "", "secrets", "", "kube-system"),
    ("list", "", "configmaps", "", "any"),  # never read beyond its own namespaces
]


def _allowed(kube, sa_namespace: str, check: tuple[str, str, str, str, str], own: str) -> bool:
    verb, group, resource, sub, namespace = check
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub}
    if namespace:
        attributes["namespace"] = {"any": "any-namespace", "own": own}.get(namespace, namespace)
    review = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{sa_namespace}:dra-harness",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}"],
                 "resourceAttributes": attributes},
    })
    return bool(review["status"].get("allowed"))


def _token_kubeconfig(kube, admin_kubeconfig: Path, sa_namespace: str, path: Path) -> tuple[Path, str]:
    token = kube.request("POST", rest.SERVICE_ACCOUNTS.path(sa_namespace, "dra-harness", "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 900},
    })["status"]["token"]
    server = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": server}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return path, token


def _ensure_namespace(kube, name: str) -> bool:
    """Create ``name`` unless it exists (True if created here); one being deleted is waited out first."""
    try:
        kube.create(rest.NAMESPACES, {"metadata": {"name": name}})
        return True
    except rest.Conflict:
        if not kube.get(rest.NAMESPACES, name)["metadata"].get("deletionTimestamp"):
            return False
    wait_for_deletion(kube, rest.NAMESPACES, name, 60)
    return _ensure_namespace(kube, name)


@pytest.fixture
def bound(cluster, namespace):
    """ServiceAccounts named dra-harness: the everyday one in ``namespace``, the disruptive one in
    ``<namespace>-d``; the roles, policy and bindings are removed after."""
    kube = cluster.kube
    disruptor_ns = f"{namespace}-d"[:63]
    created_driver_ns = _ensure_namespace(kube, DRIVER_NAMESPACE)  # the driver-pods Role lives there
    kube.create(rest.NAMESPACES, {"metadata": {"name": disruptor_ns, "labels": {RUN_LABEL: cluster.run_id}}})
    docs = [d for d in yaml.safe_load_all(ROLES.read_text()) if d]
    applied = apply_all(kube, docs)
    assert "ValidatingAdmissionPolicy/dra-harness-own-objects-only" in applied and "ClusterRole/dra-harness" in applied
    grants = {namespace: ["dra-harness"], disruptor_ns: ["dra-harness", "dra-harness-disruptive"]}
    roles = {namespace: ["dra-harness-leases"], disruptor_ns: ["dra-harness-leases", "dra-harness-driver-pods"]}
    namespaced_roles = {d["metadata"]["name"]: d["metadata"]["namespace"] for d in docs if d["kind"] == "Role"}
    made: list[tuple[rest.Resource, str, str | None]] = []
    try:
        for sa_ns in grants:
            kube.create(rest.SERVICE_ACCOUNTS, {"metadata": {"name": "dra-harness"}}, sa_ns)
            subject = [{"kind": "ServiceAccount", "name": "dra-harness", "namespace": sa_ns}]
            for role in grants[sa_ns]:
                kube.create(BINDINGS, {"metadata": {"name": f"{sa_ns}-{role}", "labels": {RUN_LABEL: cluster.run_id}},
                                       "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role}, "subjects": subject})
                made.append((BINDINGS, f"{sa_ns}-{role}", None))
            for role in roles[sa_ns]:
                kube.create(NS_BINDINGS, {"metadata": {"name": f"{sa_ns}-{role}"[:63]},
                                          "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": role}, "subjects": subject},
                            namespaced_roles[role])
                made.append((NS_BINDINGS, f"{sa_ns}-{role}"[:63], namespaced_roles[role]))
        yield kube, namespace, disruptor_ns
    finally:
        for res, name, ns in made:
            kube.delete(res, name, ns)
        for doc in reversed(docs):
            kube.delete(resource_for(kube, doc["apiVersion"], doc["kind"]), doc["metadata"]["name"],
                        doc["metadata"].get("namespace"))
        kube.delete(rest.NAMESPACES, disruptor_ns)
        if created_driver_ns:
            kube.delete(rest.NAMESPACES, DRIVER_NAMESPACE)


def test_every_verb_the_harness_uses_is_granted_and_nothing_beyond_its_own(cluster, bound, tmp_path):
    kube, everyday_ns, disruptor_ns = bound
    own = f"{everyday_ns}-own"
    kube.create(rest.NAMESPACES, {"metadata": {"name": own, "labels": {RUN_LABEL: cluster.run_id}}})
    sa_kubeconfig, _ = _token_kubeconfig(kube, Path(cluster.kubeconfig), everyday_ns, tmp_path / "everyday")
    try:
        assert not [c for c in IN_OWN_NAMESPACE if _allowed(kube, everyday_ns, c, own)], "granted before the harness binds itself"
        grant_namespace_role(connect(str(sa_kubeconfig)), own)  # what the harness does for each namespace it creates
        denied = [c for c in EVERYDAY + IN_OWN_NAMESPACE if not _allowed(kube, everyday_ns, c, own)]
        assert not denied, f"the everyday roles lack {denied}"
        granted = [c for c in DISRUPTIVE + NEVER if _allowed(kube, everyday_ns, c, own)]
        assert not granted, f"the everyday roles grant too much: {granted}"
        denied = [c for c in DISRUPTIVE + EVERYDAY if not _allowed(kube, disruptor_ns, c, own)]
        assert not denied, f"the disruptive roles lack {denied}"
        granted = [c for c in NEVER if _allowed(kube, disruptor_ns, c, own)]
        assert not granted, f"the disruptive roles grant too much: {granted}"
        # Control: the review does grant a namespaced write in the namespace the harness bound itself in, only there.
        assert _allowed(kube, everyday_ns, ("create", "", "pods", "", "own"), own)
        assert not _allowed(kube, everyday_ns, ("create", "", "pods", "", "any"), own)
    finally:
        kube.delete(rest.NAMESPACES, own)


def _policy_in_force(sa, namespace: str, timeout: float = 20.0) -> None:
    """The API server loads a new policy within seconds: wait until a harmless change is denied."""
    end = time.monotonic() + timeout
    while True:
        try:
            sa.patch(rest.NAMESPACES, namespace, {"metadata": {"labels": {"probe": str(int(time.monotonic()))}}})
        except rest.ApiError as e:
            if "dra-harness may" in e.message:
                return
            raise
        assert time.monotonic() < end, f"the admission policy was not in force after {timeout:.0f}s"
        time.sleep(0.5)


def _denied_by_policy(call) -> str:
    with pytest.raises(rest.ApiError) as caught:
        call()
    assert "dra-harness-own-objects-only" in caught.value.message or "dra-harness may" in caught.value.message, caught.value
    return caught.value.message


def test_the_policy_stops_the_harness_from_deleting_relabelling_or_binding_in_others_namespaces(cluster, bound, tmp_path):
    kube, everyday_ns, _ = bound
    other, ours = f"{everyday_ns}-tenant", f"{everyday_ns}-ours"
    kube.create(rest.NAMESPACES, {"metadata": {"name": other}})
    sa = connect(str(_token_kubeconfig(kube, Path(cluster.kubeconfig), everyday_ns, tmp_path / "sa")[0]))
    binding = {"metadata": {"name": "escalate"}, "subjects": [{"kind": "User", "name": "x", "apiGroup": _RBAC}],
               "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": "dra-harness-namespace"}}
    try:
        _policy_in_force(sa, other)
        _denied_by_policy(lambda: sa.delete(rest.NAMESPACES, other))
        _denied_by_policy(lambda: sa.patch(rest.NAMESPACES, other, {"metadata": {"labels": {RUN_LABEL: "mine-now"}}}))
        _denied_by_policy(lambda: sa.create(NS_BINDINGS, binding, other))
        _denied_by_policy(lambda: sa.create(NS_BINDINGS, binding, "kube-system"))
        _denied_by_policy(lambda: sa.create(rest.PRIORITY_CLASSES, {"metadata": {"name": f"{everyday_ns}-pc"}, "value": 5}))
        assert kube.get(rest.NAMESPACES, other)["metadata"].get("labels", {}).get(RUN_LABEL) is None
        # Negative control: the same calls on what the harness made itself go through.
        sa.create(rest.NAMESPACES, {"metadata": {"name": ours, "labels": {RUN_LABEL: cluster.run_id}}})
        sa.create(NS_BINDINGS, binding, ours)
        sa.patch(rest.NAMESPACES, ours, {"metadata": {"labels": {"dra-harness.io/kept": "true"}}})
        sa.create(rest.PRIORITY_CLASSES, {"metadata": {"name": f"{everyday_ns}-pc", "labels": {RUN_LABEL: cluster.run_id}},
                                         "value": 5})
        sa.delete(rest.PRIORITY_CLASSES, f"{everyday_ns}-pc")
        sa.delete(rest.NAMESPACES, ours)
    finally:
        kube.delete(rest.NAMESPACES, other)
        kube.delete(rest.NAMESPACES, ours)
        kube.delete(rest.PRIORITY_CLASSES, f"{everyday_ns}-pc")


def test_suites_pass_as_a_serviceaccount_holding_only_the_everyday_role(cluster, bound, tmp_path):
    kube, everyday_ns, _ = bound
    kubeconfig, token = _token_kubeconfig(kube, Path(cluster.kubeconfig), everyday_ns, tmp_path / "sa-kubeconfig")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "suites/test_sharing.py", "suites/test_allocation.py",
         "--cluster=existing", f"--kubeconfig={kubeconfig}", "-q", "-p", "no:cacheprovider", "-x"],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
    assert out.returncode == 0, tail
    assert " passed" in tail and "Forbidden" not in out.stdout + out.stderr
    assert token not in out.stdout + out.stderr


LEASES = rest.Resource("coordination.k8s.io", "v1", "leases", "Lease", True)


def test_the_contention_roles_write_only_the_runs_simulated_nodes_their_leases_and_slices_of_its_own_driver(
        cluster, bound, tmp_path):
    """``dra-harness-contention`` and the node-lease Role (``--allow-contention --simulated-nodes``): RBAC
    grants node, slice and lease writes, and the policy narrows them to what the run itself made."""
    kube, everyday_ns, disruptor_ns = bound
    subject = [{"kind": "ServiceAccount", "name": "dra-harness", "namespace": everyday_ns}]
    tenant, sim = f"{everyday_ns}-tenant", f"ctn-{everyday_ns}"[:60]
    kube.create(rest.NAMESPACES, {"metadata": {"name": tenant}})
    sa = connect(str(_token_kubeconfig(kube, Path(cluster.kubeconfig), everyday_ns, tmp_path / "sa")[0]))
    ours = {RUN_LABEL: cluster.run_id}
    node = {"metadata": {"name": sim, "labels": ours, "annotations": {"dra-harness.io/simulated-by": "t"}}}
    real = next(n["metadata"]["name"] for n in kube.list(rest.NODES) if "dra-harness.io/simulated-by" not in
                n["metadata"].get("annotations", {}))
    dry = {"dryRun": "All"}

    def slice_of(driver: str) -> dict:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{sim}-x", "labels": ours},
                "spec": {"driver": driver, "nodeName": sim, "pool": {"name": sim, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "d0"}]}}

    def lease(name: str) -> dict:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {"holderIdentity": "t"}}

    try:
        # Without the roles bound: RBAC alone refuses a node.
        with pytest.raises(rest.ApiError) as refused:
            sa.create(rest.NODES, node, dry_run=True)
        assert refused.value.status == 403 and "dra-harness may" not in refused.value.message
        kube.create(BINDINGS, {"metadata": {"name": f"{everyday_ns}-contention", "labels": ours}, "subjects": subject,
                               "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": "dra-harness-contention"}})
        kube.create(NS_BINDINGS, {"metadata": {"name": f"{everyday_ns}-node-leases"[:63]}, "subjects": subject,
                                  "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": "dra-harness-simulated-node-leases"}},
                    "kube-node-lease")
        _policy_in_force(sa, tenant)
        deadline = time.monotonic() + 15
        while True:  # the bindings take effect when the authorizer's cache catches up
            try:
                sa.create(rest.NODES, node)  # control: a simulated node of the run
                break
            except rest.ApiError as e:
                if e.status != 403 or "dra-harness may" in e.message or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        sa.request("PATCH", rest.NODES.path(None, sim, "status"), {"status": {"phase": "Running"}}, params=dry,
                   content_type="application/merge-patch+json")
        for driver in ("contention", "topology", "partition"):  # the harness's own drivers' slices
            sa.request("POST", rest.RESOURCE_SLICES.path(None), slice_of(f"{driver}.dra-harness.io"), params=dry)
        for prefix in ("ctn-", "topo-", "part-"):  # the leases of contention, topology and partition nodes
            sa.request("POST", LEASES.path("kube-node-lease"), lease(prefix + sim[4:]), params=dry)
        sa.create(rest.DEVICE_CLASSES, {"metadata": {"name": f"{sim}-c", "labels": ours}}, dry_run=True)
        # What is not the run's: a real node, another driver's slice, a real node's lease, an unlabelled class.
        _denied_by_policy(lambda: sa.create(rest.NODES, {"metadata": {"name": f"{sim}-u", "labels": ours}}, dry_run=True))
        _denied_by_policy(lambda: sa.request("DELETE", rest.NODES.path(None, real), params=dry))
        _denied_by_policy(lambda: sa.request("PATCH", rest.NODES.path(None, real, "status"), {"status": {"phase": "Running"}},
                                             params=dry, content_type="application/merge-patch+json"))
        _denied_by_policy(lambda: sa.request("POST", rest.RESOURCE_SLICES.path(None), slice_of("gpu.example.com"), params=dry))
        drivers = next(s["metadata"]["name"] for s in kube.list(rest.RESOURCE_SLICES) if s["spec"]["driver"] == "gpu.example.com")
        _denied_by_policy(lambda: sa.request("PATCH", rest.RESOURCE_SLICES.path(None, drivers), {"metadata": {"labels": ours}},
                                             params=dry, content_type="application/merge-patch+json"))
        _denied_by_policy(lambda: sa.request("POST", LEASES.path("kube-node-lease"), lease(real), params=dry))
        _denied_by_policy(lambda: sa.create(rest.DEVICE_CLASSES, {"metadata": {"name": f"{sim}-c"}}, dry_run=True))
        # --kwok-image: the run's KWOK (default ServiceAccount of dra-harness-kwok-<tag>) bound to dra-harness-kwok.
        kwok_ns = "dra-harness-kwok-rbac"

        def kwok_binding(role: str = "dra-harness-kwok", sa_name: str = "default", labels: dict | None = None) -> dict:
            return {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": kwok_ns, "labels": ours if labels is None else labels},
                    "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role},
                    "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": kwok_ns}]}

        sa.request("POST", BINDINGS.path(None), kwok_binding(), params=dry)  # control: allowed
        # RBAC itself refuses any other role (no bind on it, and the harness does not hold cluster-admin's rights).
        with pytest.raises(rest.ApiError) as escalation:
            sa.request("POST", BINDINGS.path(None), kwok_binding(role="cluster-admin"), params=dry)
        assert escalation.value.status == 403 and "dra-harness may" not in escalation.value.message, escalation.value
        # The policy: the KWOK role to anyone but a run's KWOK, or without the run's label.
        _denied_by_policy(lambda: sa.request("POST", BINDINGS.path(None), kwok_binding(sa_name="dra-harness"), params=dry))
        _denied_by_policy(lambda: sa.request("POST", BINDINGS.path(None), kwok_binding(labels={}), params=dry))
        sa.delete(rest.NODES, sim)  # control: its own node it may delete
        # The node policy leaves a real node's cordon to the disruptive role, as before.
        disruptor = connect(str(_token_kubeconfig(kube, Path(cluster.kubeconfig), disruptor_ns, tmp_path / "d")[0]))
        disruptor.request("PATCH", rest.NODES.path(None, real), {"spec": {"unschedulable": True}}, params=dry,
                          content_type="application/merge-patch+json")
    finally:
        kube.delete(rest.NODES, sim)
        kube.delete(BINDINGS, f"{everyday_ns}-contention")
        kube.delete(NS_BINDINGS, f"{everyday_ns}-node-leases"[:63], "kube-node-lease")
        kube.delete(rest.NAMESPACES, tenant)


def test_the_policy_keeps_a_cordon_to_labelled_nodes_and_no_harness_namespace_privileged(cluster, bound, tmp_path):
    """A node patch only where the user labelled the node disruptable (and the label stays), and no PodSecurity
    ``privileged`` label on a namespace of the harness: both server-side dry runs, so nothing changes."""
    kube, _, disruptor_ns = bound
    sa = connect(str(_token_kubeconfig(kube, Path(cluster.kubeconfig), disruptor_ns, tmp_path / "sa")[0]))
    dry, merge = {"dryRun": "All"}, "application/merge-patch+json"
    unlabelled = f"{disruptor_ns}-plain"[:63]  # a node object only: nothing runs it
    kube.create(rest.NODES, {"metadata": {"name": unlabelled}})
    labelled = next(n["metadata"]["name"] for n in kube.list(rest.NODES, label_selector=f"{DISRUPTABLE_LABEL}=true"))
    cordon = {"spec": {"unschedulable": True}}
    privileged = {"pod-security.kubernetes.io/enforce": "privileged"}
    try:
        _policy_in_force(sa, "kube-system")
        _denied_by_policy(lambda: sa.request("PATCH", rest.NODES.path(None, unlabelled), cordon, params=dry, content_type=merge))
        _denied_by_policy(lambda: sa.request("PATCH", rest.NODES.path(None, labelled),
                                             {"metadata": {"labels": {DISRUPTABLE_LABEL: None}}}, params=dry, content_type=merge))
        _denied_by_policy(lambda: sa.request("POST", rest.NAMESPACES.path(), {"metadata": {
            "name": f"{disruptor_ns}-p"[:63], "labels": {RUN_LABEL: cluster.run_id, **privileged}}}, params=dry))
        _denied_by_policy(lambda: sa.request("PATCH", rest.NAMESPACES.path(None, disruptor_ns),
                                             {"metadata": {"labels": privileged}}, params=dry, content_type=merge))
        # Negative control: the cordon of a labelled node and a baseline level on our namespace go through.
        sa.request("PATCH", rest.NODES.path(None, labelled), cordon, params=dry, content_type=merge)
        sa.request("PATCH", rest.NAMESPACES.path(None, disruptor_ns),
                   {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}, params=dry, content_type=merge)
    finally:
        kube.delete(rest.NODES, unlabelled)
