"""A quote: a proposed change applied in memory to the served revision and judged as `plan` judges it.

The change edits the revision's environment file as data; the edited file is validated, rendered by
the program running here (the revision's own: snapshot.load refuses another) and compared, costed
and judged by the revision's policies through `plan.assess`, the pipeline `plan` runs. Nothing is
written anywhere but a temporary folder; the answer carries the edited file for a pull request.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml

from fleetops import plan
from fleetops.api import models
from fleetops.api.snapshot import Snapshot
from fleetops.errors import FleetopsError

QUOTE = "quote"  # the head side's revision: a change no commit holds yet


class ChangeError(FleetopsError):
    """A change that names what the revision does not have, or makes the environment invalid."""


def apply(data: dict[str, Any], changes: list[models.Change]) -> dict[str, Any]:
    """The environment file's data with `changes` made, in order; the served data is left as it is."""
    data = copy.deepcopy(data)
    for i, change in enumerate(changes):
        where = f"changes[{i}]"
        if isinstance(change, models.QuotaChange):
            tenant = _named(data.get("tenants"), change.tenant, f"{where}.tenant", "tenant")
            quota = tenant.setdefault("quota", {}).setdefault(change.resource, {"guaranteed": 0, "burst": 0})
            quota["guaranteed"] = quota.get("guaranteed", 0) + change.guaranteed
            quota["burst"] = quota.get("burst", 0) + change.burst
            for pool, delta in change.guaranteed_per_pool.items():
                shares = quota.get("guaranteed_per_pool")
                if not isinstance(shares, dict) or pool not in shares:
                    raise ChangeError(f"{where}.guaranteed_per_pool: {change.tenant}'s {change.resource} guarantee has no share in pool {pool!r}")
                shares[pool] += delta
        elif isinstance(change, models.NodesChange):
            cluster = _named(data.get("clusters"), change.cluster, f"{where}.cluster", "cluster")
            groups = [*(cluster.get("pools") or []), *(cluster.get("edge_groups") or [])]
            group = _named(groups, change.pool, f"{where}.pool", f"pool or edge group on {change.cluster}")
            group["nodes"] = group.get("nodes", 0) + change.delta
        elif isinstance(change, models.PoolChange):
            cluster = _named(data.get("clusters"), change.cluster, f"{where}.cluster", "cluster")
            cluster.setdefault("pools", []).append(copy.deepcopy(change.pool))
        else:
            data.setdefault("prices", {})[change.model] = change.per_device_hour
    return data


def _named(items: Any, name: str, where: str, what: str) -> dict[str, Any]:
    found = [item for item in items or [] if isinstance(item, dict) and item.get("name") == name]
    if not found:
        raise ChangeError(f"{where}: no {what} named {name!r} in the served revision")
    return found[0]


def text(data: dict[str, Any]) -> str:
    """The edited file as YAML; comments and layout of the original are not kept."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def quote(snapshot: Snapshot, request: models.QuoteRequest) -> dict[str, Any]:
    """plan's answer for the served revision as base and the changed environment as head. Raises
    ChangeError for a change the revision cannot take, PlanError for a head plan refuses."""
    assert snapshot.side.parsed is not None
    edited = text(apply(snapshot.side.parsed[0], request.changes))
    with tempfile.TemporaryDirectory(prefix="fleetops-quote-") as tmp:
        path = Path(tmp) / snapshot.env_rel
        path.parent.mkdir(parents=True)
        path.write_text(edited)
        try:
            head = plan.rendered_side(QUOTE, Path(tmp), snapshot.env_rel)
        except plan.PlanError as exc:
            raise ChangeError(str(exc)) from None
        head.tree = None  # its folder goes now; the plan reads nothing more of it
        result = plan.assess(snapshot.environment, snapshot.env_rel, snapshot.side, head, snapshot.tree, ([], []), {},
                             request.approvals, True, QUOTE)
    fields, objects = result.to_json(), result.objects
    return {"environment": snapshot.environment, "revision": snapshot.revision,
            **{k: fields[k] for k in ("verdict", "counts", "decisions", "capacity", "quota_changes", "cost")},
            "objects": {"added": len(objects.added), "removed": len(objects.removed), "changed": len(objects.changed)},
            "environment_file": edited}

