"""What a gate leaves behind: the decision log (one JSON line per judgement; its JUnit form is fleetops.output.junit's)."""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import json
import os
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fleetops.errors import PolicyError
from fleetops.envelope import DecisionStatus, decision_counts
from fleetops.policy.verdict import Judgement, Verdict, report_rows

DEFAULT_DECISION_LOG = Path(".fleetops") / "decisions.jsonl"


def decision_log_path(option: Path | None = None) -> Path:
    return option or Path(os.environ.get("FLEETOPS_DECISION_LOG") or DEFAULT_DECISION_LOG)


RECORD_SCHEMA = "fleetops.decision/v1"


def ci_context() -> dict[str, Any]:
    """The pull request and the actor, as the CI systems this project ships workflows for name them, and
    whether the run is a CI job's or a local one (`CI`, which GitHub Actions, GitLab and most CI systems
    set): audit reads a local plan as a preview on a workstation, never as a pull request."""
    ref = os.environ.get("GITHUB_REF", "")
    pr = (os.environ.get("FLEETOPS_PR") or os.environ.get("CI_MERGE_REQUEST_IID")
          or (ref.split("/")[2] if ref.startswith("refs/pull/") else ""))
    actor = os.environ.get("FLEETOPS_ACTOR") or os.environ.get("GITHUB_ACTOR") or os.environ.get("GITLAB_USER_LOGIN") or ""
    if not actor:
        with contextlib.suppress(Exception):  # no user database entry in a container: leave it empty
            actor = getpass.getuser()
    return {"pr": pr or None, "actor": actor or None, "run": "ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "local"}


class LoggedDecision(BaseModel):
    """One decision of a record: its rule, status and message, and whatever else the gate's report row holds
    (resource, severity, waiver...), written as it is and ignored by readers."""

    model_config = ConfigDict(extra="allow")
    rule: str
    status: DecisionStatus  # another word is not a decision record: audit lists its line as malformed
    msg: str = ""


class DecisionRecord(BaseModel):
    """The one record every gate writes (check, plan, reconcile) and audit reads: who judged what, with which
    policies, and what came out. Decisions and digests only, never the input. A reader needs `time` alone:
    records written before a field was added have its default."""

    model_config = ConfigDict(populate_by_name=True)
    schema_: str = Field("", alias="schema")
    id: str = ""
    time: str
    source: str = ""
    environment: str = ""
    revision: str | None = ""
    pr: str | int | None = None
    actor: str | None = None
    run: str | None = None  # "ci" or "local" (ci_context); records written before it have none
    approvals: int | None = None
    engine: str = ""
    policy_digest: str = ""
    input_digest: str = ""
    duration_seconds: float = 0.0
    waiver_problems: list[str] = []
    verdict: str = ""
    summary: dict[str, int] = {}
    decisions: list[LoggedDecision] = []
    # A plan's measured use, or why it is unknown: a gate that could not measure says so. Absent from other gates' records.
    usage: dict[str, Any] | None = None

    def line(self) -> str:
        """The record as one JSON line of the decision log."""
        record = self.model_dump(by_alias=True, exclude=None if self.usage is not None else {"usage"})
        return json.dumps(record, sort_keys=True, default=str) + "\n"


def decision_record(source: str, environment: str, revision: str, judgement: Judgement, decisions: list[dict[str, Any]],
                    outcome: str, approvals: int | None = None, usage: dict[str, Any] | None = None) -> DecisionRecord:
    """What a gate judged, as its record (`DecisionRecord`)."""
    return DecisionRecord(
        schema=RECORD_SCHEMA, id=uuid.uuid4().hex, time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        source=source, environment=environment, revision=revision, **ci_context(), approvals=approvals, **judgement.to_json(),
        verdict=outcome, summary=decision_counts(decisions), decisions=decisions,
        usage={k: usage[k] for k in ("status", "reason", "window")} if usage is not None else None,
    )


def verdict_record(verdict: Verdict, source: str) -> DecisionRecord:
    return decision_record(source, verdict.environment, verdict.revision, verdict.judgement(),
                           report_rows(verdict), "allowed" if verdict.ok else "denied")


def log_decisions(path: Path, record: DecisionRecord) -> None:
    """Append one decision record as a JSON line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(record.line())
    except OSError as exc:
        raise PolicyError(f"{path}: cannot write the decision log: {exc.strerror}") from None
