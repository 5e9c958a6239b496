"""A pod that cannot run here ends a wait at once, and the harness's "could not test" is never a FAIL."""

from __future__ import annotations

import pytest

from dra_harness.errors import NotEstablished
from dra_harness.kube import podstates
from dra_harness.plugin import pytest_plugin
from dra_harness.report.results import NOT_ESTABLISHED, established


def _pod(reason: str | None, deleting: bool = False, init: bool = False) -> dict:
    status = {"state": {"waiting": {"reason": reason, "message": "pull access denied"}} if reason else {"running": {}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    meta = {"name": "p", "namespace": "ns", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "status": {"phase": "Pending", key: [{"name": "c", **status}]}}


@pytest.mark.parametrize("reason", sorted(podstates.ENVIRONMENT))
def test_an_image_or_config_the_cluster_cannot_meet_is_an_environment_blocker(reason):
    why = podstates.environment_blocker([_pod(None), _pod(reason)])
    assert why == f"pod ns/p container c: {reason}: pull access denied"
    assert podstates.product_failure(_pod(reason)) is None


def test_an_init_containers_pull_error_blocks_too():
    assert podstates.environment_blocker([_pod("ImagePullBackOff", init=True)])


@pytest.mark.parametrize("reason", sorted(podstates.PRODUCT))
def test_a_container_the_runtime_could_not_create_is_the_products_failure_not_the_environments(reason):
    assert podstates.product_failure(_pod(reason)) and podstates.environment_blocker([_pod(reason)]) is None


def test_running_pods_waiting_ones_for_other_reasons_and_pods_being_deleted_block_nothing():
    """Negative controls: ContainerCreating is progress, and a pod on its way out decides nothing."""
    assert podstates.environment_blocker([_pod(None), _pod("ContainerCreating"),
                                          _pod("ErrImagePull", deleting=True)]) is None


def _report(request, error: BaseException, when: str = "call") -> pytest.TestReport:
    def raise_it():
        raise error

    call = pytest.CallInfo.from_call(raise_it, when=when)
    hook = pytest_plugin.pytest_runtest_makereport(request.node, call)
    next(hook)
    with pytest.raises(StopIteration) as done:
        hook.send(pytest.TestReport.from_item_and_call(request.node, call))
    return done.value.value


def test_a_check_that_could_not_test_is_reported_as_not_established_with_the_reason(request):
    report = _report(request, NotEstablished("no node can pull busybox:1.36"))
    assert report.outcome == "skipped"
    reason = report.longrepr[2].removeprefix("Skipped: ")  # as junit.xml keeps it
    assert established("skipped", reason, []) == (NOT_ESTABLISHED, "not established: no node can pull busybox:1.36")


def test_a_failed_assertion_stays_a_failure(request):
    """Negative control: only NotEstablished is turned into a skip."""
    assert _report(request, AssertionError("device gpu-1 seen twice")).outcome == "failed"


def test_an_ordinary_skip_stays_a_skip():
    assert established("skipped", "disruptive: pass --allow-disruptive", []) == ("skipped", "disruptive: pass --allow-disruptive")
