"""Before a run adds simulated nodes to a cluster it did not build: would another team's workload be hurt by them?

Why: a simulated (KWOK) node is a node to every controller. What the harness can do about that:

- Its NoSchedule taint keeps off every pod that does not tolerate it. A pod that tolerates every
  taint (a toleration ``operator: Exists`` without a key, as kube-proxy, CNI agents, node exporters
  and log shippers have) is not kept off by any taint: not by a NoExecute one, nor by
  ``spec.unschedulable`` (a DaemonSet's pods tolerate ``node.kubernetes.io/unschedulable`` anyway).
- Its labels are few (:func:`dra_harness.kube.builders.simulated_node`): no ``kubernetes.io/os``,
  so a DaemonSet that selects ``kubernetes.io/os=linux`` puts no pod there; no
  ``kubernetes.io/hostname``, so a topology spread on the hostname does not count it as an empty
  domain (which would leave a tenant's new replicas Pending under ``DoNotSchedule``).
- A pod of someone else that lands there anyway is marked Failed at once by the run's KWOK
  (:mod:`dra_harness.providers.kwok_stages`), never faked Running, Ready or Succeeded.

What cannot be prevented: a tolerate-all DaemonSet with no node selection gets a pod per simulated
node, and that pod is never available. The DaemonSet's status then counts more desired pods than
available ones (``kubectl rollout status`` waits), its controller deletes the failed pod and makes
another, backing off up to 15 min, and a rolling update stalls: the unavailable pod uses up
``maxUnavailable``, so the pods on real nodes are not replaced while the simulated nodes exist. No
node setting avoids it, so :func:`check` refuses to add the nodes, naming those DaemonSets, as it
does for a spread constraint that would count them. A tolerate-all pod of another kind fares no
better: the scheduler prefers an empty simulated node (its free cpu and memory score highest), the
pod fails there, and a Job counts the failure against its ``backoffLimit``. So the Deployments' and
unfinished Jobs' templates that would land on the nodes, and every pod not yet bound that would, are
refused too (issue 60). A workload created after the check is not seen by it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_harness.errors import Refused
from dra_harness.kube import rest
from dra_harness.kube.placement import blocking_taints, lands, selects, tolerates
from dra_harness.kube.rest import Kube
from dra_harness.kube.types import Obj
from dra_harness.labels import RUN_LABEL

#: Shown at most; the rest is counted.
MAX_LISTED = 10


def counts_as_domain(pod_spec: Obj, node: Obj) -> list[str]:
    """Topology keys of ``pod_spec``'s ``DoNotSchedule`` spread constraints for which ``node`` is a domain
    (as kube-scheduler's PodTopologySpread filter counts one: the node has the key, passes the pod's node
    affinity unless ``nodeAffinityPolicy: Ignore``, and its taints only under ``nodeTaintsPolicy: Honor``)."""
    labels = node["metadata"].get("labels") or {}
    out = []
    for c in pod_spec.get("topologySpreadConstraints") or []:
        if c.get("whenUnsatisfiable") != "DoNotSchedule" or c.get("topologyKey") not in labels:
            continue
        if c.get("nodeAffinityPolicy", "Honor") == "Honor" and not selects(pod_spec, node):
            continue
        if c.get("nodeTaintsPolicy", "Ignore") == "Honor" and not all(
                tolerates(pod_spec.get("tolerations") or [], t) for t in blocking_taints(node)):
            continue
        out.append(c["topologyKey"])
    return out


def _ours(obj: Obj, run_id: str) -> bool:
    return (obj["metadata"].get("labels") or {}).get(RUN_LABEL) == run_id


def _name(obj: Obj, kind: str) -> str:
    return f"{kind} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _finished(job: Obj) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in job.get("status", {}).get("conditions") or [])


def hurt(daemonsets: list[Obj], deployments: list[Obj], pods: list[Obj], nodes: list[Obj], run_id: str,
         jobs: Sequence[Obj] = ()) -> list[str]:
    """What adding ``nodes`` would hurt, one phrase each: DaemonSets that would put a pod on one, workloads whose
    future pods (or pods not yet bound) would land on one, and workloads whose hostname-style spread would count one
    as an empty domain. The run's own are left out."""
    out = []
    for ds in daemonsets:
        spec = ds["spec"]["template"]["spec"]
        if not _ours(ds["spec"]["template"], run_id) and any(lands(spec, n) for n in nodes):
            out.append(f"{_name(ds, 'DaemonSet')} (tolerates the nodes' taint, selects them)")
    # Deployments and unfinished Jobs by template (also their future pods); other pods as they are, by their owner.
    owners = [(_name(d, "Deployment"), d["spec"]["template"], False) for d in deployments]
    owners += [(_name(j, "Job"), j["spec"]["template"], False) for j in jobs if not _finished(j)]
    for p in pods:
        ref = next(iter(p["metadata"].get("ownerReferences") or []), None)
        if ref and ref.get("kind") in ("ReplicaSet", "DaemonSet", "Job"):
            continue  # a Deployment's or a Job's (seen by its template), or a DaemonSet's (above)
        owner = f"{ref['kind']} {p['metadata'].get('namespace', '')}/{ref['name']}" if ref else _name(p, "Pod")
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            owners.append((owner, p, bool(p["spec"].get("nodeName"))))
    seen = set()
    for owner, template, bound in owners:
        if _ours(template, run_id) or owner in seen:
            continue
        keys = sorted({k for n in nodes for k in counts_as_domain(template["spec"], n)})
        if keys:
            seen.add(owner)
            out.append(f"{owner} (DoNotSchedule spread on {', '.join(keys)})")
        elif not bound and any(lands(template["spec"], n) for n in nodes):
            seen.add(owner)
            out.append(f"{owner} (tolerates the nodes' taint, selects them: a pod placed there fails)")
    return out


def check(kube: Kube, nodes: list[Obj], run_id: str) -> None:
    """Refuse, in one line naming them, to add ``nodes`` where another's DaemonSet or spread would be hurt."""
    found = hurt(kube.list(rest.DAEMON_SETS), kube.list(rest.DEPLOYMENTS), kube.list(rest.PODS), nodes, run_id,
                 kube.list(rest.JOBS))
    if found:
        more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
        raise Refused(f"adding {len(nodes)} simulated node(s) would hurt other workloads that no node setting keeps "
                      f"clear of them: {'; '.join(found[:MAX_LISTED])}{more}. A tolerate-all DaemonSet gets a pod on each "
                      "that never runs (its rollout stalls), a tolerate-all workload's pod placed on one fails; give it a "
                      "nodeSelector (e.g. kubernetes.io/os=linux, which simulated nodes lack) or run without "
                      "--simulated-nodes")
