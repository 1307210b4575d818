"""What the fleet API answers, as pydantic models: FastAPI writes the OpenAPI 3.1 document from them.

Decisions and plans are the CLI's own JSON (fleetops/schemas/output.schema.json): their schemas
are that file's, placed among the document's components (`components`), never written twice.
"""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from fleetops import envelope, spec
from fleetops.metering.statements import Statement

PROBLEM_TYPE = "https://fleetops.dev/problems/"  # + a slug: the kind of error, for programs to branch on
# The CLI's output schema: its definitions become components; the whole envelope is `FleetopsOutput`.
OUTPUT = "FleetopsOutput"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def components() -> dict[str, Any]:
    """output.schema.json as OpenAPI components: each of its $defs, and the envelope, refs rewritten."""
    text = json.dumps(envelope.json_schema()).replace('"#/$defs/', '"#/components/schemas/')
    schema = json.loads(text)
    defs = schema.pop("$defs")
    for key in ("$schema", "$id"):
        schema.pop(key, None)
    return {**defs, OUTPUT: schema}


Decision = Annotated[dict[str, Any], WithJsonSchema(_ref("decision"))]
PlanDocument = Annotated[dict[str, Any], WithJsonSchema(_ref(OUTPUT))]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemDetails(BaseModel):
    """RFC 9457 problem details: every error the API answers, as application/problem+json."""

    model_config = ConfigDict(title="Problem")

    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    problems: list[str] = []  # for a quote the environment refuses: one line per problem, at its file, line and field


class Scope(StrEnum):
    OPERATOR = "operator"  # sees and quotes everything
    TENANT = "tenant"  # sees the fleet's capacity and prices, and its own quotas, use and statements


class ApiRevision(BaseModel):
    model_config = ConfigDict(title="Revision")

    environment: str
    revision: str
    etag: str
    fleetops_version: str
    scope: Scope
    tenant: str | None = None


class CapacityRow(BaseModel):
    """One pool (a Kueue ResourceFlavor) of a cluster and one device resource it offers."""

    cluster: str
    pool: str
    flavor: str
    resource: str
    model: str
    physical: float = Field(description="physical devices behind the units (a MIG-split GPU is shared between its profiles)")
    schedulable: int = Field(description="units pods may request, after time-slicing or MIG")
    guaranteed: int = Field(description="nominal quota the tenants' ClusterQueues hold in this flavor")
    reachable: int = Field(description="the most one tenant may hold here with nothing else running (guarantee plus burst)")
    free_to_lend: int = Field(description="what the cluster's cohort holds here for any tenant to borrow")


class Price(BaseModel):
    model: str
    per_device_hour: float


class Prices(BaseModel):
    currency: str
    monthly_budget: float
    monthly_cost: float
    prices: list[Price]


class ApiGrant(BaseModel):
    """What Kueue grants a tenant of one resource on one cluster, read from the rendered queues."""

    model_config = ConfigDict(title="Grant")

    cluster: str
    guaranteed: int
    reachable: int
    lends: int


class TenantQuota(BaseModel):
    resource: str
    guaranteed: int
    burst: int
    granted: list[ApiGrant]


class ApiTenant(BaseModel):
    model_config = ConfigDict(title="Tenant")

    name: str
    clusters: list[str]
    workloads: list[str]
    priority_classes: list[str]
    quotas: list[TenantQuota]


class Decisions(BaseModel):
    environment: str
    revision: str
    counts: dict[str, int]
    decisions: list[Decision]


class StatusState(StrEnum):
    REPORTED = "reported"  # the reconciler's status ConfigMap, as it wrote it
    NONE = "none"  # no status yet: no reconciler has passed there
    UNREACHABLE = "unreachable"  # the cluster's API server did not answer this server


class ClusterStatus(BaseModel):
    cluster: str
    state: StatusState
    revision: str | None = None
    result: str | None = None  # the reconciler's `Recorded`: ok, errors, denied, invalid
    message: str | None = None
    serving_revision: bool = Field(False, description="the cluster applied the revision this API serves")


# --- quotes -------------------------------------------------------------------------------------


class QuotaChange(Strict):
    """More (or less) of a tenant's quota of one device resource, on every cluster it is placed on: each field is
    a delta, added to what the served file holds (the quote's `quota_changes` say the values before and after)."""

    op: Literal["quota"]
    tenant: spec.Name
    resource: spec.ResourceName
    guaranteed_delta: int = Field(0, ge=-spec.MAX_COUNT, le=spec.MAX_COUNT, description="added to the guarantee (negative: taken off)")
    burst_delta: int = Field(0, ge=-spec.MAX_COUNT, le=spec.MAX_COUNT, description="added to the burst (negative: taken off)")
    guaranteed_per_pool_delta: dict[spec.Name, Annotated[int, Field(ge=-spec.MAX_COUNT, le=spec.MAX_COUNT)]] = Field(
        default={}, max_length=64, description="added to the guarantee's share of each pool, where the tenant splits it")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        # They were named `guaranteed`, `burst` and `guaranteed_per_pool`, read as the new values by some clients.
        for old in ("guaranteed", "burst", "guaranteed_per_pool"):
            if isinstance(data, dict) and old in data:
                raise ValueError(f"{old} is now {old}_delta: the amount added to the served file's {old}, not the value")
        return data


class NodesChange(Strict):
    """More (or fewer) nodes in a pool or edge group."""

    op: Literal["nodes"]
    cluster: spec.Name
    pool: spec.Name
    delta: int = Field(ge=-spec.MAX_COUNT, le=spec.MAX_COUNT)


class PoolChange(Strict):
    """A new pool on a cluster, written as the environment file writes one."""

    op: Literal["add_pool"]
    cluster: spec.Name
    pool: dict[str, Any] = Field(description="a pool as in environments/<env>.yaml: name, device, nodes, sharing, ...")


class PriceChange(Strict):
    op: Literal["price"]
    model: str = Field(min_length=1, max_length=128)
    per_device_hour: float = Field(ge=0, le=1e9)


Change = Annotated[QuotaChange | NodesChange | PoolChange | PriceChange, Field(discriminator="op")]


class QuoteRequest(Strict):
    changes: list[Change] = Field(min_length=1, max_length=32)
    approvals: int = Field(0, ge=0, le=100, description="approvals the change would have, as plan's --approvals")


class ApiCost(BaseModel):
    model_config = ConfigDict(title="Cost")

    before: float
    after: float
    delta: float
    from_prices: float = Field(description="what the change's price edits alone do to the month (plan's cost.from_prices)")
    from_capacity: float = Field(description="the rest of delta: devices added or removed, at the base's prices")
    currency: str


class Quote(BaseModel):
    """What `plan` would say of the change against the served revision; nothing is written anywhere."""

    environment: str
    revision: str
    verdict: Literal["allowed", "needs-approval", "denied"]
    counts: dict[str, int]
    decisions: list[Decision]
    capacity: list[dict[str, Any]] = Field(description="per cluster and resource, before and after (plan's `capacity`)")
    quota_changes: list[dict[str, Any]]
    cost: ApiCost
    objects: dict[str, int] = Field(description="objects added, removed and changed")
    environment_file: str = Field(description="the repository's environment file with the change made in place, comments and "
                                  "layout kept: what a pull request would hold; the decisions' lines are its lines")
    patch: str = Field(description="the change as a unified diff of the repository's environment file (`git apply` takes it)")


class UseRow(BaseModel):
    """A tenant's device-hours on one cluster, pool and device resource in a period, and what they cost."""

    cluster: str
    pool: str
    resource: str
    device_model: str
    device_hours: float
    spend: float = Field(description="device-hours x the pool's price per device-hour, in `currency`")


class Use(BaseModel):
    """A tenant's use in a period: its statement's lines, without the billing (top-ups, balance)."""

    tenant: str
    period: str = Field(description="the calendar month, UTC (YYYY-MM); the current one is the month to date")
    currency: str
    use: list[UseRow]
    spend: float

    @classmethod
    def of(cls, statement: Statement) -> Use:
        return cls(tenant=statement.tenant, period=statement.period, currency=statement.currency, spend=statement.total,
                   use=[UseRow(cluster=line.cluster, pool=line.pool, resource=line.resource, device_model=line.device_model,
                               device_hours=line.device_hours, spend=line.amount) for line in statement.lines])


def with_components(document: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(document)
    document.setdefault("components", {}).setdefault("schemas", {}).update(components())
    return _wire_names(document)


def _wire_names(document: dict[str, Any]) -> dict[str, Any]:
    """The models named apart from the fleet's own (`ApiTenant` beside `spec.Tenant`) keep their published
    names: each is its title (`model_config`) in the document, as clients have always read it."""
    renamed = {cls.__name__: title for cls in BaseModel.__subclasses__() if cls.__module__ == __name__
               and (title := cls.model_config.get("title")) and title != cls.__name__}
    text = json.dumps(document)
    for name, title in renamed.items():
        text = text.replace(f'"#/components/schemas/{name}"', f'"#/components/schemas/{title}"')
    document = json.loads(text)
    schemas = document["components"]["schemas"]
    document["components"]["schemas"] = {renamed.get(key, key): schema for key, schema in schemas.items()}
    return document
