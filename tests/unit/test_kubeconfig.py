"""Kubeconfigs read through the harness's own reader still work as kubectl reads them.

The reader refuses malformed files (tests/integration/test_malformed_user_files.py); these
are its controls: the embedded cluster's own kubeconfig, certificate paths relative to the
file, and a KUBECONFIG list merged as kubectl merges it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dra_harness.kube.client import KubeconfigError, connect, load_configuration
from dra_harness.providers.embedded.pki import PKI


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> PKI:
    pki = PKI(tmp_path_factory.mktemp("pki"))
    pki.create()
    return pki


def _kubeconfig(path: Path, contexts: dict[str, str], current: str | None, cluster: dict | None = None) -> Path:
    """A kubeconfig with one cluster per context, named after it, at the given server."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": c, "cluster": cluster or {"server": s, "insecure-skip-tls-verify": True}} for c, s in contexts.items()],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
        "users": [{"name": "u", "user": {}}],
        **({"current-context": current} if current else {}),
    }))
    return path


def test_the_embedded_clusters_kubeconfig_loads_with_its_certificates(pki, tmp_path):
    admin = pki.issue("admin", "admin", ("system:masters",))
    path = pki.kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", admin, "c", "u")
    configuration = load_configuration(path)
    assert configuration.host == "https://127.0.0.1:6443"
    assert (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file) == (
        str(pki.ca_cert), str(admin.cert), str(admin.key))
    assert connect(path).host == "https://127.0.0.1:6443"  # the CA makes an SSL context


def test_certificate_paths_resolve_beside_the_kubeconfig_not_the_working_directory(pki, tmp_path, monkeypatch):
    folder = tmp_path / "beside"
    folder.mkdir()
    shutil.copyfile(pki.ca_cert, folder / "ca.crt")
    path = _kubeconfig(folder / "config", {"c": "https://127.0.0.1:1"}, "c",
                       cluster={"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"})
    monkeypatch.chdir(tmp_path)
    assert load_configuration(path).ssl_ca_cert == str(folder / "ca.crt")


def test_a_kubeconfig_list_merges_as_kubectl_does(tmp_path, monkeypatch):
    first = _kubeconfig(tmp_path / "first", {"a": "https://127.0.0.1:1"}, "a")
    second = _kubeconfig(tmp_path / "second", {"a": "https://127.0.0.1:2", "b": "https://127.0.0.1:3"}, "b")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    assert load_configuration(None).host == "https://127.0.0.1:1"  # first current-context, first definition of a
    assert load_configuration(None, "b").host == "https://127.0.0.1:3"  # b only in the second file


def test_a_bad_file_in_a_kubeconfig_list_is_named(tmp_path, monkeypatch):
    good = _kubeconfig(tmp_path / "good", {"a": "https://127.0.0.1:1"}, "a")
    bad = tmp_path / "bad"
    bad.write_text("clusters: 5\n")
    monkeypatch.setenv("KUBECONFIG", f"{good}:{bad}")
    with pytest.raises(KubeconfigError, match=f"^kubeconfig {bad}: clusters: 5 is not of type"):
        load_configuration(None)
