"""Run one scenario under one design on a real cluster, and the preemption probe.

Order of one design run: a namespace; the design's DeviceClasses, PriorityClasses and
claim templates; the recorder's watches; locust (a separate process) creating every
job's pod at its arrival time; then waiting until every job completed or the deadline
passed; then the figures, JSON and raw samples; then deleting what the run made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from dra_harness import lifetime
from dra_harness.kube import rest
from dra_harness.kube.rest import Kube
from dra_harness.kube.waits import wait_for_object, watch_until
from dra_harness.labels import RUN_LABEL
from dra_harness.providers.handle import grant_namespace_role
from dra_harness.contention import metrics, plots, queue
from dra_harness.contention.settle import SchedulerQueue
from dra_harness.contention.ahead import Room
from dra_harness.contention.virtual import NEVER_S, VirtualRun
from dra_harness.contention.plan import Job, plan
from dra_harness.contention.recorder import Hold, JobRecord, Recorder
from dra_harness.contention.scenario import Scenario
from dra_harness.contention.topology import NODE_LABEL, Topology
from dra_harness.errors import CheckError

@dataclass(frozen=True)
class Reached:
    """How far one design's run is, for a progress bar or line: jobs settled, and the scenario clock."""

    design: str
    settled: int
    total: int
    t0: float  # wall clock (time.time()) at scenario time 0
    time_compression: float
    at: float | None = None  # in virtual time, the scenario time of the last step (the wall clock says nothing)

    def scenario_s(self, now: float | None = None) -> float:
        """Scenario seconds reached: the virtual clock's step, or wall seconds since ``t0`` times the compression."""
        if self.at is not None:
            return self.at
        return max(0.0, (time.time() if now is None else now) - self.t0) * self.time_compression


#: Told when the arrivals start (0 settled), then as jobs settle.
Progress = Callable[[Reached], None]




class ContentionError(CheckError):
    """A run could not be carried out (load generator failed, cluster objects missing)."""


def run_namespace(kube: Kube, topo: Topology, what: str) -> str:
    name = f"ctn-{topo.tag}-{what}-{uuid.uuid4().hex[:4]}"
    kube.create(rest.NAMESPACES, {"metadata": {"name": name, "labels": {RUN_LABEL: topo.run_id, NODE_LABEL: topo.tag}}})
    grant_namespace_role(kube, name)  # writes there, for an identity holding only deploy/rbac's roles (an admin needs none)
    wait_for_object(kube, rest.SERVICE_ACCOUNTS, "default", lambda o: True, 30, f"default ServiceAccount in {name}",
                    namespace=name)
    return name


def drop_namespace(kube: Kube, name: str) -> None:
    """Free devices now (pods not yet done, and claims), then let the namespace go in the background."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "gracePeriodSeconds": 0}
    try:
        kube.request("DELETE", rest.JOBS.path(name), body, timeout=120)  # the queue design's; else they would make new pods
        kube.request("DELETE", rest.PODS.path(name), body, params={"fieldSelector": "status.phase!=Succeeded"}, timeout=120)
        kube.request("DELETE", rest.RESOURCE_CLAIMS.path(name), body, timeout=120)
    finally:
        kube.delete(rest.NAMESPACES, name)


def _quietly(action: Callable[[], object]) -> str | None:
    """Run a clean-up step; a slow API server must not cost the run's results (the run's sweep retries)."""
    try:
        action()
    except (rest.ApiError, rest.Unreachable) as e:
        return str(e).splitlines()[0]
    return None


def send_arrivals(kube: Kube, namespace: str, arrivals: list[dict], t0: float, timeout: float,
                  resource: rest.Resource = rest.PODS) -> list[dict]:
    """Run locust in its own process over ``arrivals``; return its per-job lines and stats line."""
    cfg = kube.configuration
    headers = {}
    for s in cast(dict[str, dict[str, Any]], cfg.auth_settings()).values():  # all APIKeyAuthSetting dicts
        if s.get("in") == "header" and s.get("value"):
            headers[s["key"]] = s["value"]
    with tempfile.TemporaryDirectory(prefix="dra-harness-loadgen-") as tmp:
        plan_file, out_file = Path(tmp) / "plan.json", Path(tmp) / "out.jsonl"
        fd = os.open(plan_file, os.O_WRONLY | os.O_CREAT, 0o600)  # may hold a bearer token: private, removed after
        with os.fdopen(fd, "w") as f:
            json.dump({"host": kube.host, "ca": cfg.ssl_ca_cert, "cert": cfg.cert_file, "key": cfg.key_file,
                       "headers": headers, "path": resource.path(namespace), "t0": t0, "timeout": timeout,
                       "users": 40, "jobs": arrivals}, f)
        proc = subprocess.Popen([sys.executable, "-m", "dra_harness.contention.loadgen", str(plan_file), str(out_file)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lifetime.die_with_parent())  # locust ends with the run
        try:
            _, stderr = proc.communicate(timeout=timeout + 60)
        finally:
            if proc.poll() is None:  # interrupted or timed out: no job may be created after we leave
                proc.kill()
                proc.wait()
        if proc.returncode != 0 or not out_file.exists():
            tail = (stderr.strip().splitlines() or ["no output"])[-1]
            raise ContentionError(f"locust load generator exited {proc.returncode}: {tail}")
        return [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]


def run_design(kube: Kube, topo: Topology, design: str, out_dir: Path, k8s_version: str,
               probe: dict | None = None, progress: Progress | None = None,
               inject: Callable[[list[Job], list[dict]], None] | None = None, grace_s: float = 60.0,
               floor: dict | None = None, scheduler: SchedulerQueue | None = None,
               admission: queue.KueueQueue | None = None,
               room: Callable[[Topology, str], Room | None] = Room.of) -> dict:
    """One scenario x design run; writes ``<scenario>-<design>.json`` and its PNGs to ``out_dir``.

    With ``scheduler`` (kube-scheduler's queue, readable on the embedded cluster) the run is in virtual
    time (:mod:`.virtual`): no floor, no compression, waits in scenario time whatever the machine's
    load; the queue design then also needs ``admission``, Kueue's queue (:func:`.queue.kueue_running`).
    Without, in wall time compressed by the scenario's ``time_compression``.
    ``inject`` may alter the pod bodies before they are sent (negative controls); ``room`` gives the devices
    the virtual clock counts to send provably fitting arrivals ahead (:mod:`.ahead`; None: every arrival settles).
    ``floor`` (from
    :func:`dra_harness.contention.floor.summarise`) withholds the verdict of a tier whose tolerable
    wait is within ten floors, and is kept in the result (wall time only).
    """
    if scheduler is not None:
        return _run_virtual(kube, topo, design, out_dir, k8s_version, probe, progress, inject, scheduler, admission,
                            room(topo, design))
    sc: Scenario = topo.scenario
    if design not in sc.designs:
        raise ContentionError(f"scenario {sc.name} defines no design {design!r} (has: {', '.join(sc.designs)})")
    jobs = plan(sc)
    queued = design == "queue"
    if queued and not queue.kueue_serves(kube):
        raise ContentionError("the queue design needs Kueue running on the cluster (contention run starts it on an embedded cluster)")
    ns = run_namespace(kube, topo, design)
    resumer = queue.Resumer(kube, ns, lambda job: left(job)) if queued else None
    rec = Recorder(kube, ns, jobs=queued, on_new_pod=resumer)
    left = _work_left(sc, jobs, rec)
    started = time.monotonic()
    phases: dict[str, float] = {}
    try:
        topo.install(design, ns)
        if queued:
            queue.install(kube, topo, ns)
        rec.start()
        phases["setup_s"] = round(time.monotonic() - started, 1)
        body = (lambda j: queue.job(topo, j.name, j.tier, sc.wall(j.duration_s))) if queued else \
            (lambda j: topo.pod(design, j.name, j.tier, sc.wall(j.duration_s)))
        arrivals: list[dict[str, Any]] = [{"name": j.name, "tier": j.tier, "at": sc.wall(j.at_s), "body": body(j)}
                                          for j in jobs]
        if inject:
            inject(jobs, arrivals)
        t0 = time.time() + 2.0  # locust starts in about a second
        last = max(a["at"] for a in arrivals)
        if progress:
            progress(Reached(design, 0, len(jobs), t0, sc.time_compression))
        sent = send_arrivals(kube, ns, arrivals, t0, timeout=last + 60, resource=rest.JOBS if queued else rest.PODS)
        stats = sent.pop()["locust"] if sent and "locust" in sent[-1] else {}
        answered = {s["name"]: s for s in sent}
        for s in sent:  # the create's answer is when the job exists; the watch may see it a little later
            r = rec.job(s["name"])
            if s["status"] in (201, 409):
                r.created = min(r.created or s["answered"], s["answered"])
        work = sum(sc.wall(j.duration_s) * j.devices for j in jobs) / sc.total_devices
        longest = max(sc.wall(j.duration_s) for j in jobs)
        deadline = time.monotonic() + max(0.0, t0 - time.time()) + last + work + longest + grace_s
        names = {j.name for j in jobs if answered.get(j.name, {}).get("status") in (201, 409)}
        phases["arrivals_s"] = round(time.monotonic() - started, 1)
        rec.wait_settled(names, deadline, progress=(lambda d: progress(Reached(design, d, len(jobs), t0, sc.time_compression)))
                         if progress else None)
        phases["settled_s"] = round(time.monotonic() - started, 1)
    finally:
        rec.close()
        cleanup_error = (_quietly(lambda: drop_namespace(kube, ns)) or _quietly(lambda: topo.uninstall(design))
                         or (_quietly(lambda: queue.uninstall(kube, topo, ns)) if queued else None))
    records = dict(rec.jobs)
    ends = [r.completed for r in records.values() if r.completed] or [time.time()]
    extra = {"floor": floor, "phases_wall_s": phases,
             "resumed": {"patched": len(resumer.patched), "missed": resumer.missed[:10]} if resumer else None,
             "loadgen": stats | {"late_p95_s": metrics.percentile([s["late_s"] for s in sent], 95)}}
    return _finish(topo, design, jobs, records, rec.all_holds(), (t0, max(ends)), sc.time_compression, out_dir,
                   k8s_version, probe, time.monotonic() - started, extra,
                   {"creates": sent, "samples": rec.samples}, cleanup_error)


def _finish(topo: Topology, design: str, jobs: list[Job], records: dict[str, JobRecord], holds: list[Hold],
            span: tuple[float, float], compression: float, out_dir: Path, k8s_version: str, probe: dict | None,
            wall: float, extra: dict[str, Any], raw: dict[str, Any], cleanup_error: str | None) -> dict:
    """The figures of one run from its records (wall seconds x ``compression``, or scenario seconds and 1):
    result JSON, raw samples and the two PNGs."""
    sc = replace(topo.scenario, time_compression=compression)
    t0, t_end = span
    floor = extra.get("floor")
    lost = metrics.lost_jobs(jobs, records)
    reserved_ranges = topo.reserved_ranges(design)
    reserved = {f"{d.node}/{d.name}" for d in topo.devices
                if any(lo <= d.ordinal < hi for lo, hi in reserved_ranges.values())}
    util = metrics.utilisation(holds, t0, t_end, sc.total_devices, compression,
                               step_wall=max(0.5, (t_end - t0) / 600))  # at most ~600 samples, in either clock
    virtual = extra.get("clock") == "virtual"
    base = f"{sc.name}-{design}"
    result: dict[str, Any] = {
        "scenario": sc.name, "design": design, "k8s_version": k8s_version,
        "jobs_total": len(jobs), "jobs_completed": sum(1 for j in jobs if records.get(j.name) and records[j.name].completed),
        "jobs_lost": len(lost), "lost": dict(list(lost.items())[:50]),
        "wall_s": round(wall, 1),
        # End to end: jobs completed per wall second from the first arrival to the last completion.
        "jobs_per_s": round(sum(1 for r in records.values() if r.completed) / max(1e-6, wall if virtual else t_end - t0), 2),
        "clock": "wall", "time_compression": compression,
        "time_unit": ("scenario seconds (virtual time), except wall_s and *_wall_s" if virtual else
                      "scenario seconds (wall seconds x time_compression), except wall_s and *_wall_s"),
        "nodes": sc.nodes, "devices": sc.total_devices, "reserved_devices": len(reserved),
        "design_violations": topo.violations(design, {j.name: (j.tier, records[j.name].devices)
                                                       for j in jobs if j.name in records})[:20],
        "tiers": metrics.tiers(sc, jobs, records, lost, floor["established_above_s"] if floor else None),
        "utilisation": util,
        "idle_reserved_device_s": metrics.idle_reserved(holds, reserved, t0, t_end, compression),
        "preemption_probe": probe,
        "evictions": metrics.evictions(sc, jobs, records) if design == "queue" else None,
        "device_selectors": {t.name: topo.selector(design, t.name) for t in sc.tiers},
        "plots": {"wait_cdf": f"{base}-wait-cdf.png", "utilisation": f"{base}-utilisation.png"},
        "raw": f"{base}-raw.json",
        "cleanup_error": cleanup_error,
    } | extra
    if virtual:
        result["time_compression"] = None
    out_dir.mkdir(parents=True, exist_ok=True)
    when = "virtual time" if virtual else f"1 h = {3600 / compression:g} s"
    title = f"{sc.name} / {design} (k8s {k8s_version}, {when})"
    plots.wait_cdf(out_dir / result["plots"]["wait_cdf"], title, metrics.raw_waits(sc, jobs, records),
                   {t.name: t.tolerable_wait_s for t in sc.tiers})
    plots.utilisation(out_dir / result["plots"]["utilisation"], title, util["samples"], len(reserved))
    (out_dir / result["raw"]).write_text(json.dumps({
        "t0": t0, "plan": [j.to_dict() for j in jobs], "jobs": {k: v.to_dict() for k, v in records.items()},
        "holds": [h.__dict__ for h in holds]} | raw))
    (out_dir / f"{base}.json").write_text(json.dumps(result, indent=1))
    return result


def _run_virtual(kube: Kube, topo: Topology, design: str, out_dir: Path, k8s_version: str, probe: dict | None,
                 progress: Progress | None, inject: Callable[[list[Job], list[dict]], None] | None,
                 scheduler: SchedulerQueue, admission: queue.KueueQueue | None, room: Room | None) -> dict:
    """:func:`run_design` in virtual time: each job created at its arrival step, ended by the harness."""
    sc: Scenario = topo.scenario
    jobs = plan(sc)
    queued = design == "queue"
    if queued and (admission is None or not queue.kueue_serves(kube)):
        raise ContentionError("the queue design in virtual time needs Kueue running beside the embedded cluster, its "
                              "admission queue read (contention run starts it: contention.queue.kueue_running)")
    ns = run_namespace(kube, topo, design)
    rec = Recorder(kube, ns, jobs=queued)
    started = time.monotonic()
    # A pod's end is the harness's to write: none carries a run time KWOK would reach.
    body = (lambda j: queue.job(topo, j.name, j.tier, NEVER_S)) if queued else (lambda j: topo.pod(design, j.name, j.tier, None))
    arrivals: list[dict[str, Any]] = [{"name": j.name, "tier": j.tier, "at": j.at_s, "body": body(j)} for j in jobs]
    if inject:
        inject(jobs, arrivals)
    bodies = {a["name"]: a["body"] for a in arrivals}
    res = rest.JOBS if queued else rest.PODS

    def create(job: Job) -> bool:
        if job.name not in bodies:  # a negative control took it out
            return False
        try:
            rest.answered(lambda: kube.create(res, bodies[job.name], ns), 30)
        except rest.Conflict:  # asked again after an answer that never came back: the first create went through
            pass
        return True

    containers = (arrivals[0]["body"]["spec"]["template"]["spec"] if queued else arrivals[0]["body"]["spec"])["containers"]
    settled = None
    try:
        topo.install(design, ns)
        if queued:
            queue.install(kube, topo, ns)
        rec.start()
        settled = queue.Settled(kube, ns, admission, sc.total_devices).start() if queued and admission else None
        run = VirtualRun(kube, ns, sc, jobs, rec, scheduler, create, containers, extra=settled, room=room)
        setup = round(time.monotonic() - started, 1)
        if progress:
            progress(Reached(design, 0, len(jobs), time.time(), 1.0, at=0.0))
        run.run(progress=(lambda d, t: progress(Reached(design, d, len(jobs), time.time(), 1.0, at=t))) if progress else None)
    finally:
        rec.close()
        if settled is not None:
            settled.close()
        cleanup_error = (_quietly(lambda: drop_namespace(kube, ns)) or _quietly(lambda: topo.uninstall(design))
                         or (_quietly(lambda: queue.uninstall(kube, topo, ns)) if queued else None))
    extra = {"clock": "virtual", "floor": None, "phases_wall_s": {"setup_s": setup}, "virtual": run.clock.summary() | {
        "late_starts": run.late, "sent_ahead": len(run.early) + len(run.broken), "ahead_broken": len(run.broken),
        "ahead_broken_seen": dict(sorted(run.broken.items())),
        "not_sent_ahead": dict(run.refused)}}
    return _finish(topo, design, jobs, run.records(), run.holds(), (0.0, run.end()), 1.0, out_dir, k8s_version, probe,
                   time.monotonic() - started, extra, {"steps": [run.clock.walls, run.clock.times], "samples": rec.samples},
                   cleanup_error)


def _work_left(sc: Scenario, jobs: list[Job], rec: Recorder) -> Callable[[str], float | None]:
    """For the queue design's :class:`~dra_harness.contention.queue.Resumer`: wall seconds an evicted job
    still has to run, from its checkpoints; None for a job not evicted or whose tier keeps no checkpoint."""
    by_name = {j.name: j for j in jobs}

    def left(name: str) -> float | None:
        j = by_name.get(name)
        ckpt = sc.tier(j.tier).checkpoint_interval_s if j else None
        with rec.lock:
            r = rec.jobs.get(name)
            if j is None or not ckpt or r is None or not r.evictions:
                return None
            interrupted = [run for run in r.runs if run[1] in r.evictions]
        return sc.wall(j.duration_s) - metrics.saved_work(interrupted, sc.wall(ckpt))[0]
    return left


def preemption_probe(kube: Kube, topo: Topology, low_run_s: float = 20.0, timeout: float | None = None) -> dict:
    """Fill every device one node holds with low-priority pods, then ask for one with a high-priority pod.

    Records whether the scheduler freed a device by preempting (a victim gets the
    DisruptionTarget condition and is deleted), how long the high-priority pod waited
    (wall seconds; without preemption, until a low-priority pod completed by itself), and
    the scheduler's own message for the pending pod.
    """
    sc = topo.scenario
    low, high = min(sc.tiers, key=lambda t: t.priority), max(sc.tiers, key=lambda t: t.priority)
    if low.priority >= high.priority:
        return {"skipped": "the scenario has a single priority", "freed_by_preemption": False,
                "high_priority_wait_s": None, "scheduler_message": ""}
    ns = run_namespace(kube, topo, "probe")
    node = topo.nodes[0]
    devices = [d for d in topo.devices if d.node == node]
    labels = {RUN_LABEL: topo.run_id, NODE_LABEL: topo.tag}
    cls = f"ctn-{topo.tag}-probe"
    rec = Recorder(kube, ns)
    try:
        kube.create(rest.DEVICE_CLASSES, {"metadata": {"name": cls, "labels": labels}, "spec": {"selectors": [
            {"cel": {"expression": topo.probe_selector(low.name, node)}}]}})
        topo.install("shared", ns)
        for tier in (low, high):
            kube.create(rest.RESOURCE_CLAIM_TEMPLATES, {"metadata": {"name": f"probe-{tier.name}", "labels": labels},
                        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": 1}}]}}}}, ns)
        rec.start()
        for i in range(len(devices)):
            body = topo.pod("shared", f"low-{i}", low.name, low_run_s)
            body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = f"probe-{low.name}"
            kube.create(rest.PODS, body, ns)
        watch_until(kube, rest.PODS, lambda ps: len(ps) == len(devices) and all(p["status"].get("phase") == "Running" for p in ps),
                    60, f"{len(devices)} low-priority probe pods Running", namespace=ns)
        body = topo.pod("shared", "high", high.name, 1.0)
        body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = f"probe-{high.name}"
        kube.create(rest.PODS, body, ns)
        deadline = time.monotonic() + (timeout or low_run_s + 40)
        while time.monotonic() < deadline:
            with rec.lock:
                h = rec.jobs.get("high")
                if h and h.running:
                    break
            time.sleep(0.05)
        # The scheduler's FailedScheduling event was written at the high pod's first attempt, seconds before.
        events = [e for e in kube.list(rest.EVENTS, ns) if e.get("involvedObject", {}).get("name") == "high"]
        pod = kube.get(rest.PODS, "high", ns)
    finally:
        rec.close()
        drop_namespace(kube, ns)
        topo.uninstall("shared")
        kube.delete(rest.DEVICE_CLASSES, cls)
    h = rec.jobs.get("high")
    victims = sorted(n for n, r in rec.jobs.items() if n.startswith("low-") and (r.preempted or (r.deleted and not r.completed)))
    failed = [e.get("message", "") for e in events if e.get("reason") == "FailedScheduling"]
    return {
        "freed_by_preemption": bool(victims),
        "victims": victims,
        "high_priority_wait_s": round(h.running - h.created, 3) if h and h.running and h.created else None,
        "wait_unit": "wall seconds",
        "low_priority_run_s": low_run_s,
        "scheduler_message": (h.first_message if h and h.first_message else (failed[0] if failed else "")),
        "failed_scheduling_events": failed[:3],
        "nominated_node": pod.get("status", {}).get("nominatedNodeName"),
        "high_priority": high.priority, "low_priority": low.priority, "devices_filled": len(devices),
    }
