"""kind's own config loader accepts every committed config (and rejects a misspelt field).

No Docker needed: kind's loader (strict YAML into its v1alpha4 types, then its own
validation) is compiled from the kind Go module into a tiny program and run on the
files. Internal packages can only be imported from inside their module, so the
module source is copied to a temporary directory and the program added there.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from dra_harness.providers.kind import config as kind_config

PROGRAM = """package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kind/pkg/internal/apis/config/encoding"
)

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		cfg, err := encoding.Load(path)
		if err == nil {
			if cfg.Name == "" {
				cfg.Name = "dra-harness" // kind fills in --name before validating
			}
			err = cfg.Validate()
		}
		if err != nil {
			fmt.Printf("%s: %v\\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: ok nodes=%d gates=%d runtimeConfig=%d patches=%d\\n", path, len(cfg.Nodes), len(cfg.FeatureGates), len(cfg.RuntimeConfig), len(cfg.ContainerdConfigPatches))
	}
	if failed {
		os.Exit(1)
	}
}
"""


@pytest.fixture(scope="module")
def kind_loader(tmp_path_factory) -> Path:
    if shutil.which("go") is None:
        pytest.skip("Go is not installed")
    from dra_harness.components.gomod import go

    src = Path(json.loads(go("mod", "download", "-json", f"sigs.k8s.io/kind@v{kind_config.KIND_VERSION}"))["Dir"])
    work = tmp_path_factory.mktemp("kind-src") / "kind"
    shutil.copytree(src, work)
    for root, dirs, files in os.walk(work):
        for name in dirs + files:
            p = Path(root) / name
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    (work / "pkg" / "zzdraharness").mkdir()
    (work / "pkg" / "zzdraharness" / "main.go").write_text(PROGRAM)
    subprocess.run(["go", "build", "-o", str(work / "load-config"), "./pkg/zzdraharness"], cwd=work, check=True,
                   capture_output=True, timeout=900, env={**os.environ, "GOFLAGS": "-mod=mod"})
    return work / "load-config"


def test_kind_accepts_every_committed_config(kind_loader):
    paths = [str(kind_config.path_for(v)) for v in kind_config.kind_versions()]
    out = subprocess.run([str(kind_loader), *paths], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    for version in kind_config.kind_versions():
        row = kind_config.render(version)
        assert (f"kind-{version}.yaml: ok nodes=3 gates={len(row['featureGates'])} "
                f"runtimeConfig={len(row['runtimeConfig'])} patches=1") in out.stdout


def test_kind_rejects_a_misspelt_field(kind_loader, tmp_path):
    """The control: the loader is strict, so the check above can fail."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(kind_config.path_for("1.37.2").read_text().replace("labels:", "lables:", 1))
    out = subprocess.run([str(kind_loader), str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "field lables not found in type v1alpha4.Node" in out.stdout
