"""Decisions as SARIF 2.1.0, for GitHub code scanning (`check` and `plan --output sarif`): one result per
unwaived deny, approval or warning, its ruleId the rule's id, at the place of the environment file the decision
is about when it has one (the plan's decisions do), else on the environment file itself; each rule in
`tool.driver.rules`, with its METADATA title and description where the policies are at hand (`check`), else
the title its decisions carry (the plan's, which `explain` gave them from the base's policies).

Validated against the published schema (tests/schemas/sarif-schema-2.1.0.json)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fleetops import __version__
from fleetops.envelope import DecisionStatus

if TYPE_CHECKING:
    from fleetops.policy.bundle import RuleMeta

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {DecisionStatus.DENY: "error", DecisionStatus.APPROVAL: "error", DecisionStatus.WARN: "warning"}


def _rule(rule_id: str, meta: RuleMeta | None, title: str) -> dict[str, Any]:
    if meta is None:
        return {"id": rule_id, "name": rule_id, "shortDescription": {"text": title}} if title else {"id": rule_id}
    described = {"fullDescription": {"text": meta.description}} if meta.description else {}
    return {"id": rule_id, "name": rule_id, "shortDescription": {"text": meta.title or rule_id}, **described,
            "properties": {"severity": str(meta.severity), **({"control_id": meta.control_id} if meta.control_id else {})}}


def _location(row: dict[str, Any], file: str) -> dict[str, Any]:
    place = row.get("location")
    physical: dict[str, Any] = {"artifactLocation": {"uri": place["file"] if place else file}}
    if place and place.get("line", 0) >= 1:
        physical["region"] = {"startLine": place["line"], **({"startColumn": place["column"]} if place.get("column", 0) >= 1 else {})}
    return {"physicalLocation": physical}


def render(rows: Sequence[dict[str, Any]], file: str, metadata: Iterable[RuleMeta] = ()) -> str:
    """A SARIF log of the decision `rows` (the published decision shape); `file` is the environment file,
    where a decision without a place of its own is put."""
    known = {m.rule_id: m for m in metadata}
    flagged = [r for r in rows if DecisionStatus(r["status"]) in LEVEL]
    ids = list(dict.fromkeys([*known, *(r["rule"] for r in flagged)]))
    index = {rule_id: i for i, rule_id in enumerate(ids)}
    titles = {r["rule"]: r["title"] for r in flagged if r.get("title")}
    results = [{"ruleId": r["rule"], "ruleIndex": index[r["rule"]], "level": LEVEL[DecisionStatus(r["status"])],
                "message": {"text": f"{r['resource']}: {r['msg']}" if r.get("resource") else r["msg"]},
                "locations": [_location(r, file)]} for r in flagged]
    log = {"$schema": SCHEMA, "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "fleetops", "version": __version__,
                                         "rules": [_rule(i, known.get(i), titles.get(i, "")) for i in ids]}},
                     "results": results}]}
    return json.dumps(log, indent=2) + "\n"
