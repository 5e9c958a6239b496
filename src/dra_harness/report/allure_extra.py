"""What Allure needs beyond allure-pytest's results: environment, categories, links, parameters, steps, evidence.

allure-pytest writes one ``*-result.json`` per test. The report adds the run's
fingerprint as ``environment.properties`` (Allure's environment widget), failure
categories as ``categories.json``, and to each test's result: links to the upstream
documentation of what its concern verifies, the run's facts (Kubernetes version,
provider, nodes, driver) as parameters, each evidence record the test made as a step
(its facts as the step's parameters) and all of them as one JSON attachment, so the
Allure view shows the same facts as ``signoff.html``. A check the report shows as not
established is "unknown" there rather than passed. Idempotent: re-rendering a run
replaces the steps it added and adds no link, parameter or attachment twice.

Categories tell product findings from harness errors by Allure's own split:
allure-pytest marks a test *failed* when it ends in an ``AssertionError`` (an assert, or
one of the harness's waits, :class:`~dra_harness.kube.waits.WaitError`, which are
AssertionErrors) -- the cluster did not do what the check expects -- and *broken* on any
other exception: the harness could not carry the check to a verdict (the API server
answered with an error, the cluster or a prerequisite was missing, a probe printed no
report, a bug). Allure puts a result in every category it matches, so each status has
named categories and a last one for the rest, whose pattern excludes the named ones.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from dra_harness.kube.types import Obj
from dra_harness.report.files import atomic_write, redact
from dra_harness.report.reading import read_bytes
from dra_harness.report.results import CONCERNS, NOT_ESTABLISHED

#: (name, statuses, the pattern that picks its results out of their status message).
_NAMED: list[tuple[str, str, str]] = [
    ("Product finding: devices not allocated", "failed", r"cannot allocate all claims|[Uu]nschedulable|Pending"),
    ("Product finding: timed out waiting for the cluster", "failed", r"timed out after|gave up waiting|did not \S.* within"),
    ("Harness error: the API server answered with an error or not at all", "broken",
     r"KubeApiError|ApiError|Unreachable|NotFound|Conflict|MaxRetryError|ConnectionError|[Cc]onnection refused"),
    ("Harness error: another run held the cluster", "broken", r"LockTimeout"),
    ("Harness error: the cluster or a prerequisite is missing", "broken",
     r"ClusterError|PrereqError|RestoreFailed|dra_harness\.providers\.|dra_harness\.components\."),
    ("Harness error: the check could not reach a verdict", "broken",
     r"CheckError|ProbeError|ProbeOutputError|SelectorError|TypeCheckError|ContentionError"),
]
_REST = {"failed": "Product finding: other failed checks", "broken": "Harness error: other (a harness bug or its setup)"}


def _categories() -> list[Obj]:
    """Each failed or broken result in exactly one category: a named one excludes the named ones before it."""
    out: list[Obj] = []
    for i, (name, status, pattern) in enumerate(_NAMED):
        earlier = "|".join(p for _, s, p in _NAMED[:i] if s == status)
        unless = f"(?!.*({earlier}))" if earlier else ""
        out.append({"name": name, "matchedStatuses": [status], "messageRegex": f"(?s){unless}.*({pattern}).*"})
    for status, name in _REST.items():
        named = "|".join(p for _, s, p in _NAMED if s == status)
        out.append({"name": name, "matchedStatuses": [status], "messageRegex": f"(?s)(?!.*({named})).*"})
    out += [
        {"name": "Not established (passed, but proved nothing)", "matchedStatuses": ["unknown"]},
        {"name": "Skipped: API not served by this Kubernetes version", "matchedStatuses": ["skipped"],
         "messageRegex": r"(?s).*(serves no|not served|needs DRA).*"},
        {"name": "Skipped: needs real devices or containers", "matchedStatuses": ["skipped"],
         "messageRegex": r"(?s).*(simulated|in-container|KWOK).*"},
    ]
    return out


CATEGORIES = _categories()

_DRA = "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/"
_TASKS = "https://kubernetes.io/docs/tasks/configure-pod-container/assign-resources/"
_HOW = ("DRA: how resource allocation works", _DRA + "#how-it-works")
_SLICES = ("DRA: ResourceSlice", _DRA + "#resourceslice")
_CLAIMS = ("DRA: ResourceClaims and ResourceClaimTemplates (requests, selectors, constraints)", _DRA + "#resourceclaims-templates")
_PARTITIONS = ("DRA: partitionable devices", _DRA + "#partitionable-devices")
_CAPACITY = ("DRA: consumable capacity", _DRA + "#consumable-capacity")
_TAINTS = ("DRA: device taints and tolerations", _DRA + "#device-taints-and-tolerations")
_ALLOCATE = ("Allocate devices to workloads with DRA", _TASKS + "allocate-devices-dra/")

#: Concern id -> the upstream documentation of what its checks verify (kubernetes.io; parity: the upstream e2e suite).
DOCS: dict[str, list[tuple[str, str]]] = {
    "inventory": [_SLICES, ("DRA: DeviceClass", _DRA + "#deviceclass"), ("Set up DRA in a cluster", _TASKS + "set-up-dra-cluster/")],
    "allocation": [_HOW, _CLAIMS, _ALLOCATE],
    "sharing": [_CLAIMS, _CAPACITY],
    "coplacement": [_CLAIMS, _HOW],
    "topology": [_CLAIMS, _SLICES],
    "replicas": [_CLAIMS, ("DRA: prioritized list", _DRA + "#prioritized-list")],
    "governance": [("DRA: admin access", _DRA + "#admin-access"),
                   ("ValidatingAdmissionPolicy", "https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/")],
    "metrics": [("Kubernetes metrics reference", "https://kubernetes.io/docs/reference/instrumentation/metrics/"),
                ("DRA: kubelet device metrics", _DRA + "#monitoring-resources")],
    "driver-restart": [_HOW, _SLICES],
    "node-drain": [("Safely drain a node", "https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/"), _HOW],
    "device-taints": [_TAINTS],
    "device-health": [("DRA: device health monitoring", _DRA + "#device-health-monitoring"), _TAINTS],
    "partitions": [_PARTITIONS],
    "driver-configs": [_PARTITIONS, _CAPACITY, ("DRA: ResourceClaim device status", _DRA + "#resourceclaim-device-status"),
                       ("DRA: device binding conditions", _DRA + "#device-binding-conditions")],
    "parity": [("Kubernetes DRA end-to-end tests", "https://github.com/kubernetes/kubernetes/tree/master/test/e2e/dra")],
    "contention": [("Pod priority and preemption", "https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/"), _HOW],
    "upgrade": [("Kubernetes version skew policy", "https://kubernetes.io/releases/version-skew-policy/"),
                ("Upgrade a cluster", "https://kubernetes.io/docs/tasks/administer-cluster/cluster-upgrade/")],
    "gpu-visibility": [_HOW, _ALLOCATE],
}
DEFAULT_DOCS = [("Dynamic Resource Allocation", _DRA)]
#: The name of every step the report adds (one per evidence record); re-rendering replaces exactly these.
STEP_PREFIX = "evidence: "
EVIDENCE_ATTACHMENT = "dra-harness evidence"


def _properties(env: dict[str, str]) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("\n", " ").replace("=", "\\=").replace(":", "\\:")

    return "".join(f"{esc(k)}={esc(v)}\n" for k, v in env.items())


def environment(summary: Obj) -> dict[str, str]:
    fp = summary.get("fingerprint") or {}
    gates = fp.get("feature_gates") or {}
    api = fp.get("resource_api") or {}
    inv = fp.get("inventory") or {}
    return {
        "Run": summary["run_id"],
        "Verdict": summary["verdict"],
        "Kubernetes": str((fp.get("kubernetes") or {}).get("gitVersion", "unknown")),
        "Provider": str(fp.get("provider", "unknown")),
        "DRA feature gates on": ", ".join(gates.get("enabled", [])) if gates.get("status") == "read" else "unknown",
        "resource.k8s.io versions": ", ".join(api.get("versions", [])) or "unknown",
        "Drivers": ", ".join(d["name"] for d in fp.get("drivers", [])) or "none",
        "Devices": str(sum(d.get("devices", 0) for d in inv.values() if isinstance(d, dict))),
        "Where it ran": str((summary.get("provenance") or {}).get("sentence", "not recorded")),
        "Harness": summary["harness_version"],
    }


def _nodeid(result: Obj) -> str | None:
    """allure-pytest's fullName ``suites.test_x#test_y`` plus its parameters -> pytest's node id."""
    full = result.get("fullName") or ""
    module, _, func = full.partition("#")
    if not func:
        return None
    name = result.get("name") or func
    return module.replace(".", "/") + ".py::" + (name if name.startswith(func) else func)


def parameters(summary: Obj) -> list[Obj]:
    """The run's facts every test ran under, as Allure parameters."""
    fp = summary.get("fingerprint") or {}
    inv = fp.get("inventory") or {}
    nodes = {n for d in inv.values() if isinstance(d, dict) for n in (d.get("nodes") or {})}
    facts = {
        "Kubernetes": str((fp.get("kubernetes") or {}).get("gitVersion", "unknown")),
        "Provider": str(fp.get("provider", "unknown")),
        "Nodes with devices": str(len(nodes)) if inv else "unknown",
        "DRA drivers": ", ".join(d["name"] for d in fp.get("drivers", [])) or "none",
    }
    return [{"name": k, "value": v} for k, v in facts.items()]


def _module(result: Obj) -> str:
    """``suites.test_device_taints#test_x`` -> ``device_taints``."""
    return (result.get("fullName") or "").partition("#")[0].rpartition(".")[2].removeprefix("test_")


def links(result: Obj, row: Obj | None = None) -> list[Obj]:
    """The docs of the test's concern: the one its suite declares (``row``, its results row), else the one its
    module's name gives (no row: a result of a test the report does not list)."""
    module = _module(result)
    concern = (row or {}).get("concern") or CONCERNS.get(module, (module, module))[0]
    return [{"type": "link", "name": name, "url": url} for name, url in DOCS.get(concern, DEFAULT_DOCS)]


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def steps(records: list[Obj], start_ms: int) -> list[Obj]:
    """One passed step per evidence record: its scalar facts in the name, every fact as a parameter."""
    out = []
    for rec in records:
        facts = {k: v for k, v in rec.items() if k != "t"}
        shown = [f"{k}={_short(v, 40)}" if not isinstance(v, (dict, list)) else k for k, v in facts.items()]
        at = int(rec["t"] * 1000) if isinstance(rec.get("t"), (int, float)) else start_ms
        out.append({"name": _short(STEP_PREFIX + (", ".join(shown) or "(no facts)"), 160), "status": "passed", "stage": "finished",
                    "start": at, "stop": at, "steps": [], "attachments": [],
                    "parameters": [{"name": k, "value": _short(v, 500)} for k, v in facts.items()]})
    return out


def decorate(result: Obj, row: Obj | None, run_parameters: list[Obj]) -> Obj:
    """``result`` with the report's links, parameters, evidence steps and not-established status; idempotent."""
    have = {link.get("url") for link in result.get("links", [])}
    result["links"] = result.get("links", []) + [link for link in links(result, row) if link["url"] not in have]
    named = {p.get("name") for p in result.get("parameters", [])}
    result["parameters"] = result.get("parameters", []) + [p for p in run_parameters if p["name"] not in named]
    own = [s for s in result.get("steps", []) if not str(s.get("name", "")).startswith(STEP_PREFIX)]
    result["steps"] = own + steps(row["evidence"] if row else [], int(result.get("start") or 0))
    if row and row["outcome"] == NOT_ESTABLISHED and result.get("status") == "passed":
        # Allure has no "not established"; "unknown" keeps it from counting as passed.
        result.update(status="unknown", statusDetails={"message": row["message"]})
    return result


def enrich(run_dir: Path, summary: Obj) -> list[Path]:
    """Write the extras and decorate every result; return the files written (the run directory records them)."""
    allure_dir = run_dir / "allure-results"
    allure_dir.mkdir(parents=True, exist_ok=True)
    written = [allure_dir / "environment.properties", allure_dir / "categories.json"]
    atomic_write(written[0], _properties(environment(summary)))
    atomic_write(written[1], json.dumps(CATEGORIES, indent=2))
    by_id = {r["nodeid"]: r for r in summary["results"]}
    run_parameters = parameters(summary)
    for path in sorted(allure_dir.glob("*-result.json")):
        raw = read_bytes(path, "record")  # a link or a FIFO among the results is refused, never followed
        try:
            result = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(result, dict):
            continue
        before = json.dumps(result, sort_keys=True)
        row = by_id.get(_nodeid(result) or "")
        decorate(result, row, run_parameters)
        attached = any(a.get("name") == EVIDENCE_ATTACHMENT for a in result.get("attachments", []))
        if row and row["evidence"] and not attached:
            source = f"{uuid.uuid4()}-attachment.json"
            atomic_write(allure_dir / source, redact(json.dumps(row["evidence"], indent=2)))
            result.setdefault("attachments", []).append({"name": EVIDENCE_ATTACHMENT, "source": source, "type": "application/json"})
            written.append(allure_dir / source)
        if json.dumps(result, sort_keys=True) != before:
            atomic_write(path, json.dumps(result))
    return written
