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

from fleetops.errors import PolicyError
from fleetops.envelope import decision_counts
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


def decision_record(source: str, environment: str, revision: str, judgement: Judgement, decisions: list[dict[str, Any]],
                    outcome: str, approvals: int | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one record every gate writes (check, plan, reconcile, the Pulumi policy pack) and audit reads:
    who judged what, with which policies, and what came out. Decisions and digests only, never the input."""
    return {
        "schema": RECORD_SCHEMA,
        "id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "environment": environment,
        "revision": revision,
        **ci_context(),
        "approvals": approvals,
        **judgement.to_json(),
        "verdict": outcome,
        "summary": decision_counts(decisions),
        "decisions": decisions,
        # A plan's measured use, or why it is unknown: a gate that could not measure says so.
        **({"usage": {k: usage[k] for k in ("status", "reason", "window")}} if usage is not None else {}),
    }


def verdict_record(verdict: Verdict, source: str) -> dict[str, Any]:
    return decision_record(source, verdict.environment, verdict.revision, verdict.judgement(),
                           report_rows(verdict), "allowed" if verdict.ok else "denied")


def log_decisions(path: Path, record: dict[str, Any]) -> None:
    """Append one decision record (`decision_record`) as a JSON line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=str) + "\n")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot write the decision log: {exc.strerror}") from None
