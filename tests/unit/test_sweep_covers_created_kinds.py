"""Every cluster-scoped kind the harness creates by name is one its end-of-run sweep deletes.

Why: the sweep (:mod:`dra_harness.providers.sweep`) lists what to delete by kind. A check that starts
creating a cluster-scoped kind the list does not name leaves one object behind on every cluster,
after pass, fail or kill, and no run would notice: the leftover checks look for kinds they know.
Objects in namespaces go with the run's namespace; the kinds below have no namespace to go with.

Read from the source, every ``.create(rest.X, ...)`` (or ``kueue_api.X``) call in the package and the
suites. Places that create what the run does not own are named with the reason: the embedded
cluster's own parts, the staging twin's tenants, Kueue's installation, benchmarks on clusters of their
own, and dry runs, which create nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType, SimpleNamespace

from dra_harness.kube import kueue_api, rest
from dra_harness.providers import handle, sweep

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "dra_harness"
MODULES = {"rest": rest, "kueue_api": kueue_api}

#: Where a cluster-scoped object is created that no run's sweep should delete, and why.
NOT_THE_RUNS = {
    "providers/embedded": "the embedded cluster's own parts (nodes, classes, Kueue), removed with the cluster",
    "bench": "benchmarks on clusters of their own, removed with them",
}


def _swept() -> set[rest.Resource]:
    """The kinds :func:`~dra_harness.providers.sweep.sweep_run` deletes where the server serves every kind a run
    may create (Kueue's included), read from the sweep itself."""
    return sweep.swept_kinds([*handle.CLUSTER_SCOPED, *kueue_api.CLUSTER_SCOPED])


def created_cluster_scoped(source: str, modules: dict[str, ModuleType | SimpleNamespace] = MODULES
                           ) -> list[tuple[int, rest.Resource]]:
    """``(line, kind)`` of each cluster-scoped kind ``source`` creates by name, dry runs left out."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "create"
                and node.args and isinstance(first := node.args[0], ast.Attribute)
                and isinstance(first.value, ast.Name) and first.value.id in modules):
            continue
        if any(k.arg == "dry_run" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords):
            continue
        kind = getattr(modules[first.value.id], first.attr, None)
        if isinstance(kind, rest.Resource) and not kind.namespaced:
            found.append((node.lineno, kind))
    return found


def _sources() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "suites").glob("*.py")]
    return sorted(f for f in files if not any(f.relative_to(PACKAGE if f.is_relative_to(PACKAGE) else ROOT).as_posix()
                                              .startswith(prefix) for prefix in NOT_THE_RUNS))


def test_every_cluster_scoped_kind_the_harness_creates_is_swept():
    swept = _swept()
    missed = [f"{f.relative_to(ROOT)}:{line} creates {kind.kind}" for f in _sources()
              for line, kind in created_cluster_scoped(f.read_text()) if kind not in swept]
    assert not missed, f"not in the sweep's kinds (providers/handle.py, providers/sweep.py): {missed}"


def test_the_scan_finds_the_kinds_the_suites_create():
    """The scan reads what it should: the suites create DeviceClasses and PriorityClasses by name."""
    kinds = {kind.kind for f in _sources() for _, kind in created_cluster_scoped(f.read_text())}
    assert {"DeviceClass", "PriorityClass", "Namespace", "Node", "ResourceSlice"} <= kinds, kinds


def test_negative_control_a_created_kind_the_sweep_does_not_know_is_named():
    runtime_classes = rest.Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
    planted = ("def f(kube):\n"
               "    kube.create(rest.DEVICE_CLASSES, {})\n"
               "    kube.create(rest.RUNTIME_CLASSES, {}, dry_run=True)\n"
               "    kube.create(rest.PODS, {}, 'ns')\n"
               "    kube.create(rest.RUNTIME_CLASSES, {})\n")
    fake = {"rest": SimpleNamespace(DEVICE_CLASSES=rest.DEVICE_CLASSES, PODS=rest.PODS, RUNTIME_CLASSES=runtime_classes)}
    found = created_cluster_scoped(planted, fake)
    assert [(line, kind.kind) for line, kind in found] == [(2, "DeviceClass"), (5, "RuntimeClass")]
    assert runtime_classes not in _swept() and rest.DEVICE_CLASSES in _swept()


def test_the_kinds_are_the_sweeps_own_list_so_a_kind_it_stops_deleting_is_missed(monkeypatch):
    """Negative control of the list itself: a sweep that no longer deletes simulated nodes no longer covers the
    Topology's node creates, and the main test would name them."""
    real = sweep.run_kinds
    monkeypatch.setattr(sweep, "run_kinds", lambda *a: [k for k in real(*a) if k[0] is not rest.NODES])
    assert rest.NODES not in _swept() and rest.NAMESPACES in _swept()
