"""Waivers: policies/waivers.yaml, each entry validated on its own, and the decisions they suspend."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from fleetops import spec
from fleetops.errors import PolicyError, Problem
from fleetops.policy.bundle import read_text
from fleetops.policy.decisions import Decision
from fleetops.policy.facts import StrictModel

MAX_WAIVER_DAYS = 90


class WaiverScope(StrictModel):
    environment: str = Field(min_length=1)
    cluster: str | None = None
    tenant: str | None = None
    resource: str | None = None  # "Kind/name" or "Kind/namespace/name", as decisions show it


class Waiver(StrictModel):
    rule: str = Field(pattern=r"^[a-z_]+\.[a-z_]+$")
    scope: WaiverScope
    owner: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    ticket: str = Field(min_length=1)
    created: dt.date
    expires: dt.date
    # The decision's figures when it was accepted (`figures` of `check --output json`): the waiver waives
    # that breach only, not a larger or different one of the same rule and scope.
    accepted: dict[str, int | float | str | bool] | None = None

    @field_validator("created", "expires", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError(f"must be a date YYYY-MM-DD, got {value!r}")

    @model_validator(mode="after")
    def _window(self) -> Waiver:
        days = (self.expires - self.created).days
        if days < 0:
            raise ValueError(f"expires {self.expires} is before created {self.created}")
        if days > MAX_WAIVER_DAYS:
            raise ValueError(f"expires {days} days after created, at most {MAX_WAIVER_DAYS} allowed")
        return self

    def matches(self, environment: str, decision: Decision) -> bool:
        s = self.scope
        return (
            self.rule == decision.rule
            and s.environment == environment
            and s.cluster in (None, decision.resource.get("cluster"))
            and s.tenant in (None, decision.resource.get("tenant"))
            and s.resource in (None, decision.resource_ref(with_cluster=False))
        )


@dataclass(frozen=True)
class LoadedWaiver:
    waiver: Waiver
    file: str
    line: int

    @property
    def where(self) -> str:
        """`file:line`: what a decision it waives says (`waived_by`)."""
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Waivers:
    active: list[LoadedWaiver]
    problems: list[Problem]  # expired or malformed entries, each at its place; they waive nothing


@dataclass(frozen=True)
class WaiverEntry:
    """One entry of waivers.yaml as written: the waiver it makes, or why it makes none."""

    index: int
    raw: Any
    waiver: Waiver | None
    errors: list[tuple[spec.Loc, str]]  # (path within the entry, message) when it is not a waiver


def read_waivers(path: Path) -> tuple[list[WaiverEntry], spec.Positions | None]:
    """Every entry of the waivers file, each validated on its own; the file's positions place them.
    The gate (`load_waivers`) and the audit read waivers through here, so both judge an entry alike."""
    if not path.is_file():
        return [], None
    try:
        # Named as in the repository (policies/waivers.yaml), whatever the working folder: decisions cite it.
        tree, positions = spec.parse_yaml(read_text(path), f"{path.parent.name}/{path.name}")
    except spec.SpecError as exc:
        raise PolicyError(problems=exc.problems[:1]) from None
    if tree is None:
        return [], positions
    entries = tree.get("waivers") if isinstance(tree, dict) else None
    if not isinstance(entries, list):
        raise PolicyError(problems=[positions.error((), "want a mapping with a 'waivers' list")])
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(WaiverEntry(i, entry, Waiver.model_validate(entry), []))
        except ValidationError as exc:
            errors = [(tuple(err["loc"]), "required field is missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, "))
                      for err in exc.errors(include_url=False)]
            out.append(WaiverEntry(i, entry, None, errors))
    return out, positions


def load_waivers(path: Path, today: dt.date) -> Waivers:
    """Each entry is validated on its own: a bad or expired waiver is reported and waives nothing."""
    entries, positions = read_waivers(path)
    active, problems = [], []
    for entry in entries:
        assert positions is not None  # entries come from a file, so it has positions
        at = ("waivers", entry.index)
        waiver = entry.waiver
        if waiver is None:
            problems.extend(positions.error((*at, *loc), msg) for loc, msg in entry.errors)
        elif waiver.created > today:
            # A waiver dated ahead would waive now and for longer than the 90 days its dates show.
            problems.append(positions.error((*at, "created"), f"waiver of {waiver.rule} is created in the future ({waiver.created})"))
        elif waiver.expires < today:
            problems.append(positions.error(at, f"waiver of {waiver.rule} expired on {waiver.expires} (owner {waiver.owner}, {waiver.ticket})"))
        else:
            line, _ = positions.at(at)
            active.append(LoadedWaiver(waiver, positions.file, line))
    return Waivers(active, problems)


def _figures(figures: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in figures.items())


def review(waiver: LoadedWaiver, decision: Decision) -> str | None:
    """Why `waiver`, matching `decision` by rule and scope, does not waive it, or None when it does. A
    waiver is bound to the figures it accepted: a decision stating other ones (a larger share, a pool
    shrunk under the same share) is a breach nobody accepted. A waiver that recorded none is bound by
    its rule and scope alone."""
    accepted, now = waiver.waiver.accepted, decision.figures
    if accepted is None:  # bound by scope alone, as before figures were recorded
        return None
    if all(now.get(k) == v for k, v in accepted.items()):
        return None
    current = {k: now.get(k, "unknown") for k in accepted}
    return f"waived at {_figures(accepted)} ({waiver.where}); now {_figures(current)}: needs review"


def apply_waivers(decisions: list[Decision], environment: str, waivers: list[LoadedWaiver]) -> list[Decision]:
    """Each decision waived by the first waiver that matches it and accepted its figures; one that
    matches but accepted other figures leaves it standing, its message saying so."""
    out = []
    for d in decisions:
        matches = [w for w in waivers if w.waiver.matches(environment, d)]
        notes = [review(w, d) for w in matches]
        waiver = next((w for w, note in zip(matches, notes) if note is None), None)
        if waiver is not None:
            out.append(Decision(**{**d.__dict__, "waived_by": waiver.where}))
        elif matches:
            out.append(Decision(**{**d.__dict__, "msg": f"{d.msg} ({notes[0]})"}))
        else:
            out.append(d)
    return out
