"""Every cluster-scoped kind the harness creates by name is one the end-of-run sweep deletes.

Namespaced objects go with the run's namespaces; a cluster-scoped one (a DeviceClass, a
webhook configuration, a ClusterRole) is found by the sweep only if its kind is in the list
it walks. This reads the package's ``kube.create(rest.X, ...)`` calls and checks each X.
Kinds created through a variable (Kueue's, a served version picked at run time) are not
seen here; Kueue's are in the sweep's list by construction (:func:`cluster_scoped_kinds`).
"""

from __future__ import annotations

import re
from pathlib import Path

from dra_harness.kube import rest
from dra_harness.providers import handle

SRC = Path(handle.__file__).resolve().parents[1]
CREATE = re.compile(r"\.create\(\s*rest\.([A-Z_]+)")
#: Cluster-scoped kinds the sweep reaches otherwise: Namespaces themselves, simulated Nodes by their label.
SWEPT_OTHERWISE = {"NAMESPACES", "NODES"}
#: The staging twin's furniture (its RuntimeClass, its policies) is the cluster's, made before any run, never a run's.
FURNITURE = "providers/embedded/twin"


def unswept(sources: dict[str, str], kinds: dict[str, object] | None = None) -> dict[str, list[str]]:
    """Cluster-scoped kinds created in ``sources`` (path -> text) that the sweep does not walk, with where."""
    swept = {r.plural for r in handle.CLUSTER_SCOPED}
    found: dict[str, list[str]] = {}
    for path, text in sources.items():
        for name in CREATE.findall(text):
            res = (kinds or vars(rest))[name]
            assert isinstance(res, rest.Resource), name
            if not res.namespaced and name not in SWEPT_OTHERWISE and res.plural not in swept:
                found.setdefault(name, []).append(path)
    return found


def test_every_cluster_scoped_kind_the_package_creates_is_swept():
    sources = {str(p.relative_to(SRC)): p.read_text() for p in SRC.rglob("*.py")
               if not str(p.relative_to(SRC)).startswith(FURNITURE)}
    assert sum(len(CREATE.findall(t)) for t in sources.values()) > 50  # the pattern still finds the calls
    assert unswept(sources) == {}


def test_negative_control_a_cluster_scoped_kind_missing_from_the_sweep_is_named():
    kinds = {**vars(rest), "CSI_DRIVERS": rest.Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False)}
    assert unswept({"x.py": "kube.create(rest.CSI_DRIVERS, body)"}, kinds) == {"CSI_DRIVERS": ["x.py"]}
    assert unswept({"y.py": "kube.create(rest.DEVICE_CLASSES, body)"}, kinds) == {}
