"""Kueue's release manifests as the harness installs them: only loopback, only what is enabled."""

from __future__ import annotations

from pathlib import Path

from dra_harness.providers.embedded import kueue

URL, CA = "https://127.0.0.1:9443", "Q0E="


def test_only_kueues_own_and_the_job_webhooks_are_registered_and_each_is_reached_on_loopback():
    configs = kueue._webhook_configs(kueue._source(), URL, CA)
    assert {c["kind"] for c in configs} == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    hooks = [h for c in configs for h in c["webhooks"]]
    groups = {g for h in hooks for g in h["rules"][0]["apiGroups"]}
    assert groups == {"kueue.x-k8s.io", "batch"}, groups
    assert {"mjob.kb.io", "vjob.kb.io", "mworkload.kb.io", "vclusterqueue.kb.io"} <= {h["name"] for h in hooks}
    assert not any(h["name"] in ("mpod.kb.io", "vdeployment.kb.io") for h in hooks)  # integrations that are off
    for h in hooks:
        assert h["clientConfig"]["url"].startswith(URL + "/") and h["clientConfig"]["caBundle"] == CA
        assert "service" not in h["clientConfig"]


def test_the_crds_the_release_patches_get_the_conversion_webhook_and_the_others_none():
    crds = {c["metadata"]["name"]: c for c in kueue._crds(kueue._source(), URL, CA)}
    converted = {n for n, c in crds.items() if c["spec"].get("conversion", {}).get("strategy") == "Webhook"}
    assert {"workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io"} <= converted
    assert "resourceflavors.kueue.x-k8s.io" in crds and "resourceflavors.kueue.x-k8s.io" not in converted
    assert all(crds[n]["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == f"{URL}/convert" for n in converted)


def test_the_configuration_listens_on_loopback_only_and_maps_device_classes_to_a_quota_resource():
    cfg = kueue.configuration(9443, 8081, 8443, Path("/private/certs"), {"example.com/gpu": ["gpu.example.com"]})
    assert cfg["webhook"]["host"] == "127.0.0.1" and cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:8081"
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:8443" and cfg["leaderElection"]["leaderElect"] is False
    assert cfg["internalCertManagement"]["enable"] is False and cfg["webhook"]["certDir"] == "/private/certs"
    assert cfg["integrations"]["frameworks"] == ["batch/job"]
    assert cfg["resources"]["deviceClassMappings"] == [{"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}]
    # The release's client limits, not Kueue's built-in 20 QPS, which admits about one job a second here.
    assert cfg["clientConnection"] == {"qps": 50, "burst": 100}
    assert "leaderElect" in cfg["leaderElection"] and cfg["leaderElection"] == {"leaderElect": False}
