"""fleetops's errors: one family, each kind with the exit code a command ends with.

Every error a command can meet is a `FleetopsError`: the CLI prints it (one line per problem) and
exits with its `exit_code`, in one place (`fleetops.cli.main`), never with a traceback. Commands
that say more (the plan's forms, "failing closed") catch their own kinds first.

Kubernetes API errors are told apart by their class, chosen by HTTP status when one is made (as
kopf's `APINotFoundError`, `APIConflictError`, ... are): `except NotFound`, not `status == 404`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar


class ExitCode(IntEnum):
    OK = 0
    DENIED = 1  # what was judged is wrong: a policy denied it, drift is left, a test or a write failed
    BAD_INPUT = 2  # the command could not judge: bad input or usage, or no decision could be made


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input and where it is, made where it is found: its fields travel as
    fields (the JSON envelope, annotations) and `str` gives the line a person reads,
    `file:line:col: path: message` (`file:line: message` without a column or path, `file: message` without
    a line; the message alone without a file)."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    path: str | None = None  # the field in the file, as `spec.format_loc` writes it

    @property
    def place(self) -> str | None:
        """`file:line:col`, as much of it as is known; None without a file."""
        return None if self.file is None else self.file + "".join(f":{n}" for n in (self.line, self.column) if n)

    def __str__(self) -> str:
        if self.place is None:
            return self.message
        return f"{self.place}: {self.path + ': ' if self.path else ''}{self.message}"

    def fields(self) -> dict[str, Any]:
        """The published shape of a problem (`$defs/problem` of fleetops/schemas/output.schema.json)."""
        return {"file": self.file, "line": self.line, "column": self.column, "path": self.path, "message": self.message}


class FleetopsError(Exception):
    """An error a command reports as its problems, one line each, and ends with `exit_code`. An error
    made of problems found in a file carries them (`problems=`), their places as fields; any other's
    problems are its lines, each without a place."""

    exit_code: ClassVar[ExitCode] = ExitCode.BAD_INPUT

    def __init__(self, *args: object, problems: Sequence[Problem] = ()) -> None:
        super().__init__(*(args or ("\n".join(map(str, problems)),)))
        self._problems = list(problems)

    @property
    def problems(self) -> list[Problem]:
        return self._problems or [Problem(line) for line in self.lines]

    @property
    def lines(self) -> list[str]:
        """What a command prints of it: one line per problem."""
        return [str(p) for p in self._problems] or str(self).splitlines() or [type(self).__name__]


# What a failed HTTP request's exception says, in a few words: urllib3 and requests nest reprs that name the
# connection pool, the retries and the whole request path (and, in a URL given with them, its credentials).
_CONNECTION_FAILURES = (
    ("Connection refused", "connection refused"), ("ConnectTimeout", "no connection in time"), ("timed out", "timed out"),
    ("Name or service not known", "host name not found"), ("NameResolution", "host name not found"),
    ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"), ("SSLError", "TLS handshake failed"),
    ("too many 5", "the server kept failing (HTTP 5xx)"), ("RemoteDisconnected", "the server closed the connection"),
)


def connection_failure(exc: BaseException) -> str | None:
    """Why a request to a server got no answer (connection refused, timed out, ...), or None when `exc` is no such failure."""
    text = f"{type(exc).__name__} {exc}"
    return next((reason for marker, reason in _CONNECTION_FAILURES if marker in text), None)


class SpecError(FleetopsError):
    """One or more problems in an environment file, each where it was found."""

    def __init__(self, problems: Sequence[Problem]):
        super().__init__(str(problems[0]) if problems else "invalid environment", problems=problems)


class RenderError(FleetopsError):
    """The program could not be rendered: it raised, or it broke a rule the real engine enforces."""


class PlanError(FleetopsError):
    """Bad input: an unknown revision, an invalid environment at head, a side that cannot render."""


class UnknownEnvironment(PlanError):
    """`--env` names an environment at neither revision: a typo said in one line with the names there are, not a
    change that cannot be judged (no review comment is made of it)."""


class IsolationError(FleetopsError):
    """The side could not be rendered in isolation: no sandbox, a crash, a bound hit, or an answer that is not data."""


class PolicyError(FleetopsError):
    """The gate could not decide: bad policy, bad input, engine failure or timeout. Callers fail closed."""


class GitError(FleetopsError):
    """A git command failed: no repository, an unknown revision."""


class WhatifError(FleetopsError):
    """A replay could not be made: a bad trace, a missing server, or Kueue that did not settle."""


class ForgeError(FleetopsError):
    """The forge could not be asked: no token, no pull request, an HTTP error."""


class KubeconfigError(FleetopsError):
    """A kubeconfig (or the pod's service account) that cannot be used: no such file, or one the client cannot
    load (no such context, not YAML). Bad input: no call was made, so it is no API error and no retry heals it."""


# --- the Kubernetes API ---------------------------------------------------------------------------

# The status of an error that has none from a server. Kept as numbers for the reconciler's metrics
# and status records; code tells the kinds apart by class (`Unanswered`, `Unreachable`).
TIMEOUT = 0  # a timeout or a broken connection
UNREACHABLE = -1  # a call not made: the server stopped answering earlier (never retried)


FIELD_MANAGER_CONFLICT = "FieldManagerConflict"  # metav1.CauseTypeFieldManagerConflict


class ApiError(FleetopsError):
    """An API call that failed: HTTP status (0 for timeouts), reason, the server's Retry-After, and
    the types of the causes in the server's Status (`details.causes[].reason`, e.g. FieldManagerConflict).

    `ApiError(status, reason)` makes the subclass of that status: `ApiError(404, ...)` is a `NotFound`."""

    exit_code = ExitCode.DENIED  # a reconcile pass whose calls failed left the fleet unlike Git
    retryable_kind: ClassVar[bool] = False

    def __new__(cls, status: int, reason: str, retry_after: float | None = None, causes: tuple[str, ...] = ()) -> ApiError:
        if cls is ApiError:
            cls = _kind_of(status)
        return super().__new__(cls, status, reason, retry_after)

    def __init__(self, status: int, reason: str, retry_after: float | None = None, causes: tuple[str, ...] = ()):
        super().__init__(f"{status} {reason}" if status > 0 else reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.causes = causes

    @property
    def retryable(self) -> bool:
        return self.retryable_kind

    @property
    def field_conflict(self) -> bool:
        """A server-side apply refused because another field manager owns a field it sends."""
        return False


class Unanswered(ApiError):
    """No answer: a timeout or a broken connection (status TIMEOUT)."""

    retryable_kind = True


class Unreachable(ApiError):
    """Not attempted: the server stopped answering earlier in the pass (status UNREACHABLE)."""


class ClientError(ApiError):
    """The server refused the request (4xx)."""


class Forbidden(ClientError):
    """403: the credentials may not do this (RBAC)."""


class NotFound(ClientError):
    """404: no such object, namespace, or kind (its CRD is not installed)."""


class Conflict(ClientError):
    """409: a stale write, an object that already exists, or fields another manager owns."""

    @property
    def retryable(self) -> bool:
        return not self.field_conflict  # sending the same apply again cannot take a field another manager owns

    @property
    def field_conflict(self) -> bool:
        # The API server names each field another manager owns as a cause of this type in its Status.
        return FIELD_MANAGER_CONFLICT in self.causes


class TooManyRequests(ClientError):
    """429: the server asks to be called later (Retry-After)."""

    retryable_kind = True


class ServerError(ApiError):
    """5xx: the server failed."""

    @property
    def retryable(self) -> bool:
        return self.status in (500, 502, 503, 504)


class Untypable(ServerError):
    """500 to a server-side apply of an object the kind's schema cannot type (a field it lacks): sending it
    again cannot heal it. Kubernetes gives this error no reason and no cause (metav1.StatusReasonUnknown,
    as for any error its storage did not type), so the cluster client knows it by its message, once,
    where it reads the server's Status (`fleetops.cluster`)."""

    @property
    def retryable(self) -> bool:
        return False


_BY_STATUS: dict[int, type[ApiError]] = {
    TIMEOUT: Unanswered, UNREACHABLE: Unreachable, 403: Forbidden, 404: NotFound, 409: Conflict, 429: TooManyRequests,
}


def _kind_of(status: int) -> type[ApiError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return ClientError if status >= 400 else ApiError
