"""The virtual clock's pure parts: reading kube-scheduler's queue, the settle gate, stamps to scenario time, work left."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from dra_harness.contention import settle
from dra_harness.contention.plan import Job
from dra_harness.contention.recorder import JobRecord
from dra_harness.contention.scenario import load
from dra_harness.contention.settle import NotSettled, QueueState, parse, wait_settled
from dra_harness.contention.virtual import Clock, VirtualRun

ROOT = Path(__file__).resolve().parents[2]

METRICS = """# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 2
scheduler_pending_pods{queue="backoff"} 1
scheduler_pending_pods{queue="gated"} 4
scheduler_pending_pods{queue="unschedulable"} 7
scheduler_schedule_attempts_total{profile="default-scheduler",result="error"} 0
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 40
scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 3
scheduler_pending_pods_total_not_a_gauge 99
scheduler_queue_incoming_pods_total{event="resource.k8s.io/ResourceClaimUpdate",queue="backoff"} 5
scheduler_queue_incoming_pods_total{event="resource.k8s.io/ResourceClaimUpdate",queue="active"} 2
scheduler_queue_incoming_pods_total{event="NodeAdd",queue="active"} 30
"""


def test_the_scheduler_queue_is_read_per_queue_and_parked_pods_do_not_count_as_waiting():
    state = parse(METRICS)
    assert state.pending == {"active": 2, "backoff": 1, "gated": 4, "unschedulable": 7}
    assert state.attempts == 43
    assert state.waiting == 3  # active and backoff; unschedulable and gated are parked
    assert state.moved == 7    # moved by a claim's change, not by a node's


def test_a_family_is_found_at_the_start_in_the_middle_and_at_an_unterminated_end_of_the_text():
    assert settle.family('a{x="1"} 1\na{x="2"} 2', "a") == ['a{x="1"} 1', 'a{x="2"} 2']
    assert settle.family('# TYPE a counter\nab{x="1"} 5\na{x="1"} 1\nb{x="1"} 3\n', "a") == ['a{x="1"} 1']
    assert settle.family('ab{x="1"} 5\n', "a") == [] and settle.family("", "a") == []


class FakeQueue:
    """A scheduler whose queue answers from a script, one state per read, the last repeated."""

    def __init__(self, *states: QueueState) -> None:
        self.states = itertools.chain(states, itertools.repeat(states[-1]))

    def read(self) -> QueueState:
        return next(self.states)


IDLE = QueueState({"active": 0, "backoff": 0, "unschedulable": 2}, 10)


def test_a_step_settles_once_nothing_moved_for_the_quiet_window():
    busy = QueueState({"active": 1}, 9)
    polls = wait_settled(FakeQueue(busy, busy, IDLE), lambda: [], lambda: 5, 5.0, "t=0", quiet_s=0.02, every_s=0.001)
    assert polls >= 4  # two busy reads, then idle until the quiet window passed


def test_a_new_attempt_within_the_quiet_window_starts_it_again():
    later = QueueState(IDLE.pending, 11)
    began = time.monotonic()
    reads = wait_settled(FakeQueue(IDLE, later), lambda: [], lambda: 0, 5.0, "t=0", quiet_s=0.05, every_s=0.002)
    assert reads == 3  # the window's start, its end (an attempt was made meanwhile: it starts again), the new end
    assert time.monotonic() - began >= 0.1


def test_a_watch_event_within_the_quiet_window_starts_it_again_with_a_new_read():
    seen = iter([0, 0, 0, 1] + [1] * 1000)  # the watches deliver an event during the first window
    began = time.monotonic()
    reads = wait_settled(FakeQueue(IDLE), lambda: [], lambda: next(seen), 5.0, "t=0", quiet_s=0.05, every_s=0.002)
    assert reads == 3 and time.monotonic() - began >= 0.05  # the first window broken off: read again, then a whole window


def test_an_unsettled_step_times_out_naming_what_was_still_moving():
    with pytest.raises(NotSettled, match=r"t=60: .* not settled after 0 s; last seen: pod a bound to n0, not Running"):
        wait_settled(FakeQueue(IDLE), lambda: ["pod a bound to n0, not Running"], lambda: 0, 0.05, "t=60", every_s=0.01)


def test_negative_control_a_scheduler_with_pods_waiting_never_settles():
    waiting = QueueState({"active": 0, "backoff": 2}, 10)
    with pytest.raises(NotSettled, match="2 pod\\(s\\) waiting in kube-scheduler's queue \\(backoff 2\\)"):
        wait_settled(FakeQueue(waiting), lambda: [], lambda: 0, 0.05, "t=0", quiet_s=0.0, every_s=0.01)


def test_devices_coming_back_to_parked_pods_wait_until_the_scheduler_moved_one():
    before, after = QueueState(IDLE.pending, 10, moved=4), QueueState(IDLE.pending, 10, moved=5)
    q = FakeQueue(*([before] * 5), after)
    polls = wait_settled(q, lambda: [], lambda: 0, 5.0, "t=0", quiet_s=0.0, every_s=0.001, moved_above=4)
    assert polls == 7  # five reads before the move, the move, then one to see it hold


def test_negative_control_a_scheduler_that_never_moves_them_is_waited_for_only_a_bounded_time(monkeypatch):
    monkeypatch.setattr(settle, "MOVED_WITHIN_S", 0.05)
    with pytest.raises(NotSettled, match="not yet moved the pods parked"):
        wait_settled(FakeQueue(QueueState(IDLE.pending, 10, moved=4)), lambda: [], lambda: 0, 0.03, "t=0",
                     quiet_s=0.0, every_s=0.005, moved_above=4)
    polls = wait_settled(FakeQueue(QueueState(IDLE.pending, 10, moved=4)), lambda: [], lambda: 0, 5.0, "t=0",
                         quiet_s=0.0, every_s=0.005, moved_above=4)
    assert polls > 2  # settled once the bound passed


def test_a_watch_stamp_maps_to_the_scenario_time_of_the_step_it_fell_in():
    clock = Clock(walls=[100.0, 101.0, 102.5], times=[0.0, 600.0, 3600.0])
    assert clock.at(None) is None
    assert [clock.on(w) for w in (99.0, 100.0, 100.9, 101.0, 102.4, 500.0)] == [0.0, 0.0, 0.0, 600.0, 600.0, 3600.0]


class FakeRecorder:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}
        self.pod_state: dict = {}
        self.pod_started: dict = {}
        self.pod_ended: set = set()
        self.pod_job: dict = {}
        self.holds: dict = {}
        self.samples: list = []


def test_an_evicted_job_runs_only_the_work_left_after_its_last_checkpoint():
    sc = load(ROOT / "scenarios" / "inference-vs-training.yaml")  # training: 30-min checkpoints
    job = Job("training-0", "training", 0.0, 3 * 3600.0, 8)
    run = VirtualRun(None, "ns", sc, [job], FakeRecorder(), settle.SchedulerQueue.__new__(settle.SchedulerQueue),  # type: ignore[arg-type]
                     lambda j: True, [])
    assert run._left("training-0") == 3 * 3600.0  # never evicted: its whole duration
    run.runs["training-0"] = [[0.0, 4000.0]]  # evicted after 66.7 min: two checkpoints (60 min) kept
    assert run._left("training-0") == 3 * 3600.0 - 3600.0
    run.runs["training-0"].append([5000.0, 7000.0])  # evicted again 33 min in: one more checkpoint kept
    assert run._left("training-0") == 3 * 3600.0 - 5400.0
    run.runs["training-0"].append([8000.0, 13400.0, 1.0])  # the completed run is not work to resume from
    assert run._left("training-0") == 3 * 3600.0 - 5400.0


def test_progress_in_virtual_time_reports_the_step_s_scenario_time_not_the_wall_clock_s():
    from dra_harness.contention.runner import Reached

    assert Reached("shared", 3, 10, t0=0.0, time_compression=1.0, at=3600.0).scenario_s() == 3600.0
    assert Reached("shared", 3, 10, t0=100.0, time_compression=60.0).scenario_s(now=160.0) == 3600.0


def _refused(name: str, message: str) -> dict:
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": message}]}}


def test_devices_coming_back_are_waited_on_only_for_a_pod_turned_away_for_devices():
    from dra_harness.contention.recorder import Recorder

    sc = load(ROOT / "scenarios" / "inference-vs-training.yaml")
    rec = Recorder(None, "ns")  # type: ignore[arg-type]  # fed by hand: no watch is started
    run = VirtualRun(None, "ns", sc, [], rec, settle.SchedulerQueue.__new__(settle.SchedulerQueue),  # type: ignore[arg-type]
                     lambda j: True, [])
    rec._pod("ADDED", _refused("stuck", "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."), 1.0)
    assert not run._parked(), "a pod no node matches is not moved by devices coming back"
    # Negative control: the same pod turned away for its claims is what a step giving devices back must wait on.
    rec._pod("MODIFIED", _refused("stuck", "0/4 nodes are available: 4 cannot allocate all claims."), 2.0)
    assert run._parked()
    rec._pod("DELETED", _refused("stuck", "0/4 nodes are available: 4 cannot allocate all claims."), 3.0)
    assert not run._parked() and "stuck" not in rec.waits_for_devices
