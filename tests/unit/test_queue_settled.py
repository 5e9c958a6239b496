"""The queue design's part of a settled step, on plain data: Kueue's metrics text, Jobs and Workloads as lists.

Each condition has its negative control: the same objects with the one fact that makes it settled."""

from __future__ import annotations

from types import SimpleNamespace

from dra_harness.contention.queue import ENDED_TTL_S, AdmissionState, Settled, parse_admission

KUEUE_METRICS = """# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{cluster_queue="ctn-run-queue",replica_role="leader",status="active"} 2
kueue_pending_workloads{cluster_queue="ctn-run-queue",replica_role="leader",status="inadmissible"} 5
kueue_pending_workloads{cluster_queue="other-tenant",replica_role="leader",status="active"} 9
kueue_admission_attempts_total{replica_role="leader",result="inadmissible"} 7
kueue_admission_attempts_total{replica_role="leader",result="success"} 30
"""


def test_kueue_s_admission_queue_is_read_for_the_run_s_cluster_queue_only():
    assert parse_admission(KUEUE_METRICS, "ctn-run-queue") == AdmissionState(active=2, inadmissible=5, attempts=37)
    assert parse_admission(KUEUE_METRICS, "absent") == AdmissionState(0, 0, 37)


class FakeKube:
    """The patches sent."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict]] = []

    def patch(self, res, name, body, namespace=None):
        self.patches.append((name, body))


class FakeMirror:
    """A watched kind as plain objects; ``changes`` grows when the test changes them."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects, self.changes = objects, 0

    def items(self) -> list[dict]:
        return self.objects


def job(name: str, active: int = 1, suspend: bool = False) -> dict:
    return {"metadata": {"name": name}, "spec": {"suspend": suspend}, "status": {"active": active}}


def workload(job_name: str, **conditions: str) -> dict:
    return {"metadata": {"name": f"job-{job_name}", "resourceVersion": "1",
                         "ownerReferences": [{"kind": "Job", "name": job_name}]},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}


def settled(jobs: list[dict], workloads: list[dict], active: int = 0, attempts: int = 0) -> Settled:
    reader = SimpleNamespace(read=lambda cq: AdmissionState(active, 0, attempts))
    s = Settled(FakeKube(), "ctn-run-queue", reader)  # type: ignore[arg-type]
    s.jobs, s.workloads = FakeMirror(jobs), FakeMirror(workloads)  # type: ignore[assignment]
    return s


def test_a_step_waits_for_every_job_the_harness_ended_to_be_finished_and_its_quota_given_back():
    running = workload("a", QuotaReserved="True", Admitted="True")
    assert settled([job("a", active=0)], [running])(ended={"a"}) == [
        "job a ended, its workload not yet Finished", "job a admitted, its pod not yet running"]
    # Negative control: Finished, the same step is settled.
    assert settled([job("a", active=0)], [workload("a", QuotaReserved="True", Admitted="True", Finished="True")])(ended={"a"}) == []


def test_a_workload_waiting_in_kueue_s_admission_queue_holds_the_step_and_a_parked_one_does_not():
    pending = workload("b", QuotaReserved="False")
    s = settled([job("b", active=0, suspend=True)], [pending], active=1)
    assert s() == ["1 workload(s) waiting in Kueue's admission queue"]
    assert s.pending == 1  # held back: an end-only step is not skipped while it waits
    assert settled([job("b", active=0, suspend=True)], [pending], active=0)() == []


def test_kueue_s_admission_attempts_and_watched_changes_count_for_the_quiet_window():
    s = settled([job("c")], [workload("c", QuotaReserved="True", Admitted="True")], attempts=3)
    s()
    first = s.changes
    s()
    assert s.changes == first  # nothing moved
    s.admission = SimpleNamespace(read=lambda cq: AdmissionState(0, 0, 4))  # type: ignore[assignment]
    s()
    assert s.changes == first + 1
    s.workloads.changes += 1  # type: ignore[attr-defined]  # a Workload written, as the watch saw it
    s()
    assert s.changes == first + 2


def test_ending_a_job_touches_its_spec_so_the_job_controller_syncs_it_at_once():
    s = settled([], [])
    s.end("d")
    assert s.kube.patches == [("d", {"spec": {"ttlSecondsAfterFinished": ENDED_TTL_S}})]  # type: ignore[attr-defined]
