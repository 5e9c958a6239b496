"""An API server away or busy for a while: asked again within a bound, and a test it never answered is not a FAIL."""

from __future__ import annotations

import pytest

from dra_harness.errors import LockLost
from dra_harness.kube import rest
from dra_harness.plugin.pytest_plugin import _api_away


def _flaky(errors: list[BaseException], answer: str = "done"):
    calls = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return answer

    return call, calls


def test_a_call_turned_away_for_a_moment_is_asked_again_until_it_is_answered():
    call, calls = _flaky([rest.Unreachable("refused"), rest.ApiError(429, "TooManyRequests", "slow down"),
                          rest.ApiError(503, "ServiceUnavailable", "starting")])
    assert rest.answered(call, within_s=5, every_s=0.01) == "done"
    assert len(calls) == 4


def test_negative_control_a_refusal_for_good_is_not_asked_again():
    call, calls = _flaky([rest.ApiError(403, "Forbidden", "no")])
    with pytest.raises(rest.ApiError):
        rest.answered(call, within_s=5, every_s=0.01)
    assert len(calls) == 1


def test_a_server_away_past_the_bound_gives_its_last_error():
    call, calls = _flaky([rest.Unreachable("refused")] * 100)
    with pytest.raises(rest.Unreachable):
        rest.answered(call, within_s=0.05, every_s=0.01)
    assert 2 <= len(calls) < 100


@pytest.mark.parametrize("error", [rest.Unreachable("API server https://x unreachable: NewConnectionError"),
                                   rest.ApiError(429, "TooManyRequests", "Too many requests, please try again later.")])
def test_a_request_the_server_never_took_ends_a_test_as_not_established(error):
    why = _api_away(error)
    assert why and why.startswith("the API server did not take the test's request")


@pytest.mark.parametrize("error", [rest.ApiError(500, "InternalError", 'failed calling webhook "gpu.example.com"'),
                                   rest.ApiError(403, "Forbidden", "cannot create pods"),
                                   LockLost("lost"), AssertionError("wrong device")])
def test_negative_control_a_webhook_failing_a_refusal_or_a_wrong_answer_is_no_server_away(error):
    """A driver's webhook that fails is answered 500: the product's, so it stays a FAIL."""
    assert _api_away(error) is None
