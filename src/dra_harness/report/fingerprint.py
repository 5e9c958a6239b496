"""What exactly was tested: versions, the DRA feature gates actually on, APIs, driver, hardware.

Two runs can only be compared, and a verdict only trusted, when the system under test
is pinned down. Feature gates are read from each component's own
``kubernetes_feature_enabled`` metric rather than from the flags we passed, because a
gate can be locked, renamed or dropped between releases; where the metrics cannot be
read (an existing cluster that forbids ``/metrics``) the fingerprint says "unknown"
and why, never a guess. Collection never fails the run: a part that cannot be read
is recorded as an error.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from dra_harness import __version__
from dra_harness.checks.metrics import plugin_means
from dra_harness.kube.types import Obj, SliceDevice
from dra_harness.providers.hardware import attribute_value, devices_by_node
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.components import gates as gate_table
from dra_harness.report import provenance
from dra_harness.report.files import redact

MetricsSource = Callable[[], str]

_FEATURE = re.compile(r'^kubernetes_feature_enabled\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)', re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
#: Gates that are about DRA without "DRA" in their name.
_DRA_RELATED = {"DynamicResourceAllocation", "KubeletPodResourcesDynamicResources", "ResourceHealthStatus",
                "ResourceHealthStatusMessage", "GenericWorkload"}


def _dra_gate_names() -> set[str]:
    names = set(_DRA_RELATED)
    try:
        table = json.loads(gate_table.TABLE_PATH.read_text())
        for row in table.values():
            names |= set(row.get("feature_gates", {})) | set(row.get("dra_gates_locked_on", []))
    except (OSError, ValueError):
        pass
    return names


def is_dra_gate(name: str) -> bool:
    return name.startswith("DRA") or name in _dra_gate_names()


def parse_feature_metrics(text: str) -> dict[str, dict[str, Any]]:
    """``kubernetes_feature_enabled`` lines -> {gate: {"enabled": bool, "stage": str}} (DRA gates only)."""
    out: dict[str, dict[str, Any]] = {}
    for m in _FEATURE.finditer(text):
        labels = dict(_LABEL.findall(m.group("labels")))
        name = labels.get("name", "")
        if name and is_dra_gate(name):
            out[name] = {"enabled": float(m.group("value")) == 1.0, "stage": labels.get("stage") or "GA"}
    return dict(sorted(out.items()))


def feature_gates(sources: dict[str, MetricsSource]) -> Obj:
    """Per component, the DRA gates it reports; ``enabled``: the gates every readable component has on."""
    per: dict[str, Any] = {}
    for component, read in sources.items():
        try:
            gates = parse_feature_metrics(read())
            per[component] = gates if gates else {"unknown": "no kubernetes_feature_enabled metric"}
        except Exception as e:  # noqa: BLE001 - forbidden, unreachable...: say so, never guess
            per[component] = {"unknown": redact(str(e).splitlines()[0] if str(e) else e.__class__.__name__)[:200]}
    readable = [g for g in per.values() if "unknown" not in g]
    if not readable:
        return {"status": "unknown", "components": per,
                "reason": "; ".join(f"{c}: {g['unknown']}" for c, g in per.items()) or "no component to read"}
    names = sorted(set().union(*readable))
    enabled = [n for n in names if all(g.get(n, {}).get("enabled") for g in readable)]
    return {
        "status": "read",
        "enabled": enabled,
        "disabled": [n for n in names if n not in enabled],
        "stages": {n: next(g[n]["stage"] for g in readable if n in g) for n in names},
        "components": per,
    }


def served_resource_api(kube: Kube) -> Obj:
    """resource.k8s.io versions the API server serves, each with its resources."""
    group = kube.request("GET", "/apis/resource.k8s.io")
    preferred = (group.get("preferredVersion") or {}).get("version")
    versions: dict[str, list[str]] = {}
    for v in group.get("versions", []):
        listing = kube.request("GET", f"/apis/resource.k8s.io/{v['version']}")
        versions[v["version"]] = sorted(r["name"] for r in listing.get("resources", []) if "/" not in r["name"])
    return {
        "preferred": preferred,
        "versions": sorted(versions),
        "resources": versions,
        "device_taint_rules": sorted(v for v, rs in versions.items() if "devicetaintrules" in rs),
    }


def _first_attr(device: SliceDevice | Obj, names: tuple[str, ...]) -> Any:
    for key, value in (device.get("attributes") or {}).items():
        if key.rpartition("/")[2] in names:
            return attribute_value(value)
    return None


def _capacity(device: SliceDevice | Obj, name: str) -> str | None:
    for key, value in (device.get("capacity") or {}).items():
        if key.rpartition("/")[2] == name:
            return str(value.get("value") if isinstance(value, dict) else value)
    return None


def inventory(slices: list[Obj]) -> Obj:
    """Per driver and node: device count, models, memory; and whether partitions (counters) are published."""
    out: dict[str, Any] = {}
    for driver in sorted({s["spec"]["driver"] for s in slices}):
        nodes = {}
        for node, devices in sorted(devices_by_node(slices, driver).items()):
            nodes[node] = {
                "devices": len(devices),
                "models": dict(Counter(str(_first_attr(d, ("model", "productName"))) for d in devices)),
                "memory": dict(Counter(str(_capacity(d, "memory")) for d in devices)),
                "driver_versions": sorted({str(_first_attr(d, ("driverVersion",))) for d in devices}),
            }
        ours = [s for s in slices if s["spec"]["driver"] == driver]
        out[driver] = {
            "nodes": nodes,
            "devices": sum(n["devices"] for n in nodes.values()),
            "partitions_published": any(s["spec"].get("sharedCounters") for s in ours)
            or any(d.get("consumesCounters") for s in ours for d in s["spec"].get("devices") or []),
        }
    return out


def scheduler_dra_timer(metrics: dict[str, MetricsSource]) -> Callable[[], Obj] | None:
    """Read kube-scheduler's metrics now; the function returned reads them again at the end of the run and gives
    the DynamicResources plugin's mean time per call at each extension point over the whole run (what the
    fingerprint records, and ``diff`` compares). None when the scheduler's metrics cannot be read."""
    read = metrics.get("kube-scheduler")
    if read is None:
        return None
    try:
        before = read()
    except Exception:  # noqa: BLE001 - forbidden or unreachable: the fingerprint says why without it
        return None

    def finish() -> Obj:
        try:
            means = plugin_means(before, read())
        except Exception as e:  # noqa: BLE001 - a cluster already going down: say so
            return {"error": redact(str(e).splitlines()[0] if str(e) else e.__class__.__name__)[:200]}
        return {"over": "the whole run", "mean_s": {p: round(v, 6) for p, v in sorted(means.items())}}
    return finish


def redacted_command(argv: list[str]) -> list[str]:
    return [redact(a) for a in argv]


def collect(
    kube: Kube,
    metrics: dict[str, MetricsSource],
    command: list[str],
    provider: str,
    driver_build: str | None = None,
    extra: Obj | None = None,
) -> Obj:
    """The fingerprint; each part that cannot be read holds ``{"error": ...}`` instead."""
    fp: Obj = {
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provider": provider,
        "harness_version": __version__,
        "python": sys.version.split()[0],
        "command": redacted_command(command),
        **(extra or {}),
    }

    def part(key: str, fn: Callable[[], Any]) -> None:
        try:
            fp[key] = fn()
        except Exception as e:  # noqa: BLE001 - a partial fingerprint beats none
            fp[key] = {"error": redact(str(e).splitlines()[0] if str(e) else e.__class__.__name__)[:300]}

    part("kubernetes", lambda: {k: v for k, v in kube.request("GET", "/version").items()
                                if k in ("gitVersion", "platform", "goVersion", "buildDate")})
    part("feature_gates", lambda: feature_gates(metrics))
    part("resource_api", lambda: served_resource_api(kube))
    part("device_classes", lambda: [
        {"name": c["metadata"]["name"],
         "selectors": [s.get("cel", {}).get("expression", "") for s in c.get("spec", {}).get("selectors") or []]}
        for c in kube.list(rest.DEVICE_CLASSES)
    ])
    slices: list[Obj] = []

    def _inventory() -> Obj:
        slices.extend(kube.list(rest.RESOURCE_SLICES))
        return inventory(slices)

    part("inventory", _inventory)
    # Before any suite runs: the parity suite itself asks for resource.k8s.io/v1beta1 (by dry run), which the
    # API server's deprecated-API gauge would then count as a client of ours.
    part("upgrade_readiness", lambda: _readiness(kube, fp))
    part("nodes", lambda: provenance.nodes(kube.list(rest.NODES)))
    drivers = sorted((fp.get("inventory") or {}).keys()) if "error" not in fp.get("inventory", {}) else []
    fp["drivers"] = [
        {
            "name": d,
            "published_versions": sorted({v for n in fp["inventory"][d]["nodes"].values() for v in n["driver_versions"]}),
            "build": driver_build,
        }
        for d in drivers
    ]
    return fp


def _readiness(kube: Kube, fp: Obj) -> Obj:
    """``upgrade check`` to the next minor, as JSON (:mod:`dra_harness.upgrade.api_check`)."""
    from dra_harness.upgrade import api_check

    current = str((fp.get("kubernetes") or {}).get("gitVersion") or "")
    if not current:
        raise ValueError("the cluster's version is unknown")
    return api_check.check(kube, api_check.next_minor(current)).as_json()


def k8s_version(fp: Obj) -> str:
    return str((fp.get("kubernetes") or {}).get("gitVersion", "unknown"))
