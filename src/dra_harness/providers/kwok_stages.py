"""KWOK's stages for simulated nodes a run adds to a cluster: they play the run's own pods and no one else's.

Why: a KWOK node has no kubelet; KWOK's pod stages write the status a kubelet would. The shipped
stages (``data/kwok-stages.yaml``, the embedded cluster's own KWOK, whose nodes stand in for real
ones and whose tenants are the harness's own twins) act on every pod bound to a node. On a cluster
the run did not build, that is a lie told to someone else: a tenant's tolerate-all DaemonSet pod
would be marked Ready with an address that leads nowhere (a Service endpoint that drops traffic),
and a tolerate-all Job's pod Succeeded without running. So a run's KWOK (the local process and the
in-cluster Deployment) gets these stages instead, rendered for its run id:

- every stage that makes a pod Running, Ready or Succeeded also requires the pod's run label
  (:data:`dra_harness.labels.RUN_LABEL`, which :func:`dra_harness.kube.builders.meta` puts on every
  pod the harness creates) to be this run's;
- any other pod bound to a simulated node is marked ``Failed`` at once, reason
  :data:`FOREIGN_REASON`, with a Warning event naming the run: its owner sees the failure rather
  than a success that never happened (a Job counts it against its backoffLimit; a DaemonSet deletes
  it and tries again, backing off up to 15 min). That needs the right to write that pod's status: a
  local KWOK with only deploy/rbac's roles may write it in the run's own namespaces only, so there a
  tenant's pod stays Pending, bound to the node, until the node goes: never faked either. Nothing on the node side can keep a pod that
  tolerates every taint off a node (see :mod:`dra_harness.providers.node_guard` for what can be kept
  off, and for the preflight that refuses to add nodes where a tenant would be hurt anyway);
- a pod whose owner deleted it is still removed (the ``pod-delete`` stage, for every pod): that is
  what a kubelet does on a deletion its owner asked for, and without it a foreign pod would stay
  Terminating until the node is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dra_harness import data
from dra_harness.labels import RUN_LABEL

#: The stages the embedded cluster's own KWOK plays: every pod, as kubelets of nodes it built.
SHIPPED = data.path("kwok-stages.yaml")
#: The ``status.reason`` of a pod that is not the run's and was bound to one of its simulated nodes.
FOREIGN_REASON = "DraHarnessSimulatedNode"
FOREIGN_STAGE = "pod-not-this-runs"
#: Stages that only remove or keep up objects; they fake no state and stay for every pod.
_FOR_EVERY_POD = ("pod-delete",)


def _run_label_is(run_id: str, operator: str) -> dict[str, Any]:
    return {"key": f'.metadata.labels["{RUN_LABEL}"]', "operator": operator, "values": [run_id]}


def foreign_stage(run_id: str) -> dict[str, Any]:
    """A pending pod without this run's label fails at once, saying why, instead of being faked to run."""
    message = (f"bound to a simulated (KWOK) node of dra-harness run {run_id}: nothing runs there, and only "
               f"the run's own pods ({RUN_LABEL}={run_id}) are played")
    template = f"""{{{{ $now := Now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  reason: {FOREIGN_REASON}
  type: Ready
phase: Failed
reason: {FOREIGN_REASON}
message: {yaml.safe_dump(message, default_style='"', width=10_000).strip()}
"""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": FOREIGN_STAGE},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                _run_label_is(run_id, "NotIn")]},
            "next": {"event": {"type": "Warning", "reason": FOREIGN_REASON, "message": message},
                     "statusTemplate": template},
        },
    }


class _Dumper(yaml.SafeDumper):
    """Templates as block scalars, as in the shipped file: a person reading the rendered stages reads the same."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def for_run(run_id: str) -> str:
    """The shipped stages, each pod stage that fakes a state limited to ``run_id``'s pods, plus :func:`foreign_stage`."""
    docs = list(yaml.safe_load_all(SHIPPED.read_text()))
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") == "Stage" and spec["resourceRef"]["kind"] == "Pod" and doc["metadata"]["name"] not in _FOR_EVERY_POD:
            spec["selector"]["matchExpressions"].append(_run_label_is(run_id, "In"))
    # Before KWOK's configuration, as in the shipped file: the stages, then the options.
    stages = [d for d in docs if d.get("kind") == "Stage"] + [foreign_stage(run_id)]
    rest = [d for d in docs if d.get("kind") != "Stage"]
    return yaml.dump_all(stages + rest, Dumper=_Dumper, sort_keys=False, width=10_000)


def write(run_id: str, directory: Path) -> Path:
    """:func:`for_run` as ``directory/stages.yaml``, for a KWOK's ``--config``."""
    out = directory / "stages.yaml"
    out.write_text(for_run(run_id))
    return out
