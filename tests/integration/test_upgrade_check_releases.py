"""``upgrade check`` on the older releases we run (1.36.3, 1.35.4), with legacy clients on two removed versions.

The 1.37 case is in ``test_upgrade_check.py``. Here a client writes a claim through
``resource.k8s.io/v1beta1`` (removed in 1.38) and another through ``v1beta2`` (removed in 1.39), and
the check is asked for the next release (GO: it keeps both), for 1.38 (NO-GO naming v1beta1) and for
1.39. What differs between the releases is what the API server counts: a server records a version in
``apiserver_requested_deprecated_apis`` only from the release that deprecates it, so 1.36 counts the
v1beta2 client (NO-GO) and 1.35 does not (the check says "not established" and names the writer from
managedFields, never a plain GO). Then the API server restarts, as it does in every upgrade step: the
gauge starts empty and the check says from when it counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from dra_harness.kube import rest
from dra_harness.providers.embedded.cluster import ClusterSpec, LocalCluster

pytestmark = pytest.mark.cluster
CLAIM = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}
V1BETA1_CLAIM = {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}}


def _check(kubeconfig, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dra_harness.cli", "upgrade", "check", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=120)


def _legacy_claim(kube: rest.Kube, version: str, manager: str, spec: dict) -> None:
    res = rest.Resource("resource.k8s.io", version, "resourceclaims", "ResourceClaim", True)
    kube.request("POST", res.path("default"), {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim",
                                               "metadata": {"name": f"from-{manager}"}, **spec},
                 params={"fieldManager": manager})


@pytest.mark.parametrize("version", ["1.36.3", "1.35.4"])
def test_on_an_older_release_the_check_names_each_legacy_client_the_server_counts_and_says_which_it_cannot_see(version):
    name = f"it-upgcheck-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(name)
    cluster.up(ClusterSpec(name=name, nodes=1, gpus_per_node=1, k8s_version=version, owner_pid=os.getpid()))
    try:
        kube, kc = cluster.kube(), cluster.kubeconfig
        minor = int(version.split(".")[1])
        clean = _check(kc, "--to", "1.39", "--json")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert json.loads(clean.stdout)["requested"] == []

        _legacy_claim(kube, "v1beta1", "legacy-beta1", V1BETA1_CLAIM)
        _legacy_claim(kube, "v1beta2", "legacy-beta2", CLAIM)
        # The next release keeps both versions: GO, and it says v1beta1 is deprecated there.
        nxt = _check(kc, "--to", f"1.{minor + 1}")
        assert nxt.returncode == 0 and "GO" in nxt.stdout.splitlines()[-1], nxt.stdout + nxt.stderr
        assert "deprecated by" in nxt.stdout and "resource.k8s.io/v1beta1 ResourceClaim" in nxt.stdout, nxt.stdout
        to138 = _check(kc, "--to", "1.38")
        assert to138.returncode == 1, to138.stdout + to138.stderr
        assert "BREAKS   clients requested resource.k8s.io/v1beta1 resourceclaims" in to138.stdout
        assert "by manager 'legacy-beta1'" in to138.stdout

        body = json.loads(_check(kc, "--to", "1.39", "--json").stdout)
        counted = {(r["version"], r["resource"]) for r in body["requested"]}
        assert ("v1beta1", "resourceclaims") in counted, body
        if minor >= 36:  # v1beta2 is deprecated in 1.36: counted, so a break
            assert ("v1beta2", "resourceclaims") in counted and body["established"], body
        else:  # 1.35 does not count v1beta2: not established, and its writer named from managedFields
            assert ("v1beta2", "resourceclaims") not in counted and not body["established"], body
            assert any(u.startswith("resource.k8s.io/v1beta2 ") for u in body["uncounted"]), body
            assert any("through resource.k8s.io/v1beta2 by manager 'legacy-beta2'" in w for w in body["writers"]), body

        # The API server restarts (as every upgrade step does): its gauge forgets, and the check says since when.
        before = time.time()
        cluster.restart_component("kube-apiserver")
        after = _check(kc, "--to", "1.38", "--json")
        body = json.loads(after.stdout)
        assert after.returncode == 0 and body["requested"] == [] and body["counted_since"] >= before - 2, body
        assert any("by manager 'legacy-beta1'" in w for w in body["writers"]), body
        assert "window   clients counted since the API server started" in _check(kc, "--to", "1.38").stdout
    finally:
        cluster.down()
