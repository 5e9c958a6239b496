"""The kind provider's manifests install against a real API server (the embedded cluster's).

The chart install runs for real in ``test_kind_real.py``; the fallback our manifests give
is applied here, where no Docker is needed, to check the substitution and that a second
apply changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from dra_harness.kube import rest
from dra_harness.providers.kind import driver


def test_the_manifest_install_applies_the_substituted_objects(cluster, monkeypatch, tmp_path):
    """With --install manifests our manifests are applied (server-side apply, twice = idempotent) with the image filled in."""
    ns = f"kind-manifests-{cluster.run_id}"[:63]
    template = tmp_path / "driver.yaml"
    template.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: driver-settings, namespace: {ns}, labels: {{dra-harness.io/run: '{cluster.run_id}'}}}}\n"
        "data: {image: '${DRIVER_IMAGE}', plugins: '${KUBELET_ROOT}/plugins', cdi: '${CDI_ROOT}'}\n"
        f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{dra-harness.io/run: '{cluster.run_id}'}}}}\n"
    )
    monkeypatch.setattr(driver, "MANIFESTS", template)
    try:
        for _ in range(2):
            assert driver.install_with_manifests(Path(cluster.kubeconfig), "example.com/driver:v1") == [
                f"Namespace/{ns}", "ConfigMap/driver-settings", "DeviceClass/gpu.example.com"]
        data = cluster.kube.get(rest.CONFIG_MAPS, "driver-settings", ns)["data"]
        assert data == {"image": "example.com/driver:v1", "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi"}
    finally:
        cluster.kube.delete(rest.NAMESPACES, ns)
