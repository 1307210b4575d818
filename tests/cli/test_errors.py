"""One error family: each kind its exit code, Kubernetes API errors told apart by status."""

from __future__ import annotations

import pytest

from fleetops import errors
from fleetops.cluster import ApiError


@pytest.mark.parametrize(("status", "reason", "kind", "retryable"), [
    (errors.TIMEOUT, "timed out", errors.Unanswered, True),
    (errors.UNREACHABLE, "not attempted", errors.Unreachable, False),
    (403, "Forbidden: nodes is forbidden", errors.Forbidden, False),
    (404, "NotFound: namespaces 'x' not found", errors.NotFound, False),
    (409, "Conflict: the object has been modified", errors.Conflict, True),
    (409, "Conflict: Apply failed with 1 conflict: conflict with \"kubectl\"", errors.Conflict, True),  # no cause: not a field conflict
    (422, "Invalid: spec.replicas", errors.ClientError, False),
    (429, "TooManyRequests", errors.TooManyRequests, True),
    (503, "ServiceUnavailable", errors.ServerError, True),
    (500, "InternalError: etcdserver: leader changed", errors.ServerError, True),
])
def test_an_api_error_is_the_kind_its_status_says_and_retried_only_when_a_retry_can_heal_it(
        status: int, reason: str, kind: type[errors.ApiError], retryable: bool) -> None:
    # What the reconciler's retries and the cluster client decide on: `except NotFound`, not `status == 404`.
    error = ApiError(status, reason)
    assert type(error) is kind and error.status == status and error.reason == reason
    assert error.retryable is retryable
    assert not error.field_conflict
    with pytest.raises(kind):
        raise error


def test_a_conflict_whose_cause_is_a_field_manager_is_a_field_conflict_and_not_retried() -> None:
    error = ApiError(409, "Conflict: Apply failed with 1 conflict", causes=(errors.FIELD_MANAGER_CONFLICT,))
    assert type(error) is errors.Conflict and error.field_conflict and not error.retryable


def test_a_fleetops_error_a_command_does_not_catch_ends_it_with_its_exit_code_in_one_line(tmp_path) -> None:
    from tests import command

    policies = tmp_path / "policies"
    policies.mkdir()
    done = command.run("policy", "test", "--policies", policies, cwd=tmp_path)
    assert (done.returncode, done.stderr.splitlines()) == (errors.ExitCode.BAD_INPUT, [f"{policies}: no .rego policies"])
    assert "Traceback" not in done.stderr
