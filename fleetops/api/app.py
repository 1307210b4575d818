"""The fleet API's routes: read only, but for quotes, which write nothing either.

Every error is application/problem+json (RFC 9457), 404/405/413/422/429 included. Answers about the
revision carry an ETag (the revision and what the token may see) and are revalidated, never
stale: `If-None-Match` answers 304. The reconcile status is live, read from each cluster's status
ConfigMap (what the reconciler publishes) and kept a few seconds, so that many clients cost each
API server one read.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, some of them local names.
import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, NamedTuple

import limits
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope as AsgiScope, Send

from fleetops import __version__, spec
from fleetops.api import models, quote as quote_mod, why as why_routes
from fleetops.api.auth import Principal, Tokens
from fleetops.api.metering import TTL_SECONDS, StatementCache, MeteringBusy, this_month
from fleetops.api.models import Scope
from fleetops.api.snapshot import Snapshot
from fleetops.cluster import ClusterAPI
from fleetops.errors import FleetopsError
from fleetops.metering.statements import Idle, Period, Statement, StatementError, Statements
from fleetops.output import json as plan_json
from fleetops.plan_result import status_counts
from fleetops.prometheus import PrometheusError
from fleetops.reconcile.options import Options
from fleetops.reconcile.status import read_status

log = logging.getLogger("fleetops.api")
PROBLEM_JSON = "application/problem+json"
MAX_BODY_BYTES = 64 << 10  # a quote of 32 changes fits many times over
STATUS_TTL_SECONDS = 10.0
# Use moves with the minutes recorded: a client may keep an answer as long as the server keeps the period's statements.
METERED_CACHE = {"Cache-Control": f"private, max-age={int(TTL_SECONDS)}", "Vary": "Authorization"}


class HTTPProblem(HTTPException):
    """An error answered as problem+json: `kind` is the slug of its type URI."""

    def __init__(self, status: int, kind: str, detail: str, headers: dict[str, str] | None = None, problems: list[str] | None = None):
        super().__init__(status, detail, headers)
        self.kind, self.problems = kind, problems or []


class NotModified(Exception):
    def __init__(self, headers: dict[str, str]):
        self.headers = headers


def problem_response(status: int, kind: str, detail: str, headers: dict[str, str] | None = None,
                     problems: list[str] | None = None) -> JSONResponse:
    title = _TITLES.get(status, "error")
    body = models.ProblemDetails(type=models.PROBLEM_TYPE + kind, title=title, status=status, detail=detail, problems=problems or [])
    return JSONResponse(body.model_dump(), status_code=status, headers=headers, media_type=PROBLEM_JSON)


_TITLES = {400: "bad request", 401: "unauthorized", 403: "forbidden", 404: "not found", 405: "method not allowed",
           406: "not acceptable", 408: "request timeout", 413: "content too large", 415: "unsupported media type", 422: "unprocessable content",
           429: "too many requests", 500: "internal error", 503: "unavailable"}
_KINDS = {404: "not-found", 405: "method-not-allowed", 413: "too-large", 400: "bad-request"}


class BodyLimit:
    """Refuses a request body past `limit` bytes with 413: by its Content-Length before a byte is read,
    and while it streams when it has none (chunked); and one not whole within `seconds` of the request's
    head with 408 (a client sending a byte now and then holds a connection and a task)."""

    def __init__(self, app: ASGIApp, limit: int, seconds: float):
        self.app, self.limit, self.seconds = app, limit, seconds

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            response = problem_response(413, "too-large", f"a request body holds at most {self.limit} bytes")
            await response(scope, receive, send)
            return
        received, whole = 0, False
        ends = asyncio.get_running_loop().time() + self.seconds

        async def bounded() -> Message:
            nonlocal received, whole
            if whole:  # what follows the body (a disconnect) is waited for as long as the app likes
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), ends - asyncio.get_running_loop().time())
            except TimeoutError:
                raise HTTPProblem(408, "body-too-slow", f"a request body is sent whole within {self.seconds:g} s") from None
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            received += len(message.get("body", b""))
            if received > self.limit:  # FastAPI answers an HTTPException raised while it reads the body
                raise HTTPProblem(413, "too-large", f"a request body holds at most {self.limit} bytes")
            return message

        await self.app(scope, bounded, send)


class AccessLog:
    """One line per request: method, path, status, the token's name (never the token or any header), time."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [0]

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            log.info("%s %s %d %s %.1fms", scope["method"], scope["path"], status[0], scope.get("state", {}).get("who", "-"),
                     1000 * (time.perf_counter() - start))


@dataclass
class StatusReader:
    """Each cluster's reconcile status, read at most once per `ttl` seconds whatever the number of clients."""

    current: Callable[[], Snapshot]
    connect: Callable[[spec.Cluster], ClusterAPI | None]  # None: not reachable from where this server runs
    ttl: float = STATUS_TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _cached: tuple[float, list[models.ClusterStatus]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> list[models.ClusterStatus]:
        with self._lock:
            snapshot = self.current()
            if self._cached is None or self.clock() - self._cached[0] >= self.ttl:
                self._cached = (self.clock(), [self._read(snapshot, c) for c in snapshot.env.clusters])
            return self._cached[1]

    def _read(self, snapshot: Snapshot, cluster: spec.Cluster) -> models.ClusterStatus:
        opts = Options(namespace=snapshot.env.reconciler.namespace, attempts=1)
        try:
            api = self.connect(cluster)
            configmap = read_status(api, opts) if api is not None else None
        except Exception as exc:  # any failure of one cluster's API: said, never raised to the client
            log.warning("reconcile status of %s unreadable: %s", cluster.name, type(exc).__name__)
            return models.ClusterStatus(cluster=cluster.name, state=models.StatusState.UNREACHABLE, message=type(exc).__name__)
        if api is None:
            return models.ClusterStatus(cluster=cluster.name, state=models.StatusState.UNREACHABLE, message="not reachable from this server")
        if configmap is None:
            return models.ClusterStatus(cluster=cluster.name, state=models.StatusState.NONE)
        data = configmap.get("data") or {}
        revision = data.get("revision") or None
        return models.ClusterStatus(cluster=cluster.name, state=models.StatusState.REPORTED, revision=revision, result=data.get("result"),
                                    message=data.get("message"), serving_revision=revision == snapshot.revision)


class Seen(NamedTuple):
    """Who asks, and the snapshot the answer is made of (read once per request: a refresh mid-request changes nothing)."""

    who: Principal
    snapshot: Snapshot


def etag(snapshot: Snapshot, who: Principal) -> str:
    return f'"{snapshot.revision}-{who.key}"'


@dataclass(frozen=True)
class Settings:
    rate: str = "120/minute"  # per token, and per client address for requests without a valid token
    max_body_bytes: int = MAX_BODY_BYTES
    quotes_at_once: int = 2  # each renders and judges a fleet: more at once would only share the CPU and add up the memory
    metering_wait: float = 5.0  # seconds a request waits for its period's statements; then 503, the reading goes on
    body_seconds: float = 30.0  # for a request's body to arrive whole: 64 KiB takes well under a second


def _problem_doc(description: str) -> dict[str, Any]:
    return {"description": description, "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


ERRORS = {str(code): _problem_doc(_TITLES[code]) for code in (400, 401, 403, 404, 405, 413, 422, 429)}


def create_app(current: Callable[[], Snapshot], tokens: Tokens, status: Callable[[], list[models.ClusterStatus]],
               settings: Settings = Settings(), meter: StatementCache | None = None, clusters: why_routes.Connect | None = None) -> FastAPI:
    """The API of what `current()` returns: each request reads one snapshot, and its ETag is that snapshot's.
    Use and statements come from `meter`; without one they answer 404 metering-not-configured. `clusters` reaches
    each cluster for the live `why` and `standing` of a tenant (fleetops/api/why.py); without it they are not served."""
    app = FastAPI(title="fleetops fleet API", version=__version__, responses=ERRORS, docs_url=None, redoc_url=None,
                  description=f"The environment {current().environment} at one Git revision, read only.")
    rate = limits.parse(settings.rate)
    limiter = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    bearer = HTTPBearer(auto_error=False)
    quote_slots = threading.BoundedSemaphore(settings.quotes_at_once)

    def limited(key: str) -> None:
        if not limiter.hit(rate, key):
            reset = limiter.get_window_stats(rate, key).reset_time
            raise HTTPProblem(429, "rate-limited", f"more than {settings.rate} requests", {"Retry-After": str(max(1, int(reset - time.time()) + 1))})

    def principal(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        who = tokens.who(credentials.credentials) if credentials is not None else None
        if who is None:  # guesses count against the address they come from
            limited(f"address:{request.client.host if request.client else '-'}")
            raise HTTPProblem(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
        request.state.who = who.name
        limited(f"token:{who.name}")
        return who

    Who = Annotated[Principal, Depends(principal)]

    def operator(who: Who) -> Principal:
        if who.scope is not Scope.OPERATOR:
            raise HTTPProblem(403, "forbidden", "an operator token is required")
        return who

    Operator = Annotated[Principal, Depends(operator)]

    def revision_tag(request: Request, response: Response, who: Who) -> Seen:
        """The snapshot an answer is made of, and its ETag: it changes with the revision and with what the token sees."""
        snapshot = current()
        tag = etag(snapshot, who)
        headers = {"ETag": tag, "Cache-Control": "private, no-cache", "Vary": "Authorization"}
        wanted = {t.strip() for t in request.headers.get("if-none-match", "").split(",")}
        if tag in wanted or "*" in wanted:
            raise NotModified(headers)
        response.headers.update(headers)
        return Seen(who, snapshot)

    Tagged = Annotated[Seen, Depends(revision_tag)]

    def visible_tenant(snapshot: Snapshot, name: str, who: Principal) -> spec.Tenant:
        if not who.sees(name):
            raise HTTPProblem(403, "forbidden", f"this token sees tenant {who.tenant!r} only")
        tenant = snapshot.tenant(name)
        if tenant is None:
            raise HTTPProblem(404, "no-such-tenant", f"no tenant {name!r} in {snapshot.environment}")
        return tenant

    @app.exception_handler(NotModified)
    async def _not_modified(_: Request, exc: NotModified) -> Response:
        return Response(status_code=304, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        kind = exc.kind if isinstance(exc, HTTPProblem) else _KINDS.get(exc.status_code, "error")
        return problem_response(exc.status_code, kind, str(exc.detail), exc.headers, getattr(exc, "problems", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        # Where and what, never the input: a body may hold what does not belong in a response or a log.
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:20]]
        return problem_response(422, "invalid-request", lines[0] if lines else "invalid request", problems=lines)

    @app.exception_handler(Exception)
    async def _fault(_: Request, exc: Exception) -> Response:
        log.error("request failed: %s", type(exc).__name__)
        return problem_response(500, "internal", "the server failed; its log says how")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:  # on the event loop: answered even when every worker thread is busy
        return {"status": "ok"}

    @app.get("/v1/revision", response_model=models.ApiRevision)
    def revision(seen: Tagged) -> models.ApiRevision:
        """The revision served and what this token may see."""
        snapshot, who = seen.snapshot, seen.who
        return models.ApiRevision(environment=snapshot.environment, revision=snapshot.revision, etag=etag(snapshot, who),
                               fleetops_version=__version__, scope=who.scope, tenant=who.tenant)

    @app.get("/v1/capacity", response_model=list[models.CapacityRow])
    def capacity(seen: Tagged, cluster: str | None = None, pool: str | None = None, resource: str | None = None) -> list[dict[str, Any]]:
        """Per cluster, pool (Kueue flavor) and device resource: physical, schedulable, guaranteed, reachable burst, free to lend."""
        wanted = {"cluster": cluster, "pool": pool, "resource": resource}
        return [r for r in seen.snapshot.capacity if all(v is None or r[k] == v for k, v in wanted.items())]

    @app.get("/v1/prices", response_model=models.Prices)
    def prices(seen: Tagged) -> models.Prices:
        """Price per device-hour of each model, the budget and the fleet's monthly cost."""
        env = seen.snapshot.env
        return models.Prices(currency=env.budget.currency, monthly_budget=env.budget.monthly, monthly_cost=spec.monthly_cost(env),
                             prices=[models.Price(model=m, per_device_hour=p) for m, p in sorted(env.prices.items())])

    @app.get("/v1/tenants", response_model=list[models.ApiTenant])
    def tenants(seen: Tagged) -> list[models.ApiTenant]:
        """Tenants and their quotas, with what Kueue grants them per cluster; a tenant token sees its own."""
        return [_tenant(seen.snapshot, t) for t in seen.snapshot.env.tenants if seen.who.sees(t.name)]

    @app.get("/v1/tenants/{name}", response_model=models.ApiTenant)
    def tenant(name: str, seen: Tagged) -> models.ApiTenant:
        return _tenant(seen.snapshot, visible_tenant(seen.snapshot, name, seen.who))

    async def read_period(period: str | None) -> Statements:
        """Every tenant's statements for the period (default: the month to date) from metering, or why there are none.
        Awaited on the event loop, never in a worker thread: a slow Prometheus holds no thread another route needs."""
        snapshot = current()
        if meter is None:
            raise HTTPProblem(404, "metering-not-configured", f"metering is not configured for {snapshot.environment}: serve --prometheus URL")
        try:
            month = Period.parse(period or this_month())
            reading = meter.statements(snapshot.revision, snapshot.env, month)
            return await asyncio.wait_for(asyncio.wrap_future(reading), settings.metering_wait)
        except MeteringBusy:
            raise HTTPProblem(503, "metering-busy", "other periods are being read from Prometheus: ask again", {"Retry-After": "10"}) from None
        except TimeoutError:
            raise HTTPProblem(503, "metering-pending", f"Prometheus has not answered for {month.name} in {settings.metering_wait:g} s; "
                          "the reading goes on: ask again", {"Retry-After": "10"}) from None
        except PrometheusError as exc:  # its line names the URL without credentials, never the token
            log.warning("metering unavailable: %s", exc.lines[0])
            raise HTTPProblem(503, "metering-unavailable", exc.lines[0], {"Retry-After": "30"}) from None
        except StatementError as exc:
            raise HTTPProblem(404, "no-metering", exc.lines[0]) from None

    async def metered(name: str, who: Principal, period: str | None) -> Statement:
        """The tenant's statement for the period; 503 where some of its use is unknown."""
        visible_tenant(current(), name, who)
        made = await read_period(period)
        if unknown := made.incomplete.get(name):
            raise HTTPProblem(503, "metering-incomplete", f"some of {name}'s use in {made.period.name} is unknown: {unknown[0]}",
                          {"Retry-After": str(int(TTL_SECONDS))}, problems=unknown)
        return next(s for s in made.statements if s.tenant == name)

    Month = Annotated[str | None, Query(pattern=r"^2[0-9]{3}-(0[1-9]|1[0-2])$", description="calendar month, UTC (default: this month to date)")]
    METERED = {"404": _problem_doc("no such tenant, metering not configured, or no metering in the period"),
               "503": _problem_doc("Prometheus did not answer in time, or some of the use is unknown: never read as zero use")}

    @app.get("/v1/tenants/{name}/use", response_model=models.Use, responses=METERED)
    async def use(name: str, who: Who, response: Response, period: Month = None) -> models.Use:
        """A tenant's device-hours per cluster, pool and resource in a month, and their spend."""
        response.headers.update(METERED_CACHE)
        return models.Use.of(await metered(name, who, period))

    @app.get("/v1/tenants/{name}/statements", response_model=Statement, responses=METERED)
    async def statements(name: str, who: Who, response: Response, period: Month = None) -> Statement:
        """A tenant's statement for a month, as `fleetops statements --output json` gives it: a postpaid invoice or a prepaid balance."""
        response.headers.update(METERED_CACHE)
        return await metered(name, who, period)

    @app.get("/v1/idle", response_model=list[Idle], responses=METERED)
    async def idle(_: Operator, response: Response, period: Month = None) -> list[Idle]:
        """Per pool and edge group, the capacity no tenant's running pod held in a month and its cost at the prices recorded,
        as `fleetops statements --output json` gives it under `idle`: a null figure is unknown, and `unknown` says why."""
        response.headers.update(METERED_CACHE)
        return (await read_period(period)).idle

    @app.get("/v1/decisions", response_model=models.Decisions)
    def decisions(seen: Tagged, _: Operator) -> models.Decisions:
        """The policies' decisions on the revision, as `fleetops check` makes them, with where each comes from and its fix."""
        snapshot = seen.snapshot
        return models.Decisions(environment=snapshot.environment, revision=snapshot.revision, counts=status_counts(snapshot.decisions),
                                decisions=[d.to_json() for d in snapshot.decisions])

    @app.get("/v1/plan", response_model=models.PlanDocument)
    def latest_plan(seen: Tagged, _: Operator) -> dict[str, Any]:
        """The plan of the commit that made the revision, as `fleetops plan --output json` prints it."""
        return plan_json.document(seen.snapshot.latest_plan)

    @app.get("/v1/status", response_model=list[models.ClusterStatus])
    def reconcile_status(_: Operator, response: Response) -> list[models.ClusterStatus]:
        """Each cluster's last reconcile, as its reconciler published it."""
        response.headers["Cache-Control"] = "no-store"
        return status()

    @app.post("/v1/quotes", response_model=models.Quote)
    def quote(request: models.QuoteRequest, _: Operator, response: Response) -> dict[str, Any]:
        """What `plan` would say of the change: verdict, decisions with fixes, capacity and cost. Nothing is written."""
        response.headers["Cache-Control"] = "no-store"
        if not quote_slots.acquire(blocking=False):
            raise HTTPProblem(429, "quotes-busy", f"{settings.quotes_at_once} quotes are being judged: ask again", {"Retry-After": "1"})
        try:
            return quote_mod.quote(current(), request, meter.prometheus if meter else None)
        except FleetopsError as exc:
            raise HTTPProblem(422, "change-refused", exc.lines[0], problems=exc.lines) from None
        finally:
            quote_slots.release()

    if clusters is not None:
        why_routes.register(app, current, principal, visible_tenant, clusters, HTTPProblem, meter.prometheus if meter else None)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                                   openapi_version=app.openapi_version)
            document = models.with_components(document)
            document["components"]["schemas"]["Problem"] = models.ProblemDetails.model_json_schema()
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, seconds=settings.body_seconds)
    app.add_middleware(AccessLog)
    return app


def _tenant(snapshot: Snapshot, tenant: spec.Tenant) -> models.ApiTenant:
    granted = snapshot.grants
    quotas = [models.TenantQuota(resource=r, guaranteed=q.guaranteed, burst=q.burst,
                                 granted=[models.ApiGrant(cluster=c, **{k: g[k] for k in ("guaranteed", "reachable", "lends")})
                                          for c in tenant.clusters if (g := granted.get(c, {}).get(tenant.name, {}).get(r)) is not None])
              for r, q in sorted(tenant.quota.items())]
    return models.ApiTenant(name=tenant.name, clusters=tenant.clusters, workloads=list(tenant.workloads),
                         priority_classes=tenant.priority_classes, quotas=quotas)
