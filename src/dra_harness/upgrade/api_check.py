"""Upgrade go/no-go: what a target Kubernetes release removes from the DRA API, and who still uses it.

Why before an upgrade and not after: ``resource.k8s.io/v1beta1`` is removed in 1.38. A controller,
an operator or a CI job still calling it works today and gets 404s the minute the control plane
is upgraded; the stored objects survive (they are kept at the storage version), the clients do
not. Three sources name those clients, none of them complete alone:

* the API server's ``apiserver_requested_deprecated_apis`` gauge: every deprecated version and
  resource requested since it started, with its ``removed_release`` (reads included; no user agent).
  Two blind spots, both said in the verdict rather than read as "nobody": the gauge starts empty at
  each API server start (so right after an upgrade or a restart it has seen only the clients that
  called since, and the check prints when that was), and a server counts a version only from the
  release that deprecates it (``deprecation.IsDeprecated``): a 1.35 server does not count
  ``v1beta2``, deprecated in 1.36 and removed in 1.39, so from 1.35 its clients are not established;
* ``metadata.managedFields`` of the stored DRA objects: the manager (by default the client's
  binary name) and the API version of its last write, so writers are named;
* the user's manifests (``--manifests``), which nothing has applied yet.

A break (exit 1) is a removed version still requested or still in a manifest. A stored object last
written through it names a writer to look at, not a break: that write may be years old. Feature
gates are compared between the two releases' defaults where the harness knows both
(``data/gates.json``); an unknown release says so rather than guessing.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dra_harness import data, yamlfile
from dra_harness.errors import InputError
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj

GROUP = "resource.k8s.io"
METRIC = "apiserver_requested_deprecated_apis"
#: Plural of each kind, for stored objects and the metric's ``resource`` label.
PLURALS = {"DeviceClass": "deviceclasses", "ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates",
           "ResourceSlice": "resourceslices", "DeviceTaintRule": "devicetaintrules",
           "ResourcePoolStatusRequest": "resourcepoolstatusrequests"}
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+(?:-[0-9A-Za-z.]+)?)?$")


def minor(version: str, what: str = "version") -> tuple[int, int]:
    """``1.38``, ``v1.37.2`` -> (1, 38); InputError naming ``what`` otherwise."""
    m = _VERSION.match(version.strip())
    if not m:
        raise InputError(f"{what} {version!r}: expected a Kubernetes release such as 1.38 or v1.37.2")
    return int(m.group(1)), int(m.group(2))


def _release(text: str) -> tuple[int, int]:
    major, _, mi = text.partition(".")
    return int(major), int(mi)


@dataclass(frozen=True)
class Removal:
    version: str  # resource.k8s.io/<version>
    kind: str
    deprecated: str
    removed: str


def lifecycle() -> list[Removal]:
    raw = yamlfile.load(data.path("dra-api-lifecycle.yaml"), InputError, "dra-api-lifecycle.yaml")
    return [Removal(v, kind, life["deprecated"], life["removed"]) for v, kinds in raw["versions"].items()
            for kind, life in kinds.items()]


@dataclass
class Verdict:
    current: str
    target: str
    removed: list[Removal]  # removed at or before the target
    deprecated: list[Removal]  # deprecated by the target, removed later
    requested: list[dict[str, str]] = field(default_factory=list)  # the metric's series of removed versions
    metric_error: str | None = None
    manifests: list[str] = field(default_factory=list)  # "file#doc: Kind resource.k8s.io/v1beta1"
    writers: list[str] = field(default_factory=list)  # stored objects last written through a removed version
    #: Removed versions (with their kinds) the current server does not count: deprecated after its release.
    uncounted: list[str] = field(default_factory=list)
    counted_since: float | None = None  # the API server's start (epoch s): the gauge's window
    gates: list[str] = field(default_factory=list)
    gates_note: str = ""
    gates_known: bool = False

    @property
    def breaks(self) -> list[str]:
        out = [f"clients requested {GROUP}/{r['version']} {r['resource']} since the API server started ({METRIC}, "
               f"removed_release {r['removed_release']})" for r in self.requested]
        return out + [f"manifest {m}" for m in self.manifests]

    def as_json(self) -> Obj:
        return {"current": self.current, "target": self.target, "go": not self.breaks, "breaks": self.breaks,
                "removed": [r.__dict__ for r in self.removed], "deprecated": [r.__dict__ for r in self.deprecated],
                "requested": self.requested, "metric_error": self.metric_error, "writers": self.writers,
                "uncounted": self.uncounted, "counted_since": self.counted_since,
                "established": not (self.uncounted or self.metric_error),
                "gates": self.gates, "gates_note": self.gates_note}


def requested(metrics_text: str, removed: list[Removal]) -> list[dict[str, str]]:
    """The metric's series (value 1) for a version and resource that ``removed`` lists."""
    gone = {(r.version, PLURALS.get(r.kind, "")) for r in removed}
    out = []
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == METRIC and s.value >= 1 and s.labels.get("group") == GROUP and \
                    (s.labels.get("version"), s.labels.get("resource")) in gone:
                out.append({k: s.labels.get(k, "") for k in ("version", "resource", "subresource", "removed_release")})
    return sorted(out, key=lambda r: (r["version"], r["resource"], r["subresource"]))


def started(metrics_text: str) -> float | None:
    """The API server's start (``process_start_time_seconds``), from which its gauge counts."""
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == "process_start_time_seconds":
                return float(s.value)
    return None


def uncounted(current: tuple[int, int], removed: list[Removal]) -> list[str]:
    """``resource.k8s.io/v1beta2 DeviceClass, ... (deprecated in 1.36)``: removed kinds that a server of release
    ``current`` does not count yet, because it records a request in the gauge only once its release deprecates it."""
    late: dict[tuple[str, str], list[str]] = {}
    for r in removed:
        if _release(r.deprecated) > current:
            late.setdefault((r.version, r.deprecated), []).append(r.kind)
    return [f"{GROUP}/{v} {', '.join(kinds)} (deprecated in {d})" for (v, d), kinds in sorted(late.items())]


def in_manifests(docs: list[tuple[str, int, Any]], removed: list[Removal]) -> list[str]:
    """``file#n: Kind apiVersion`` for every document of a removed group version and kind."""
    gone = {(f"{GROUP}/{r.version}", r.kind) for r in removed}
    return [f"{f}#{i}: {o.get('kind')} {o.get('apiVersion')}" for f, i, o in docs
            if isinstance(o, dict) and (o.get("apiVersion"), o.get("kind")) in gone]


def writers(objects: list[Obj], kind: str, removed_versions: set[str]) -> list[str]:
    """Stored objects whose managedFields record a write through a removed version: who wrote them and when."""
    out = []
    for o in objects:
        meta = o.get("metadata") or {}
        for mf in meta.get("managedFields") or []:
            version = str(mf.get("apiVersion", "")).removeprefix(f"{GROUP}/")
            if version in removed_versions:
                where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
                out.append(f"{kind} {where}: {mf.get('operation', 'written')} through {GROUP}/{version} by manager "
                           f"{mf.get('manager', '?')!r} at {mf.get('time', '?')}")
    return out


def gate_changes(current: str, target: str) -> tuple[list[str], str, bool]:
    """DRA gate default changes between the two releases' patch versions the harness knows; (changes, note, whether
    both releases are known)."""
    known: dict[str, Obj] = json.loads(data.path("gates.json").read_text())
    by_minor = {minor(v): v for v in known}
    a, b = by_minor.get(minor(current)), by_minor.get(minor(target))
    if a is None or b is None:
        missing = ", ".join(v for v, k in ((current, a), (target, b)) if k is None)
        return [], f"feature gates of {missing} not known to this harness (it knows {', '.join(sorted(known))})", False
    def state(v: str, gate: str) -> str | None:
        """'locked on' (GA), 'on' / 'off' by default, None where the release has no such gate."""
        if gate in known[v]["dra_gates_locked_on"]:
            return "locked on"
        fg = known[v]["feature_gates"]
        return None if gate not in fg else "on" if fg[gate] else "off"

    gates = set(known[a]["feature_gates"]) | set(known[b]["feature_gates"]) | set(known[a]["dra_gates_locked_on"]) \
        | set(known[b]["dra_gates_locked_on"])
    out = []
    for gate in sorted(gates):
        before, after = state(a, gate), state(b, gate)
        if before == after:
            continue
        if after is None:
            out.append(f"{gate}: gone in {b} (a component started with --feature-gates={gate}=... will not start)")
        elif before is None:
            out.append(f"{gate}: new in {b}, default {after}")
        elif after == "locked on":
            out.append(f"{gate}: GA and locked on in {b} (default {before} in {a}): setting it to false will not start")
        else:
            out.append(f"{gate}: default {before} in {a}, {after} in {b}")
    return out, f"defaults of {a} and {b} (data/gates.json)", True


def check(kube: Kube, target: str, docs: list[tuple[str, int, Any]] | None = None) -> Verdict:
    """The go/no-go for upgrading ``kube``'s cluster to ``target``."""
    current = str(json.loads(kube.raw("/version"))["gitVersion"])
    now, to = minor(current, "the cluster's version"), minor(target, "--to")
    if to <= now:
        raise InputError(f"--to {target}: the cluster already runs {current}; give a later release")
    all_removals = lifecycle()
    removed = [r for r in all_removals if _release(r.removed) <= to]
    deprecated = [r for r in all_removals if r not in removed and _release(r.deprecated) <= to]
    verdict = Verdict(current, target, removed, deprecated)
    verdict.uncounted = uncounted(now, removed)
    try:
        metrics = kube.raw("/metrics", timeout=20)
        verdict.requested, verdict.counted_since = requested(metrics, removed), started(metrics)
    except rest.ApiError as e:
        verdict.metric_error = f"the API server's /metrics is not readable with these credentials ({e.status}): " \
                               "requests by other clients are not established"
    verdict.manifests = in_manifests(docs or [], removed)
    gone = {r.version for r in removed}
    for kind in sorted({r.kind for r in removed}):
        res = next((x for x in (rest.DEVICE_CLASSES, rest.RESOURCE_SLICES, rest.RESOURCE_CLAIMS, rest.RESOURCE_CLAIM_TEMPLATES)
                    if x.kind == kind), None)
        if res is not None:
            verdict.writers += writers(kube.list(res), kind, gone)
    verdict.gates, verdict.gates_note, verdict.gates_known = gate_changes(current, target)
    return verdict


def documents(paths: list[str]) -> list[tuple[str, int, Any]]:
    """Every YAML document of the user's manifests, one InputError line for a file that is not YAML."""
    return [(p, i, obj) for p in paths
            for i, obj in enumerate(yamlfile.load_all(p, InputError, f"manifest file {p}"), start=1)]


def text(v: Verdict) -> list[str]:
    """The verdict as lines for a terminal or a CI log."""
    lines = [f"upgrade check: Kubernetes {v.current} -> {v.target}"]
    by_version: dict[str, list[Removal]] = {}
    for r in v.removed:
        by_version.setdefault(r.version, []).append(r)
    for version, rs in sorted(by_version.items()):
        lines.append(f"removed by {v.target}: {GROUP}/{version} ({', '.join(r.kind for r in rs)}; deprecated since "
                     f"{min(r.deprecated for r in rs)}, removed in {min(r.removed for r in rs)})")
    for r in v.deprecated:
        lines.append(f"deprecated by {v.target}, still served: {GROUP}/{r.version} {r.kind} (removed in {r.removed})")
    lines += [f"BREAKS   {b}" for b in v.breaks]
    if v.metric_error:
        lines.append(f"NOT ESTABLISHED  {v.metric_error}")
    elif v.counted_since is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(v.counted_since))
        lines.append(f"window   clients counted since the API server started at {when} ({_ago(v.counted_since)}); "
                     "a client that has not called since is not seen")
    lines += [f"NOT ESTABLISHED  clients of {u}: Kubernetes {v.current} does not count them until that release"
              for u in v.uncounted]
    lines += [f"writer   {w}" for w in v.writers]
    lines += [f"gate     {g}" for g in v.gates] or [f"gates    no DRA gate changes ({v.gates_note})" if v.gates_known
                                                    else f"gates    {v.gates_note}"]
    if v.breaks:
        lines.append("NO-GO: something above would break")
    elif v.uncounted or v.metric_error:
        lines.append("GO for what this API server shows; the clients marked NOT ESTABLISHED above are not seen")
    else:
        lines.append("GO: no client, manifest or gate above would break")
    return lines


def _ago(epoch: float) -> str:
    seconds = max(0, int(time.time() - epoch))
    return f"{seconds // 3600} h {seconds % 3600 // 60} min ago" if seconds >= 3600 else f"{seconds // 60} min {seconds % 60} s ago"


def next_minor(version: str) -> str:
    """The release after ``version``'s minor: ``v1.37.2`` -> ``1.38``."""
    major, mi = minor(version, "the cluster's version")
    return f"{major}.{mi + 1}"
