"""The queue design's accounting: a Job's several pods, evictions, work lost after checkpoints."""

from __future__ import annotations

from pathlib import Path

from dra_harness.contention import metrics, queue
from dra_harness.contention.plan import Job
from dra_harness.contention.recorder import JOB_NAME_LABEL, Recorder
from dra_harness.contention.scenario import load

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "contention" / "queue" / "evicts.yaml"


def _pod(name: str, job: str, phase: str | None, deleting: bool = False) -> dict:
    meta: dict = {"name": name, "labels": {JOB_NAME_LABEL: job, "dra-harness.io/tier": "lo"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n0"}, "status": {"phase": phase} if phase else {}}


def test_a_jobs_pods_make_one_record_with_each_run_and_the_eviction_between():
    seen: list[tuple[str, str]] = []
    rec = Recorder(None, "ns", jobs=True, on_new_pod=lambda job, pod: seen.append((job, pod["metadata"]["name"])))  # type: ignore[arg-type]
    rec._pod("ADDED", _pod("lo-0-abcde", "lo-0", "Pending"), 10.0)
    rec._pod("MODIFIED", _pod("lo-0-abcde", "lo-0", "Running"), 11.0)
    rec._pod("MODIFIED", _pod("lo-0-abcde", "lo-0", "Running", deleting=True), 14.0)  # Kueue suspended the Job
    rec._pod("DELETED", _pod("lo-0-abcde", "lo-0", "Running", deleting=True), 14.5)
    rec._pod("ADDED", _pod("lo-0-fghij", "lo-0", "Pending"), 20.0)
    rec._pod("MODIFIED", _pod("lo-0-fghij", "lo-0", "Running"), 21.0)
    rec._pod("MODIFIED", _pod("lo-0-fghij", "lo-0", "Succeeded"), 30.0)
    r = rec.jobs["lo-0"]
    assert list(rec.jobs) == ["lo-0"]
    assert r.runs == [[11.0, 14.0], [21.0, 30.0]]
    assert r.evictions == [14.0]
    assert (r.running, r.completed, r.failed, r.deleted) == (11.0, 30.0, None, None)
    assert seen == [("lo-0", "lo-0-abcde"), ("lo-0", "lo-0-fghij")], "each new pod is offered once, before it runs"


def test_a_job_pod_deleted_before_it_ran_is_no_eviction_and_one_that_failed_is_a_failure():
    rec = Recorder(None, "ns", jobs=True)  # type: ignore[arg-type]
    rec._pod("ADDED", _pod("a-1", "a", "Pending"), 1.0)
    rec._pod("DELETED", _pod("a-1", "a", "Pending", deleting=True), 2.0)
    rec._pod("ADDED", _pod("b-1", "b", "Running"), 1.0)
    rec._pod("MODIFIED", _pod("b-1", "b", "Failed"), 3.0)
    assert rec.jobs["a"].evictions == [] and rec.jobs["a"].runs == []
    assert rec.jobs["b"].failed == 3.0 and rec.jobs["b"].evictions == []


def test_work_is_kept_up_to_the_last_checkpoint_and_the_rest_is_lost():
    assert metrics.saved_work([[0.0, 2.7]], 1.5) == (1.5, 2.7 - 1.5)
    # a resumed run continues from what was saved: 1.5 + 1.0 = 2.5 -> saved 1.5 again, lost 1.0
    saved, lost = metrics.saved_work([[0.0, 2.7], [10.0, 11.0]], 1.5)
    assert saved == 1.5 and round(lost, 6) == round(1.2 + 1.0, 6)
    assert metrics.saved_work([[0.0, 2.7]], None) == (0.0, 2.7), "without checkpoints everything run is lost"


def test_evictions_give_lost_device_hours_and_requeue_waits_in_scenario_time():
    sc = load(SMALL)  # 600x; lo: 4 devices, checkpoint every 15 min
    rec = Recorder(None, "ns", jobs=True)  # type: ignore[arg-type]
    r = rec.job("lo-0")
    r.runs, r.evictions = [[100.0, 102.7], [106.0, 116.5]], [102.7]
    jobs = [Job("lo-0", "lo", 0.0, 7200.0, 4), Job("hi-0", "hi", 0.0, 1200.0, 1)]
    e = metrics.evictions(sc, jobs, rec.jobs)
    assert e["hi"]["evictions"] == 0 and e["hi"]["lost_device_hours"] == 0.0
    lo = e["lo"]
    assert lo["evictions"] == 1
    # 2.7 s wall run, 1.5 s (15 min) checkpointed: 1.2 s x 4 devices x 600 = 0.8 device-hours lost
    assert lo["lost_device_hours"] == 0.8
    assert lo["requeue_wait_s"]["p50"] == round((106.0 - 102.7) * 600, 1)


def test_kueue_counts_every_tiers_device_class_as_one_device_resource():
    class Topo:
        scenario = load(SMALL)

        @staticmethod
        def class_name(design: str, tier: str) -> str:
            return f"c-{design}-{tier}"

    assert queue.device_classes(Topo()) == {queue.RESOURCE: ["c-queue-hi", "c-queue-lo"]}  # type: ignore[arg-type]


def test_a_queued_job_is_a_job_in_the_local_queue_at_its_tiers_priority_running_the_designs_pod():
    from dra_harness.contention.topology import Topology

    topo = Topology(None, load(SMALL), "run12345", tag="t1")  # type: ignore[arg-type]
    body = queue.job(topo, "lo-3", "lo", 12.0)
    labels = body["metadata"]["labels"]
    assert labels[queue.QUEUE_LABEL] == queue.QUEUE and labels[queue.PRIORITY_LABEL] == topo.priority_class("lo")
    spec = body["spec"]
    assert spec["backoffLimit"] == 0, "a failed pod is a failed job, not a silent retry"
    pod = spec["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == topo.template("queue", "lo")
    assert pod["priorityClassName"] == topo.priority_class("lo")
    assert spec["template"]["metadata"]["annotations"]["dra-harness.io/run-duration"] == "12.000s"


def test_the_designs_side_by_side_plot_is_written(tmp_path):
    from dra_harness.contention import plots

    def result(design: str, p95: float, lost: int) -> dict:
        return {"design": design, "tiers": [{"tier": "hi", "wait_s": {"p95": p95}, "tolerable_wait_s": 600.0, "lost": lost},
                                             {"tier": "lo", "wait_s": {"p95": None}, "tolerable_wait_s": 7200.0, "lost": 0}]}

    plots.designs(tmp_path / "d.png", "t", [result("shared", 5400.0, 0), result("queue", 60.0, 1)])
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
