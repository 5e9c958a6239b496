"""Where each check ran and what produced its devices: what a buyer reads before the verdict.

"PASS — 45 checks passed" means little until the reader knows the devices were simulated,
that no container ran, or that nothing touched a GPU. So the fingerprint records each
node's kind (a KWOK-simulated node, a real kubelet, a kind node), the allocation rows
record the kind of the node each pod ran on, and this module turns those into one line
for the banner ("on simulated devices: …; container checks on 1 real node; no GPU") and
a short phrase per check ("pods on 2 simulated nodes: no container ran"). Nothing here
guesses: a check whose pods were not recorded says "placement not recorded".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from dra_harness.kube.types import Obj
from dra_harness.labels import KWOK_ANNOTATION

SIMULATED, REAL, KIND = "simulated", "real", "kind"
#: Words for each node kind, singular.
NODE_WORDS = {SIMULATED: "simulated (KWOK) node", REAL: "real kubelet node", KIND: "kind node"}
#: Nodes named one by one in the fingerprint; a larger cluster keeps only the counts.
MAX_NAMED_NODES = 2000
EXAMPLE, HARNESS, VENDOR = "example driver", "harness slices", "vendor driver"
_FROM = {EXAMPLE: "the example driver", HARNESS: "the harness's own slices", VENDOR: "a vendor driver"}
#: What a skipped check needed that this run did not have: containers (a real node) or a GPU.
_NEEDS_GPU = re.compile(r"NVML|NVIDIA GPU|--probe-image", re.I)
_NEEDS_CONTAINERS = re.compile(r"real node|containers? do not run|in-container|simulated \(KWOK\)|kubelet", re.I)


def node_kind(node: Obj) -> str:
    meta = node.get("metadata") or {}
    if (meta.get("annotations") or {}).get(KWOK_ANNOTATION):
        return SIMULATED
    if str((node.get("spec") or {}).get("providerID", "")).startswith("kind://"):
        return KIND
    return REAL


def nodes(listing: list[Obj]) -> Obj:
    """The fingerprint's ``nodes``: counts per kind, and each node's kind while the cluster is small."""
    kinds = {n["metadata"]["name"]: node_kind(n) for n in listing}
    return {"counts": dict(Counter(kinds.values())), "by_node": kinds if len(kinds) <= MAX_NAMED_NODES else {}}


def driver_source(name: str) -> str:
    """``.example.com`` names are the example driver's (reserved for documentation: no hardware behind them);
    ``.dra-harness.io`` are slices the harness publishes itself; anything else is a vendor's driver."""
    if name.endswith(".dra-harness.io"):
        return HARNESS
    if name == "example.com" or name.endswith(".example.com"):
        return EXAMPLE
    return VENDOR


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _kinds_phrase(counts: Counter[str] | dict[str, int]) -> str:
    return ", ".join(_plural(counts[k], NODE_WORDS[k]) for k in (REAL, KIND, SIMULATED) if counts.get(k))


def _result_nodes(result: Obj, rows: list[Obj]) -> tuple[dict[str, str], set[str]]:
    """Node -> kind ('' unknown) for the nodes a check's pods used (``rows``: its allocation rows), and the drivers
    of the devices they held."""
    found: dict[str, str] = {}
    drivers: set[str] = set()
    for row in rows:
        if row.get("node"):
            found[row["node"]] = row.get("node_kind") or found.get(row["node"], "")
            drivers |= {d["device"].split("/", 1)[0] for c in row.get("claims") or [] for d in c.get("devices") or []}
    for rec in result.get("evidence") or []:
        named = rec.get("nodes") if isinstance(rec.get("nodes"), list) else []
        for node in [rec.get("node"), *named]:
            if isinstance(node, str) and node:
                found.setdefault(node, "")
    return found, drivers


def for_result(result: Obj, rows: list[Obj], by_node: dict[str, str]) -> Obj:
    """``{"nodes": {node: kind}, "kinds": {kind: n}, "drivers": [...], "text": ...}`` for one check (``rows``: its
    allocation rows)."""
    found, drivers = _result_nodes(result, rows)
    nodes = {node: kind or by_node.get(node, "") for node, kind in found.items()}
    kinds = Counter(nodes.values())
    unknown = kinds.pop("", 0)
    parts = []
    if kinds or unknown:
        parts.append("pods on " + ", ".join(p for p in (_kinds_phrase(kinds), f"{_plural(unknown, 'node')} of unknown kind"
                                                         if unknown else "") if p))
        if kinds and set(kinds) == {SIMULATED} and not unknown:
            parts[-1] += ": no container ran"
    else:
        parts.append("placement not recorded")
    sources = sorted({driver_source(d) for d in drivers})
    if sources:
        parts.append("devices from " + " and ".join(_FROM[s] for s in sources))
    return {"nodes": nodes, "kinds": dict(kinds), "drivers": sorted(drivers), "text": "; ".join(parts)}


def _gpu_nodes(results: Iterable[Obj]) -> list[str]:
    """Nodes whose containers saw a GPU through NVML (the gpu_visibility suite's passed checks)."""
    seen = [rec for r in results if r["suite"] == "gpu_visibility" and r["outcome"] == "passed"
            for rec in r.get("evidence") or [] if rec.get("visible")]
    return sorted({str(rec.get("node") or "a node") for rec in seen})


def summarise(fp: Obj, results: list[Obj], allocs: list[Obj]) -> Obj:
    """The run's provenance; adds ``provenance`` to every result row."""
    fp_nodes: Obj = fp["nodes"] if isinstance(fp.get("nodes"), dict) else {}
    by_node: dict[str, str] = fp_nodes.get("by_node") or {}
    rows_of: dict[str, list[Obj]] = {}
    for row in allocs:
        rows_of.setdefault(row.get("test", ""), []).append(row)
    for r in results:
        r["provenance"] = for_result(r, rows_of.get(r["nodeid"], []), by_node)
    inventory: Obj = fp["inventory"] if isinstance(fp.get("inventory"), dict) and "error" not in fp["inventory"] else {}
    drivers = []
    for name, inv in sorted(inventory.items()):
        if not isinstance(inv, dict):
            continue
        build = next((d.get("build") for d in fp.get("drivers") or [] if d.get("name") == name), None)
        drivers.append({"name": name, "source": driver_source(name), "build": build, "devices": inv.get("devices", 0),
                        "nodes": dict(Counter(by_node.get(n, "") for n in inv.get("nodes") or {}))})
    simulated = [d for d in drivers if d["source"] != VENDOR]
    vendor = [d for d in drivers if d["source"] == VENDOR]
    parts = []
    if simulated:
        hosts: Counter[str] = Counter()
        for d in simulated:
            hosts.update(d["nodes"])
        unknown = hosts.pop("", 0)
        where = ", ".join(p for p in (_kinds_phrase(hosts), f"{_plural(unknown, 'node')} of unknown kind" if unknown else "") if p)
        parts.append(("on simulated devices: " if not vendor else "simulated devices: ") + ", ".join(
            f"{d['devices']} from {_FROM[d['source']]} ({d['name']})" for d in simulated) + (f" on {where}" if where else ""))
    if vendor:
        parts.append("vendor devices: " + ", ".join(
            f"{d['devices']} from {d['name']}" + (f" {d['build']}" if d["build"] else "") for d in vendor))
    if not drivers:
        parts.append("devices not recorded (no inventory in the fingerprint)")
    ran = [r["provenance"] for r in results if r["outcome"] in ("passed", "failed", "error")]
    container_nodes = {n for p in ran for n, k in p["nodes"].items() if k in (REAL, KIND)}
    container_checks = sum(bool(p["kinds"].get(REAL) or p["kinds"].get(KIND)) for p in ran)
    skips = [r.get("message") or "" for r in results if r["outcome"] == "skipped"]
    gpu_skips = sum(bool(_NEEDS_GPU.search(m)) for m in skips)
    skipped = sum(bool(_NEEDS_CONTAINERS.search(m)) and not _NEEDS_GPU.search(m) for m in skips)
    if container_checks:
        parts.append(f"container checks on {_plural(len(container_nodes), 'real node')} ({_plural(container_checks, 'check')})"
                     + (f"; {skipped} skipped that needed containers" if skipped else ""))
    else:
        parts.append("no container ran" + (f" ({skipped} container-level checks skipped: no real node)" if skipped else ""))
    gpu = _gpu_nodes(results)
    parts.append(f"a GPU seen through NVML on {', '.join(gpu)}" if gpu else "no GPU" + (
        f" ({gpu_skips} GPU checks skipped: they need NVIDIA GPUs)" if gpu_skips else ""))
    rules = fp.get("cluster_rules") if isinstance(fp.get("cluster_rules"), dict) else {}
    if rules:  # what the run did to fit the cluster's rules is part of where it ran
        parts.append("under the cluster's rules: " + ", ".join(
            f"{k.replace('_', ' ')} {', '.join(v) if isinstance(v, list) else v if isinstance(v, str) else _pairs(v)}"
            for k, v in rules.items()))
    counts = fp_nodes.get("counts") or {}
    return {"sentence": "; ".join(parts), "nodes": {k: int(counts.get(k, 0)) for k in (SIMULATED, REAL, KIND)},
            "cluster_rules": rules, "drivers": drivers, "gpu": bool(gpu), "container_checks": container_checks, "container_skips": skipped, "gpu_skips": gpu_skips}


def _pairs(value: object) -> str:
    return ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)
