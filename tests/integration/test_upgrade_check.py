"""``upgrade check --to 1.38`` on a real 1.37 API server: a client calling resource.k8s.io/v1beta1 is a no-go.

v1beta1 is removed in 1.38. On a fresh cluster nothing has requested it and the check says GO (exit 0);
a manifest of ours in v1beta1 is a NO-GO naming the file; then a "legacy" client creates a claim
through v1beta1 and the API server's apiserver_requested_deprecated_apis gauge makes the check a
NO-GO (exit 1) naming the version and resource, and the claim's managedFields name the client.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dra_harness.kube import rest

pytestmark = pytest.mark.cluster
V1BETA1_CLAIMS = rest.Resource("resource.k8s.io", "v1beta1", "resourceclaims", "ResourceClaim", True)
LEGACY = "legacy-gpu-operator"


def _check(kubeconfig, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "upgrade", "check", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=120)


def test_a_client_calling_v1beta1_makes_the_upgrade_to_1_38_a_no_go_and_without_it_the_check_says_go(small_cluster, tmp_path):
    kube = small_cluster.kube()
    if rest.served(kube, "resource.k8s.io", "resourceclaims", "ResourceClaim", ("v1beta1",), namespaced=True) is None:
        pytest.skip("this cluster does not serve resource.k8s.io/v1beta1")
    clean = _check(small_cluster.kubeconfig, "--to", "1.38", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    verdict = json.loads(clean.stdout)
    assert verdict["go"] and verdict["requested"] == [] and verdict["metric_error"] is None
    assert {(r["version"], r["kind"]) for r in verdict["removed"]} >= {("v1beta1", "ResourceClaim"), ("v1beta1", "ResourceSlice")}

    manifest = tmp_path / "claim.yaml"
    manifest.write_text("apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: old}\n"
                        "spec: {devices: {requests: [{name: gpu, deviceClassName: gpu.example.com}]}}\n")
    with_manifest = _check(small_cluster.kubeconfig, "--to", "1.38", "--manifests", str(manifest))
    assert with_manifest.returncode == 1 and f"manifest {manifest}#1: ResourceClaim resource.k8s.io/v1beta1" in with_manifest.stdout

    # The legacy client: one create through v1beta1, with its own field manager.
    kube.request("POST", V1BETA1_CLAIMS.path("default"), {
        "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": "from-a-legacy-client"},
        "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}},
        params={"fieldManager": LEGACY})
    try:
        broken = _check(small_cluster.kubeconfig, "--to", "1.38")
        assert broken.returncode == 1, broken.stdout + broken.stderr
        assert "BREAKS   clients requested resource.k8s.io/v1beta1 resourceclaims" in broken.stdout, broken.stdout
        assert f"by manager {LEGACY!r}" in broken.stdout and "NO-GO" in broken.stdout
        # 1.37 removes nothing a client used: the same cluster is a GO for a target that keeps v1beta1.
        same = _check(small_cluster.kubeconfig, "--to", "1.37")
        assert same.returncode == 2 and "already runs" in same.stderr
    finally:
        kube.delete(rest.RESOURCE_CLAIMS, "from-a-legacy-client", "default")
