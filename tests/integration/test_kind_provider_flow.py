"""The kind provider's whole flow, with docker, kind and helm played by recording stand-ins.

There is no Docker engine (and no registry) on this project's machines, so the three
CLIs are scripts that record what they were asked and answer as the real ones do;
everything from the kubeconfig on is real: ``kind get kubeconfig`` hands out the
embedded cluster's kubeconfig, and the provider's wait for slices, the ``existing``
code path and the suites' profile detection run against that real API server.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_harness.providers.existing import open_kubeconfig
from dra_harness.providers.kind.session import KindProvider
from dra_harness.components import catalog
from dra_harness.providers.kind import provider
from dra_harness.kube import rest

DOCKER = r'''#!/bin/sh
echo "docker $*" >> "$REC/calls"
case "$1" in
  info) echo 27.3.1 ;;
  image) [ -f "$REC/built" ] || exit 1 ;;
  build) ctx=$(eval echo \${$#}); ls "$ctx" > "$REC/build-context"; cp "$ctx/Dockerfile" "$REC/Dockerfile"; touch "$REC/built" ;;
  save) printf 'IMAGE-TAR' ;;
  exec) cat > "$REC/import-$3" ;;
esac
'''
KIND = r'''#!/bin/sh
echo "kind $*" >> "$REC/calls"
case "$1 $2" in
  "get clusters") cat "$REC/clusters" 2>/dev/null || echo "No kind clusters found." >&2 ;;
  "create cluster") cp "$6" "$REC/kind-config.yaml"; echo "$4" >> "$REC/clusters" ;;
  "get nodes") echo "$4-control-plane"; echo "$4-worker"; echo "$4-worker2" ;;
  "get kubeconfig") cat "$KUBECONFIG_FOR_KIND" ;;
  "delete cluster") : > "$REC/clusters" ;;
esac
'''
HELM = '#!/bin/sh\necho "helm $*" >> "$REC/calls"\n'


@pytest.fixture
def stand_ins(tmp_path, monkeypatch, cluster):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in {"docker": DOCKER, "kind": KIND, "helm": HELM}.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    rec = tmp_path / "rec"
    rec.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("REC", str(rec))
    monkeypatch.setenv("KUBECONFIG_FOR_KIND", str(cluster.kubeconfig))
    return rec


def test_up_creates_loads_installs_and_waits_then_down_deletes(stand_ins, cluster):
    rec = stand_ins
    name = f"flow-{cluster.run_id}"[:30]
    spec = provider.KindSpec(name=name, k8s_version="1.36.3", workers=2, gpus_per_node=8, install="auto", timeout=120)
    try:
        kubeconfig = provider.up(spec)
        calls = (rec / "calls").read_text().splitlines()
        # The config kind got is the committed one for the version, with the workers asked for.
        config = yaml.safe_load((rec / "kind-config.yaml").read_text())
        assert config["featureGates"] == yaml.safe_load(Path("kind/kind-1.36.3.yaml").read_text())["featureGates"]
        assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
        assert f"kind create cluster --name {name} --config {provider.state_dir(name) / 'kind-config.yaml'} --wait 120s" in calls
        # No image in Docker: ours is built from the Go-built plugin, then imported into every node.
        assert (rec / "build-context").read_text().split() == ["Dockerfile", "dra-example-kubeletplugin"]
        assert "FROM scratch" in (rec / "Dockerfile").read_text()
        for node in ("control-plane", "worker", "worker2"):
            assert (rec / f"import-{name}-{node}").read_text() == "IMAGE-TAR"
        helm = next(c for c in calls if c.startswith("helm "))
        assert f"--set image.repository={provider.LOCAL_DRIVER_IMAGE.rsplit(':', 1)[0]}" in helm
        assert f"--version {catalog.EXAMPLE_DRIVER_VERSION}" in helm and f"--kubeconfig {kubeconfig}" in helm
        assert kubeconfig.read_text() == Path(cluster.kubeconfig).read_text() and oct(kubeconfig.stat().st_mode)[-3:] == "600"
        # From here on it is the existing-cluster path, on a real API server.
        handle = open_kubeconfig(KindProvider({"cluster_name": name}, cluster.run_id), str(kubeconfig), None)
        assert handle.profile.name == "example" and sum(handle.expected.nodes.values()) >= 16
        # A second up reuses the cluster (no second create); a finished up is marked ready.
        assert provider.is_ready(name)
        provider.up(spec)
        assert sum("kind create cluster" in c for c in (rec / "calls").read_text().splitlines()) == 1
    finally:
        assert provider.down(name) is True
    assert not provider.state_dir(name).exists()
    assert provider.down(name) is False


def test_a_driver_that_never_publishes_times_out_with_what_was_seen(stand_ins, cluster):
    spec = provider.KindSpec(name=f"slow-{cluster.run_id}"[:30], workers=2, gpus_per_node=3, install="helm", timeout=5)
    try:
        with pytest.raises(provider.KindError) as e:
            provider.up(spec)
        message = str(e.value)
        assert "\n" not in message
        # The wait gets what is left of the deadline after the kind steps.
        assert re.fullmatch(r"timed out after [1-5]s waiting for 2 workers to publish gpu.example.com devices: "
                            r"devices per node: \{'gpu-node-0': 8, .*\}", message), message
    finally:
        provider.down(spec.name)


@pytest.mark.parametrize("install, message", [
    ("auto", "no helm on PATH, and the driver manifests {}, which is missing; install helm or restore the file"),
    ("manifests", "--install manifests needs {}, which is missing; install helm or restore the file"),
])
def test_no_helm_and_no_manifests_is_one_line(stand_ins, monkeypatch, tmp_path, install, message):
    missing = tmp_path / "missing.yaml"
    monkeypatch.setattr(provider, "MANIFESTS", missing)
    bindir = Path(os.environ["PATH"].split(":")[0])
    (bindir / "helm").unlink()
    monkeypatch.setenv("PATH", f"{bindir}:{Path(sys.executable).parent}")
    with pytest.raises(provider.KindError) as e:
        provider.check_prerequisites(install)
    assert str(e.value) == message.format(missing)


def test_the_manifest_install_applies_the_substituted_objects(cluster, monkeypatch, tmp_path):
    """Without helm our manifests are applied (server-side apply, twice = idempotent) with the image filled in."""
    ns = f"kind-manifests-{cluster.run_id}"[:63]
    template = tmp_path / "driver.yaml"
    template.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: driver-settings, namespace: {ns}, labels: {{dra-harness.io/run: {cluster.run_id}}}}}\n"
        "data: {image: '${DRIVER_IMAGE}', plugins: '${KUBELET_ROOT}/plugins', cdi: '${CDI_ROOT}'}\n"
        f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{dra-harness.io/run: {cluster.run_id}}}}}\n"
    )
    monkeypatch.setattr(provider, "MANIFESTS", template)
    try:
        for _ in range(2):
            assert provider.install_with_manifests(Path(cluster.kubeconfig), "example.com/driver:v1") == [
                f"Namespace/{ns}", "ConfigMap/driver-settings", "DeviceClass/gpu.example.com"]
        data = cluster.kube.get(rest.CONFIG_MAPS, "driver-settings", ns)["data"]
        assert data == {"image": "example.com/driver:v1", "plugins": "/var/lib/kubelet/plugins", "cdi": "/var/run/cdi"}
    finally:
        cluster.kube.delete(rest.NAMESPACES, ns)


def test_the_suites_run_through_cluster_kind_and_the_runs_cluster_is_deleted(stand_ins, cluster):
    """The pytest plugin end to end: --cluster=kind creates the run's cluster, suites pass, the cluster goes."""
    run_id = f"kindflow{cluster.run_id[:8]}"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/test_inventory.py", "--cluster=kind", f"--run-id={run_id}",
         "--nodes=4", "--gpus-per-node=8", "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert re.search(r"\b\d+ passed\b", out.stdout.splitlines()[-1]), out.stdout[-500:]
    calls = (stand_ins / "calls").read_text().splitlines()
    name = f"dra-run-{run_id}"
    assert sum(c.startswith(f"kind create cluster --name {name} ") for c in calls) == 1
    assert calls[-1] == f"kind delete cluster --name {name}"
    assert not provider.state_dir(name).exists()
