"""Retries with backoff per API call, and the guard that stops calling a server that stopped answering."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tenacity

from fleetops.cluster import ClusterAPI
from fleetops.errors import UNREACHABLE, ApiError, Conflict, Forbidden, Unanswered
from fleetops.reconcile.options import Options

# --- retries --------------------------------------------------------------------------------


def _retryable(conflicts: bool) -> Callable[[BaseException], bool]:
    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, ApiError) and exc.retryable and (conflicts or not isinstance(exc, Conflict))

    return retryable


def _wait(opts: Options) -> Callable[[tenacity.RetryCallState], float]:
    jitter = tenacity.wait_exponential_jitter(multiplier=opts.backoff, max=opts.backoff_max, jitter=opts.backoff)

    def wait(state: tenacity.RetryCallState) -> float:
        # The server knows best how long to back off: Retry-After wins over our own schedule.
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            return min(exc.retry_after, opts.backoff_max)
        return jitter(state)

    return wait


def call(opts: Options, fn: Callable[..., Any], *args: Any, conflicts: bool = True) -> Any:
    """One API call with exponential backoff and jitter on 409/429/5xx/timeouts; other errors raise at once.

    `conflicts=False` for writes that carry a resourceVersion precondition or create a named object:
    sending the same body again cannot succeed, the next pass re-reads instead.
    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(opts.attempts),
        wait=_wait(opts),
        retry=tenacity.retry_if_exception(_retryable(conflicts)),
        sleep=opts.sleep,
        reraise=True,
    )
    return retrying(fn, *args)


RBAC_HINT = ("the reconciler's RBAC lacks it: modules/reconciler.py renders its ClusterRole from the revision's kinds, "
             "and an administrator applies a new one (pulumi up): the reconciler cannot grant itself permissions")


def explain(exc: ApiError) -> str:
    """An API error as the pass reports it; a refusal says where the missing permission comes from."""
    return f"{exc}; {RBAC_HINT}" if isinstance(exc, Forbidden) else str(exc)


class Guard:
    """A cluster's API for the length of one pass, which stops calling a server that stopped answering.

    After `threshold` transport failures in a row (refused, timed out), every further call fails at
    once with UNREACHABLE, which is never retried: a pass over a dead or unplugged cluster ends in
    seconds with one line, instead of a timeout and a retry schedule per object.
    """

    def __init__(self, api: ClusterAPI, threshold: int = 3):
        self.api, self.name, self.threshold = api, api.name, threshold
        self.failures = 0
        self.down: str | None = None  # why the server is taken for unreachable

    def __getattr__(self, verb: str) -> Any:
        fn = getattr(self.api, verb)
        if not callable(fn):
            return fn

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.down is not None:
                raise ApiError(UNREACHABLE, f"not attempted: the API server is unreachable ({self.down})")
            try:
                out = fn(*args, **kwargs)
            except Unanswered as exc:
                self.failures += 1
                if self.failures >= self.threshold:
                    self.down = exc.reason
                raise
            self.failures = 0
            return out

        return guarded
