"""Which refusals the API client retries: a 429 that turned a request away before it was processed."""

from __future__ import annotations

from dra_harness.kube.rest import ApiError, _busy_wait


def _busy(message: str, retry_after: int | None = None) -> ApiError:
    details = {"retryAfterSeconds": retry_after} if retry_after is not None else {}
    return ApiError(429, "TooManyRequests", message, {"details": details})


def test_a_read_turned_away_as_busy_is_retried_after_the_servers_hint_capped_at_two_seconds():
    assert _busy_wait(_busy("too many requests", 1), "GET") == 1.0
    assert _busy_wait(_busy("too many requests", 10), "GET") == 2.0


def test_a_write_is_retried_only_when_the_kinds_storage_is_reinitializing():
    assert _busy_wait(_busy("storage is (re)initializing"), "POST") == 1.0


def test_an_evictions_429_is_a_disruption_budgets_answer_and_is_not_retried():
    assert _busy_wait(_busy("Cannot evict pod as it would violate the pod's disruption budget.", 10), "POST") is None


def test_other_errors_are_not_retried():
    assert _busy_wait(ApiError(500, "InternalError", "storage is (re)initializing"), "GET") is None
    assert _busy_wait(ApiError(404, "NotFound", "not found"), "GET") is None


def test_only_a_connection_closed_before_any_answer_is_sent_again():
    import http.client

    import urllib3

    from dra_harness.kube.rest import _closed_before_answer

    idle_drop = urllib3.exceptions.ProtocolError("Connection aborted.", http.client.RemoteDisconnected("closed"))
    mid_answer = urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError(104, "reset"))
    assert _closed_before_answer(idle_drop) and not _closed_before_answer(mid_answer)
