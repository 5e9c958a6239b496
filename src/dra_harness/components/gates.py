"""Per-version DRA feature gates and runtime-config, derived from the release source.

Why derived: gate names, maturity and locks change every minor, an unknown gate or a
locked gate set to its non-default value stops a component from starting, and an
unknown ``--runtime-config`` group version does the same. So the table is parsed
from ``pkg/features/kube_features.go`` and the resource/scheduling REST storage of
each release (``dra-harness components gates`` rewrites ``gates.json``), committed,
and checked at ``cluster up`` against the components' ``kubernetes_feature_enabled``
metric.

Policy: turn on every DRA gate the release knows that is not locked, plus the gates
they depend on, and serve every version of ``resource.k8s.io`` the release has (the
alpha/beta versions hold DeviceTaintRule and ResourcePoolStatusRequest). When a
workload gate is on, every non-GA scheduling.k8s.io version is served too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dra_harness import data

TABLE_PATH = data.path("gates.json")

_SPEC_BLOCK = re.compile(r"^\t(\w+): \{\n((?:\t\t.*\n)+?)\t\},", re.M)
_SPEC_ENTRY = re.compile(r'\{Version: version\.MustParse\("1\.(\d+)"\), ([^}]*)\}')
_DEPENDENCY = re.compile(r"^\t(\w+): \{([\w, ]*)\},", re.M)
_STORAGE_VERSION = re.compile(r"(\w+)\.SchemeGroupVersion\.Version\] = storageMap")


def is_dra_gate(name: str) -> bool:
    return name.startswith("DRA") or name in {
        "DynamicResourceAllocation",
        "ResourceHealthStatus",
        "ResourceHealthStatusMessage",
        "KubeletPodResourcesDynamicResources",
    }


@dataclass(frozen=True)
class GateSpec:
    name: str
    default: bool
    locked: bool
    prerelease: str


def parse_gates(kube_features_go: str, minor: int) -> dict[str, GateSpec]:
    """The effective spec of every gate at Kubernetes ``1.<minor>``."""
    versioned = kube_features_go.split("defaultVersionedKubernetesFeatureGates", 1)[1]
    versioned = versioned.split("defaultKubernetesFeatureGateDependencies", 1)[0]
    gates: dict[str, GateSpec] = {}
    for name, body in _SPEC_BLOCK.findall(versioned):
        effective = None
        for since, fields in _SPEC_ENTRY.findall(body):
            # Entries are ordered; the last one not newer than the release wins.
            # Entries gated on MinCompatibilityVersion describe a future default.
            if int(since) <= minor and "MinCompatibilityVersion" not in fields:
                effective = fields
        if effective is None:
            continue
        prerelease = re.search(r"PreRelease: featuregate\.(\w+)", effective)
        gates[name] = GateSpec(
            name=name,
            default="Default: true" in effective,
            locked="LockToDefault: true" in effective,
            prerelease=prerelease.group(1) if prerelease else "",
        )
    return gates


def parse_dependencies(kube_features_go: str) -> dict[str, list[str]]:
    if "defaultKubernetesFeatureGateDependencies" not in kube_features_go:
        return {}
    deps = kube_features_go.split("defaultKubernetesFeatureGateDependencies", 1)[1]
    return {
        name: [d.strip() for d in body.split(",") if d.strip()]
        for name, body in _DEPENDENCY.findall(deps)
    }


def served_versions(storage_go: str) -> list[str]:
    """Group versions a REST storage provider registers, e.g. ``v1beta2``."""
    found = []
    for alias in _STORAGE_VERSION.findall(storage_go):
        version = re.search(r"(v\d+(?:alpha|beta)?\d*)$", alias)
        if version and version.group(1) not in found:
            found.append(version.group(1))
    return found


def derive(source: Path, version: str) -> dict:
    """The table row for one release, from its unpacked module source."""
    minor = int(version.split(".")[1])
    features_go = (source / "pkg/features/kube_features.go").read_text()
    gates = parse_gates(features_go, minor)
    deps = parse_dependencies(features_go)

    wanted: dict[str, bool] = {}

    def turn_on(name: str) -> None:
        spec = gates.get(name)
        if spec is None or spec.locked or spec.prerelease == "Deprecated" or name in wanted:
            return
        wanted[name] = True
        for dep in deps.get(name, []):
            turn_on(dep)

    for name in sorted(gates):
        if is_dra_gate(name):
            turn_on(name)
    if wanted.get("GenericWorkload"):
        # PodGroups are served, so the gang check runs: where the release gates the scheduler's gang plugin apart
        # (1.35-1.36 GangScheduling, alpha, off), a gang would be scheduled pod by pod (1.36.3: the check FAILed).
        turn_on("GangScheduling")

    runtime_config = []
    resource_storage = source / "pkg/registry/resource/rest/storage_resource.go"
    for v in served_versions(resource_storage.read_text()):
        if v != "v1":
            runtime_config.append(f"resource.k8s.io/{v}")
    if wanted.get("GenericWorkload"):
        scheduling_storage = source / "pkg/registry/scheduling/rest/storage_scheduling.go"
        # Workload-aware components watch PodGroups in the group's alpha/beta versions
        # and wait for those informers before scheduling anything.
        runtime_config += [
            f"scheduling.k8s.io/{v}" for v in served_versions(scheduling_storage.read_text()) if v != "v1"
        ]
    return {
        "feature_gates": dict(sorted(wanted.items())),
        "runtime_config": runtime_config,
        "dra_gates_locked_on": sorted(
            n for n, s in gates.items() if is_dra_gate(n) and s.locked and s.default
        ),
    }


@cache
def table() -> dict[str, dict]:
    return json.loads(TABLE_PATH.read_text())


def for_version(version: str) -> dict:
    """Gates and runtime-config for a Kubernetes version we ship a row for."""
    rows = table()
    if version not in rows:
        raise KeyError(f"no feature-gate row for Kubernetes {version}; have {', '.join(rows)}")
    return rows[version]


def feature_gates_flag(version: str) -> str:
    return ",".join(f"{k}={str(v).lower()}" for k, v in for_version(version)["feature_gates"].items())


def runtime_config_flag(version: str) -> str:
    return ",".join(f"{gv}=true" for gv in for_version(version)["runtime_config"])
