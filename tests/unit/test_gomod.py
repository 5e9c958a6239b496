"""Wrapper go.mod files: replaces come from the release's own go.mod, and the committed ones are current."""

from __future__ import annotations

import shutil

import pytest

from dra_harness.components import catalog, gomod
from dra_harness.components.build import _default_binary_name

UPSTREAM = {
    "Go": "1.26.0",
    "Godebug": [{"Key": "default", "Value": "go1.26"}],
    "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
        {"Old": {"Path": "k8s.io/kubelet"}, "New": {"Path": "./staging/src/k8s.io/kubelet"}},
        {"Old": {"Path": "github.com/x/y"}, "New": {"Path": "github.com/x/y", "Version": "v1.0.0"}},
    ],
}


def test_staging_modules_are_replaced_with_their_published_tag():
    assert gomod.staging_replaces(UPSTREAM, "1.37.2") == {"k8s.io/api": "v0.37.2", "k8s.io/kubelet": "v0.37.2"}


def test_the_rendered_module_lists_binaries_as_tools_and_keeps_godebug():
    text = gomod.render(catalog.kubernetes("1.37.2"), UPSTREAM)
    assert "\tk8s.io/kubernetes/cmd/kube-apiserver\n" in text
    assert "godebug default=go1.26" in text
    assert "\tk8s.io/api => k8s.io/api v0.37.2" in text
    assert "github.com/x/y =>" not in text


def test_binary_names_follow_go_build_rules():
    assert _default_binary_name("go.etcd.io/etcd/server/v3") == "server"
    assert _default_binary_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"


@pytest.mark.parametrize("component", catalog.all_components(), ids=lambda c: c.dirname)
def test_every_component_has_a_committed_wrapper_module(component):
    module_dir = component.module_dir()
    assert (module_dir / "go.mod").is_file() and (module_dir / "go.sum").is_file()
    requires = (module_dir / "go.mod").read_text().split()
    assert requires[requires.index(component.module) + 1] == f"v{component.version}"


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
@pytest.mark.parametrize("version", catalog.KUBERNETES_VERSIONS)
def test_committed_kubernetes_replaces_match_the_release_go_mod(version):
    component = catalog.kubernetes(version)
    want = gomod.staging_replaces(gomod.upstream_gomod(component.module, f"v{version}", gomod.toolchain_env(component)), version)
    want |= dict(component.replaces)  # our stand-ins for modules the proxy does not serve
    text = (component.module_dir() / "go.mod").read_text()
    have = {line.removeprefix("replace").split()[0]: line.split()[-1] for line in text.splitlines() if "=>" in line}
    assert have == want
