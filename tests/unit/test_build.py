"""The component builder: a failed build names its step and shows the log's tail; nothing half-built is cached."""

from __future__ import annotations

import shutil

import pytest

from dra_harness.components import build as builder
from dra_harness.components.catalog import Component

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")


@pytest.fixture
def module(tmp_path, monkeypatch):
    monkeypatch.setenv("DRA_HARNESS_CACHE", str(tmp_path / "cache"))
    mod = tmp_path / "mod"
    (mod / "cmd" / "hello").mkdir(parents=True)
    (mod / "go.mod").write_text("module example.test/hello\n\ngo 1.22\n")
    return mod


COMPONENT = Component(name="hello", version="0.0.1", module="example.test/hello",
                      binaries={"hello": "example.test/hello/cmd/hello"}, version_x=("main.version=v0.0.1",))


def test_a_broken_package_fails_naming_the_step_and_the_compiler_error(module):
    (module / "cmd" / "hello" / "main.go").write_text("package main\n\nfunc main() { undefinedThing() }\n")
    with pytest.raises(builder.BuildError) as e:
        builder.build(COMPONENT, module_dir=module)
    message = str(e.value)
    assert message.startswith("hello-v0.0.1: go build failed (exit 1)")
    assert "undefined: undefinedThing" in message
    assert not builder.is_cached(COMPONENT)
    assert not list(builder.binary_dir(COMPONENT).parent.glob(".building-*")), "a staging directory was left behind"


def test_a_good_build_is_cached_with_its_version_stamp(module):
    (module / "cmd" / "hello" / "main.go").write_text(
        'package main\n\nimport "fmt"\n\nvar version = "dev"\n\nfunc main() { fmt.Println(version) }\n'
    )
    first = builder.build(COMPONENT, module_dir=module)
    assert not first.cached and builder.is_cached(COMPONENT)
    import subprocess

    assert subprocess.run([first.binary("hello")], capture_output=True, text=True).stdout.strip() == "v0.0.1"
    assert builder.build(COMPONENT, module_dir=module).cached
