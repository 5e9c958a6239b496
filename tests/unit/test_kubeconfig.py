"""Kubeconfigs read through the harness's own reader still work as kubectl reads them.

The reader refuses malformed files (tests/integration/test_malformed_user_files.py); these
are its controls: the embedded cluster's own kubeconfig, certificate paths relative to the
file, and a KUBECONFIG list merged as kubectl merges it. And its refusals never quote a value:
each field in turn given a secret of the wrong type (issue 60).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

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
    with pytest.raises(KubeconfigError, match=f"^kubeconfig {bad}: clusters: must be a list or null, not an integer$"):
        load_configuration(None)


# -- a credential in the wrong place is never quoted back (issue 60) --------------------------------------------
SECRET = "planted" + os.urandom(8).hex()
#: Every field the reader checks, each with a value: the token user is the one the context picks, the exec user is
#: only read (the client would run its plugin).
GOOD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Config", "current-context": "c",
    "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True,
                                           "tls-server-name": "api", "certificate-authority-data": "Y2E="}}],
    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "bot", "namespace": "default"}}],
    "users": [{"name": "bot", "user": {"token": "t0ken", "username": "ci", "password": "pw"}},
              {"name": "plugin", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token",
                                                   "args": ["--ci"], "env": [{"name": "VAULT_TOKEN", "value": "v"}]},
                                          "auth-provider": {"name": "oidc", "config": {"client-id": "x"}}}}],
}


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The path of every node below the top: each mapping's values and each list's items."""
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [p for key, child in children for p in [(*path, key), *_paths(child, (*path, key))]]


def _replaced(data: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(data) if isinstance(data, dict) else list(data)
    copy[path[0]] = _replaced(data[path[0]], path[1:], new)
    return copy


WRONG = {"a string": SECRET, "a list": [SECRET], "a mapping": {"name": SECRET, "user": {"token": SECRET}}}


@pytest.mark.parametrize("wrong", WRONG)
def test_a_credential_put_where_a_kubeconfig_wants_another_type_is_never_quoted_in_the_refusal(tmp_path, wrong, capfd):
    """Each field in turn given a string, a list or a mapping holding a secret: the one line names the field only.

    The schema's messages quoted the value (``users: {'name': 'u', 'user': {'token': ...}} is not of type 'array'``),
    and a CI log shows that line to everyone."""
    path = tmp_path / "kubeconfig"
    refused = 0
    for field in _paths(GOOD):
        if field[-1] == "name" and wrong == "a string":
            continue  # a name the file defines is an identifier, quoted where it helps (contexts: a, b)
        path.write_text(yaml.safe_dump(_replaced(GOOD, field, WRONG[wrong])))
        try:
            load_configuration(path)
        except KubeconfigError as e:
            refused += 1
            assert SECRET not in str(e), f"{'.'.join(map(str, field))}: {e}"
            assert "\n" not in str(e) and str(e).startswith(f"kubeconfig {path}: ")
        out, err = capfd.readouterr()
        assert SECRET not in out + err, f"{'.'.join(map(str, field))} printed: {out}{err}"
    assert refused > len(_paths(GOOD)) // 2  # control: most replacements are refused, not silently taken


def test_a_users_mapping_and_a_string_exec_are_refused_naming_the_field(tmp_path):
    users = {**GOOD, "users": {"name": "bot", "user": {"token": SECRET}}}
    exec_ = _replaced(GOOD, ("users", 1, "user", "exec"), f"get-token --client-secret {SECRET}")
    for data, says in [(users, "users: must be a list or null, not a mapping"),
                       (exec_, "users.1.user.exec: must be a mapping, not a string")]:
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(data))
        with pytest.raises(KubeconfigError) as e:
            load_configuration(tmp_path / "kubeconfig")
        assert str(e.value) == f"kubeconfig {tmp_path / 'kubeconfig'}: {says}"
