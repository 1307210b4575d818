"""A quote: a proposed change applied in memory to the served revision and judged as `plan` judges it.

The change edits the revision's environment file in place (ruamel.yaml's round trip: its comments,
order, quoting and layout kept, only the changed values and added items differ); the edited file is
validated, rendered by the program running here (the revision's own: snapshot.load refuses another)
and compared, costed and judged by the revision's policies through `plan.assess`, the pipeline `plan`
runs, with the server's Prometheus as plan's `--prometheus`. Nothing is written anywhere but a
temporary folder; the answer carries the edited file and its unified diff against the repository's,
so the decisions' lines are the lines of the file a pull request would hold.
"""

from __future__ import annotations

import copy
import io
import tempfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

from fleetops import changes as file_changes, plan
from fleetops.api import models
from fleetops.api.snapshot import Snapshot
from fleetops.errors import FleetopsError
from fleetops.prometheus import Prometheus

QUOTE = "quote"  # the head side's revision: a change no commit holds yet


class ChangeError(FleetopsError):
    """A change that names what the revision does not have, or makes the environment invalid."""


def apply(data: dict[str, Any], changes: list[models.Change]) -> dict[str, Any]:
    """`data`, the environment file as read for this quote alone, with `changes` made in it, in order."""
    for i, change in enumerate(changes):
        where = f"changes[{i}]"
        if isinstance(change, models.QuotaChange):
            tenant = _named(data.get("tenants"), change.tenant, f"{where}.tenant", "tenant")
            quota = tenant.setdefault("quota", {}).setdefault(change.resource, {"guaranteed": 0, "burst": 0})
            quota["guaranteed"] = quota.get("guaranteed", 0) + change.guaranteed_delta
            quota["burst"] = quota.get("burst", 0) + change.burst_delta
            for pool, delta in change.guaranteed_per_pool_delta.items():
                shares = quota.get("guaranteed_per_pool")
                if not isinstance(shares, dict) or pool not in shares:
                    raise ChangeError(f"{where}.guaranteed_per_pool_delta: {change.tenant}'s {change.resource} guarantee has no share in pool {pool!r}")
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


def edit(original: str, file: str, changes: list[models.Change]) -> str:
    """`original`, the environment file's text, with `changes` made where they are: what is not changed keeps
    its bytes (comments, order, quoting, flow or block style), in the indentation the file uses."""
    writer = YAML()  # round trip
    writer.preserve_quotes = True
    writer.width = 1 << 16  # a long line stays one line
    try:
        data, indent, offset = load_yaml_guess_indent(original, yaml=writer)  # read once: the round trip is pure Python
        for mapping in dict.fromkeys((2, indent or 2)):  # a file indented alike throughout comes back byte for byte
            writer.indent(mapping=mapping, sequence=indent or 2, offset=offset or 0)
            if _dump(writer, data) == original:
                break
        return _dump(writer, apply(data, changes))
    except YAMLError as exc:  # PyYAML read the file: what ruamel.yaml cannot round-trip is said, never guessed
        raise ChangeError(f"{file}: cannot be edited keeping its layout: {str(exc).splitlines()[0]}") from None


def _dump(writer: YAML, data: Any) -> str:
    out = io.StringIO()
    writer.dump(data, out)
    return out.getvalue()


def quote(snapshot: Snapshot, request: models.QuoteRequest, prometheus: Prometheus | None = None) -> dict[str, Any]:
    """plan's answer for the served revision as base and the changed environment as head, the use of what it
    touches measured on `prometheus` (serve's). Raises ChangeError for a change the revision cannot take,
    PlanError for a head plan refuses."""
    original = (snapshot.tree / snapshot.env_rel).read_text()
    edited = edit(original, snapshot.env_rel, request.changes)
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
                             request.approvals, True, QUOTE, plan.Meter(prometheus))
    fields, objects = result.to_json(), result.objects
    return {"environment": snapshot.environment, "revision": snapshot.revision,
            **{k: fields[k] for k in ("verdict", "counts", "decisions", "capacity", "quota_changes", "cost")},
            "objects": {"added": len(objects.added), "removed": len(objects.removed), "changed": len(objects.changed)},
            "environment_file": edited, "patch": file_changes.file_diff(original, edited, snapshot.env_rel)}
