"""The options that would let a run establish more on this cluster, said by the preflight with the fact behind each.

Why: a managed GPU cluster's rules (a taint on every GPU node, a namespace-label policy, an image policy)
keep most checks from running, and the user is left to guess which option fits; 7 of 93 checks
established, exit 0, was such a run. The preflight sees each rule at work, so it names the option
(``--toleration nvidia.com/gpu:NoSchedule``) in its table and the run repeats it in its last lines.
"""

from __future__ import annotations

from typing import Any, Protocol

from dra_harness.kube.placement import blocking_taints, taint_text
from dra_harness.kube.types import Obj


class Facts(Protocol):
    """What the hints read of :class:`..preflight.Facts` (a protocol: the preflight imports this module)."""

    nodes: dict[str, Any]
    admission: dict[str, Any]
    errors: list[str]

    def container_nodes(self) -> list[Any]: ...


def hints(facts: Facts, nodes: list[Obj]) -> list[str]:
    """The options that would let the checks run that the cluster's rules keep from running, each with the fact
    that calls for it: a taint every node with devices shares, a refused namespace or probe pod, an image no
    node could pull."""
    out = []
    with_devices = [n for n in nodes if (f := facts.nodes.get(n["metadata"]["name"])) is not None and f.published]
    if with_devices and not any(facts.nodes[n["metadata"]["name"]].schedulable for n in with_devices):
        shared = None
        for n in with_devices:
            mine = {(t.get("key"), t.get("effect")) for t in blocking_taints(n)}
            shared = mine if shared is None else shared & mine
        for key, effect in sorted(shared or set(), key=str):
            if key and not str(key).startswith("node.kubernetes.io/"):
                taint = next(t for t in blocking_taints(with_devices[0]) if t.get("key") == key)
                out.append(f"--toleration {key}:{effect} (every node with devices is tainted {taint_text(taint)})")
        if not shared:
            labels = [dict(n["metadata"].get("labels") or {}) for n in with_devices]
            common = set.intersection(*(set(lab.items()) for lab in labels)) - {("kubernetes.io/os", "linux")}
            pool = sorted(k for k in common if "/hostname" not in k[0])[:1]
            if pool:
                out.append(f"--node-selector {pool[0][0]}={pool[0][1]} (the label every node with devices carries; "
                           "none is schedulable for the run's pods now)")
    refused = next((e for e in facts.errors if e.startswith("probe image:") and "namespaces" in e), None)
    if refused:
        out.append(f"--namespace-label KEY=VALUE or --namespace-annotation KEY=VALUE as the cluster's policy asks "
                   f"(creating a namespace was refused: {refused.removeprefix('probe image: ')[:200]})")
    if facts.admission.get("allowed") is False:
        said = str(facts.admission.get("evidence", ""))
        wanted = [opt for word, opt in (("runtimeclass", "--runtime-class NAME"), ("label", "--pod-label KEY=VALUE"),
                                         ("annotation", "--pod-annotation KEY=VALUE"),
                                         ("priority", "--priority-class NAME"), ("image", "--shell-image and --pause-image "
                                                                                          "from an admitted registry"))
                  if word in said.lower()]
        out.append(f"{' or '.join(wanted) or 'the options of the cluster profile'} (admission refused the probe pod: "
                   f"{said[:200]})")
    if facts.admission.get("pause_allowed") is False:
        out.append(f"--pause-image MIRROR (admission refused a pod that only holds devices, which most checks make: "
                   f"{str(facts.admission.get('pause_evidence', ''))[:200]})")
    unusable = [n for n in facts.container_nodes() if n.image == "unusable"]
    if unusable and facts.admission.get("allowed") and len(unusable) == len(facts.container_nodes()):
        out.append(f"--shell-image MIRROR and --pause-image MIRROR (no node could run the probe image: "
                   f"{unusable[0].image_evidence[:200]})")
    return out

