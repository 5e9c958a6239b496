"""The feature-gate table: parsing rules on small samples, and the committed table against the real sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dra_harness.components import catalog
from dra_harness.components import gates

SAMPLE = '''
var defaultVersionedKubernetesFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
	DRAAdminAccess: {
		{Version: version.MustParse("1.32"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.34"), Default: true, PreRelease: featuregate.Beta},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},

	DRAFutureThing: {
		{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Alpha},
	},

	DRAOptional: {
		{Version: version.MustParse("1.35"), Default: false, PreRelease: featuregate.Alpha},
	},

	NodeThing: {
		{Version: version.MustParse("1.30"), Default: false, PreRelease: featuregate.Alpha},
	},

	Unrelated: {
		{Version: version.MustParse("1.30"), Default: false, PreRelease: featuregate.Alpha},
	},
}

var defaultKubernetesFeatureGateDependencies = map[featuregate.Feature][]featuregate.Feature{
	DRAAdminAccess: {DynamicResourceAllocation},
	DRAOptional: {DynamicResourceAllocation, NodeThing},
}
'''


def test_the_effective_spec_is_the_newest_entry_not_after_the_release():
    g = gates.parse_gates(SAMPLE, 35)
    assert g["DRAAdminAccess"].default is True and not g["DRAAdminAccess"].locked
    assert gates.parse_gates(SAMPLE, 36)["DRAAdminAccess"].locked
    assert "DRAAdminAccess" not in gates.parse_gates(SAMPLE, 31)
    assert "DRAFutureThing" not in g


def test_dependencies_are_parsed():
    assert gates.parse_dependencies(SAMPLE)["DRAOptional"] == ["DynamicResourceAllocation", "NodeThing"]


def test_served_versions_are_read_from_rest_storage():
    storage = """
    apiGroupInfo.VersionedResourcesStorageMap[resourcev1alpha3.SchemeGroupVersion.Version] = storageMap
    apiGroupInfo.VersionedResourcesStorageMap[resourcev1.SchemeGroupVersion.Version] = storageMap
    """
    assert gates.served_versions(storage) == ["v1alpha3", "v1"]


def test_locked_gates_are_never_set_and_every_row_has_the_core_api():
    for version, row in gates.table().items():
        assert "DynamicResourceAllocation" not in row["feature_gates"], version
        assert set(row["feature_gates"]).isdisjoint(row["dra_gates_locked_on"]), version
        assert all(v is True for v in row["feature_gates"].values())


def test_there_is_a_row_for_every_supported_version():
    assert set(gates.table()) == set(catalog.KUBERNETES_VERSIONS)


def test_flags_render_as_components_expect():
    flag = gates.feature_gates_flag("1.37.2")
    assert "DRADeviceTaintRules=true" in flag and " " not in flag
    assert gates.runtime_config_flag("1.36.3").startswith("resource.k8s.io/v1alpha3=true")


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
@pytest.mark.parametrize("version", catalog.KUBERNETES_VERSIONS)
def test_the_committed_table_matches_the_release_source(version):
    from dra_harness.components.gomod import go, toolchain_env

    info = json.loads(go("mod", "download", "-json", f"k8s.io/kubernetes@v{version}",
                         env=toolchain_env(catalog.kubernetes(version))))
    assert gates.derive(Path(info["Dir"]), version) == gates.for_version(version), (
        "gates.json is out of date: run `dra-harness components gates`"
    )
