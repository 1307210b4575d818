"""The fleet API's `why` and `standing`: the answers of `fleetops why` and `fleetops standing`, live.

`GET /v1/tenants/{name}/why?cluster=C[&job=NAME]` answers each pending job of the tenant (or one job) on
its clusters; `GET /v1/tenants/{name}/standing[?cluster=C]` its standing. A tenant token asks of its own
tenant only (403 otherwise), and its answers are made for it: other tenants' names, jobs and use never
appear in them (the pool's free units do, as Kueue's own message on the job says them).

A remedy that is a change of the environment file (a tenant's quota, a pool's nodes) carries its quote request;
here it is also judged, as `POST /v1/quotes` judges it (`quoted`): `fleetops.why` sits below the API and plan and
cannot render or judge, so the route composes the two. Each distinct change is judged once per question, at most
MAX_QUOTES of them (each renders and judges the fleet). A tenant token sees the verdict and the cost's change only:
the decisions and capacity of a quote speak of the whole fleet. `standing`'s minutes below guarantee come from the
server's `--prometheus` (metering's history), unknown without it.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.
import json
import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Response
from pydantic import WithJsonSchema

from fleetops import spec
from fleetops.api import models, quote as quote_mod
from fleetops.api.auth import Principal
from fleetops.api.snapshot import Snapshot
from fleetops.cluster import ClusterAPI
from fleetops.errors import FleetopsError
from fleetops.prometheus import Prometheus
from fleetops.usage import Window, parse_window
from fleetops.why import answer as why_answer, history, live as why_live, standing as why_standing
from fleetops.why.jobs import select

log = logging.getLogger("fleetops.api")
MAX_QUOTES = 3  # distinct changes judged per question: each renders and judges the fleet, seconds of CPU
HISTORY = parse_window("24h")  # how far back `standing` counts the minutes below guarantee
Connect = Callable[[spec.Cluster], ClusterAPI | None]
UNREADABLE = {"503": {"description": "the cluster could not be read (never an empty answer)",
                      "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}}


def _document(field: str, item: str) -> Any:
    """A route's answer: the environment, revision and tenant, and `field`, a list of the CLI's own `item` (output.schema.json)."""
    return Annotated[dict[str, Any], WithJsonSchema({
        "type": "object", "required": ["environment", "revision", "tenant", field],
        "properties": {"environment": {"type": "string"}, "revision": {"type": "string"}, "tenant": {"type": "string"},
                       field: {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}}}})]


WhyDocument = _document("answers", "why_answer")
StandingDocument = _document("standing", "standing_row")


def quoted(snapshot: Snapshot, request: dict[str, Any], viewer: str | None, prometheus: Prometheus | None) -> dict[str, Any]:
    """A remedy's change judged as `POST /v1/quotes` judges it (its use measured on `prometheus`): the operator sees the verdict, decisions, quota changes,
    objects and cost; a tenant (`viewer`) the verdict and the cost's change only. A change the revision refuses is said so."""
    try:
        judged = quote_mod.quote(snapshot, models.QuoteRequest.model_validate(request), prometheus)
    except FleetopsError as exc:
        return {"verdict": None, "refused": exc.lines[0]}
    if viewer is not None:
        cost = judged["cost"]
        return {"verdict": judged["verdict"], "cost": {"delta": cost["delta"], "currency": cost["currency"]}}
    return {k: judged[k] for k in ("verdict", "counts", "decisions", "quota_changes", "objects", "cost")}


def quote_remedies(snapshot: Snapshot, answers: list[dict[str, Any]], viewer: str | None, prometheus: Prometheus | None) -> None:
    """Each remedy's quote request of `answers` judged in place (`quoted`), each distinct change once, at most MAX_QUOTES."""
    judged: dict[str, dict[str, Any]] = {}
    for remedy in (r for a in answers for r in a["remedies"] if r["quote"] is not None):
        key = json.dumps(remedy["quote"], sort_keys=True)
        if key not in judged:
            judged[key] = (quoted(snapshot, remedy["quote"], viewer, prometheus) if len(judged) < MAX_QUOTES else
                           {"verdict": None, "refused": f"not judged: more than {MAX_QUOTES} changes in one answer (POST /v1/quotes judges it)"})
        remedy["quoted"] = judged[key]


def register(app: FastAPI, current: Callable[[], Snapshot], who: Any, visible_tenant: Callable[..., spec.Tenant],
             connect: Connect, problem: Callable[..., Exception], prometheus: Prometheus | None = None, window: Window = HISTORY) -> None:
    """Add the routes to `app`: `who` is its dependency naming the token's principal, `visible_tenant` its check
    that the token may see the tenant, `problem(status, kind, detail)` its problem+json error; `prometheus` holds
    metering's history for `standing` (unknown without it)."""
    Who = Annotated[Principal, Depends(who)]

    def read(snapshot: Snapshot, tenant: spec.Tenant, cluster: str | None) -> list[tuple[spec.Document, spec.Cluster, why_live.Live]]:
        names = [cluster] if cluster else tenant.clusters
        if cluster is not None and cluster not in tenant.clusters:
            raise problem(404, "no-such-cluster", f"tenant {tenant.name} is not on cluster {cluster!r}")
        assert snapshot.side.parsed is not None
        document = spec.Document(snapshot.env, snapshot.side.parsed[0], snapshot.positions)
        out = []
        for name in names:
            found = spec.cluster_by_name(snapshot.env, name)
            try:
                api = connect(found)
                if api is None:
                    raise problem(503, "cluster-unreachable", f"{name} is not reachable from this server")
                out.append((document, found, why_live.read(api, snapshot.env, found, tenant.name)))
            except FleetopsError as exc:  # its line names the cluster and the call, never a credential
                log.warning("why: %s unreadable: %s", name, exc.lines[0])
                raise problem(503, "cluster-unreadable", exc.lines[0], {"Retry-After": "10"}) from None
        return out

    @app.get("/v1/tenants/{name}/why", response_model=WhyDocument, responses=UNREADABLE)
    def why(name: str, who: Who, response: Response, cluster: str | None = None,
            job: Annotated[str | None, Query(max_length=253, description="one job (its name) instead of every waiting one")] = None) -> dict[str, Any]:
        """Why the tenant's jobs wait, as `fleetops why --output json` answers: causes at the environment's lines,
        the tenant's own holdings, whether each can ever be admitted as asked, node-level causes, what would let it in."""
        response.headers["Cache-Control"] = "no-store"
        snapshot = current()
        tenant = visible_tenant(snapshot, name, who)
        viewer = who.tenant  # None for an operator: it sees every tenant's holdings
        answers = []
        for document, found, live in read(snapshot, tenant, cluster):
            answers += [a.to_dict() for a in why_answer.explain_all(document, found, live, select(live.jobs, tenant.name, job or None), viewer)]
        if job is not None and not answers:
            raise problem(404, "no-such-job", f"no Kueue Workload of job {job!r} of {tenant.name}")
        quote_remedies(snapshot, answers, viewer, prometheus)
        return {"environment": snapshot.environment, "revision": snapshot.revision, "tenant": tenant.name, "answers": answers}

    @app.get("/v1/tenants/{name}/standing", response_model=StandingDocument, responses=UNREADABLE)
    def standing(name: str, who: Who, response: Response, cluster: str | None = None) -> dict[str, Any]:
        """The tenant's guarantee, reachable burst, use, borrowing, lending and pending work per cluster and resource, live."""
        response.headers["Cache-Control"] = "no-store"
        snapshot = current()
        tenant = visible_tenant(snapshot, name, who)
        rows = []
        for document, found, live in read(snapshot, tenant, cluster):
            past = (lambda resource, c=found: history.measure(prometheus, snapshot.env, c, tenant.name, resource, window)) if prometheus else None
            try:
                rows += [r.to_dict() for r in why_standing.standing(why_answer.ClusterContext(document, found, live, tenant.name), tenant.name, past)]
            except FleetopsError as exc:  # Prometheus did not answer: no figure rather than a wrong one
                log.warning("standing: metering unreadable: %s", exc.lines[0])
                raise problem(503, "metering-unreadable", exc.lines[0], {"Retry-After": "10"}) from None
        return {"environment": snapshot.environment, "revision": snapshot.revision, "tenant": tenant.name, "standing": rows}
