"""The running service: Prometheus metrics, /healthz and /readyz, drift asked now (/drift), JSON logs."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fleetops import metrics as names
from fleetops.reconcile.result import WORKED, PassResult, PassStatus
from fleetops.reconcile.source import redact

# --- metrics, health, logs ------------------------------------------------------------------


class Metrics:
    """The reconciler's Prometheus metrics, in a registry of their own (one per Reconciler)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.duration = Histogram(names.RECONCILE_DURATION, "Time of one reconcile pass", registry=r)
        self.drift = Gauge(names.DRIFT, "Objects and nodes that differed from Git in the last pass that compared them (0: equal)", ["cluster", "kind"], registry=r)
        self.apply_errors = Counter(names.APPLY_ERRORS, "Writes that failed after retries", ["cluster", "kind"], registry=r)
        self.denials = Counter(names.POLICY_DENIALS, "Revisions the policy gate denied", registry=r)
        self.capacity = Gauge(names.CAPACITY_DEVICES, "Device units per cluster, resource and state (declared, ready, unavailable)", ["cluster", "resource", "state"], registry=r)
        self.last_success = Gauge(names.LAST_SUCCESS, "When a pass last ended without errors", registry=r)
        self.cluster_errors = Counter(names.RECONCILE_ERRORS, "Errors of reconcile passes per cluster (reads, writes, an unreachable API server)", ["cluster"], registry=r)
        self.cluster_up = Gauge(names.CLUSTER_UP, "1 when the last pass reached the cluster's API server, 0 when it did not", ["cluster"], registry=r)
        self.capacity_read = Gauge(names.CAPACITY_READ, f"When the cluster's nodes were last read ({names.CAPACITY_DEVICES} is as of then)", ["cluster"], registry=r)
        # What was deployed when, kept by Prometheus: statements name the revisions whose prices they billed.
        self.revision = Gauge(names.REVISION, "1 for the revision the cluster's fleetops-status records as applied", ["cluster", "revision"], registry=r)
        self._series: dict[tuple[Gauge, str], set[tuple[str, ...]]] = {}

    def observe(self, result: PassResult, seconds: float, now: float) -> None:
        """Per cluster, what this pass learnt; what it could not learn keeps its last value (see `replace`)."""
        self.duration.observe(seconds)
        if result.status == PassStatus.DENIED:
            self.denials.inc()
        for name, cluster in result.clusters.items():
            self.cluster_errors.labels(name).inc(len(cluster.errors))  # present at 0 from the first pass
            self.cluster_up.labels(name).set(0 if cluster.unreachable else 1)
            for action in cluster.actions:
                if action.error:
                    self.apply_errors.labels(name, action.kind).inc()
            if cluster.last_applied:
                self.replace(self.revision, name, {(cluster.last_applied,): 1})
            if cluster.measured is not None:  # every kind it compared, at 0 when equal to Git
                counts = {kind: 0 for kind in cluster.measured} | cluster.drift_by_kind()
                self.replace(self.drift, name, {(kind,): n for kind, n in counts.items()})
            if cluster.leader and cluster.nodes_read and cluster.unreachable is None:
                totals: dict[tuple[str, str], int] = {}
                for row in cluster.capacity:
                    for state, n in (("declared", row.declared), ("ready", row.allocatable), ("unavailable", row.unavailable)):
                        totals[(row.resource, state)] = totals.get((row.resource, state), 0) + n
                self.replace(self.capacity, name, totals)
                self.capacity_read.labels(name).set(now)
        if result.status in WORKED:
            self.last_success.set(now)

    def replace(self, gauge: Gauge, cluster: str, values: dict[tuple[str, ...], float]) -> None:
        """Set one cluster's series of a gauge to `values` and remove those it no longer has.

        Only a pass that read the cluster calls it: a series that vanished while its API server was
        down would silence every alert on it (`ready < declared` has nothing to compare) exactly when
        it matters; `fleetops_cluster_up` and `fleetops_capacity_read_timestamp_seconds` say how old it is.
        """
        for labels in self._series.get((gauge, cluster), set()) - values.keys():
            gauge.remove(cluster, *labels)
        for labels, n in values.items():
            gauge.labels(cluster, *labels).set(n)
        self._series[(gauge, cluster)] = set(values)


@dataclass(frozen=True)
class Readiness:
    """What /readyz answers: ready, or the short reason it is not."""

    reason: str | None = None

    def __bool__(self) -> bool:
        return self.reason is None


READY_REASON_CHARS = 1000


def readiness(result: PassResult | None) -> Readiness:
    """Ready when the last pass judged a valid revision and reached every cluster without an error
    (applied, clean, drift found, denied by a policy, or another replica leads)."""
    if result is None:
        return Readiness("no pass has completed")
    revision = (result.revision or "")[:12]
    if result.status == PassStatus.UNAVAILABLE:
        why = f"no revision to reconcile: {'; '.join(result.reasons)}"
    elif result.status == PassStatus.INVALID:
        why = f"revision {revision} is invalid: {'; '.join(result.reasons)}"
    elif result.gate_unavailable:
        why = f"the policy gate could not judge revision {revision}: {'; '.join(result.reasons)}"
    elif result.errors:
        failing = sorted(n for n, c in result.clusters.items() if c.errors)
        why = f"the last pass failed in {len(failing)} cluster(s): " + "; ".join(result.clusters[n].errors[0] for n in failing)
    else:
        return Readiness()
    return Readiness(said(why))


def said(why: str) -> str:
    """A reason as an HTTP answer gives it: redacted of URL credentials, on one line, at most READY_REASON_CHARS."""
    why = " ".join(redact(why).split())
    return why if len(why) <= READY_REASON_CHARS else why[:READY_REASON_CHARS] + "..."


class Shared:
    """A read asked over HTTP, run at most once at a time: each request is answered by a run that started after it
    arrived, and the requests waiting for a run share it. However many ask, the servers behind it see one pass at a
    time, as if the service ran back to back."""

    def __init__(self, run: Callable[[], bytes]):
        self._run = run
        self._changed = threading.Condition()
        self._started = self._finished = 0  # runs started and finished, counted
        self._running = False
        self._answer: bytes | BaseException = b""

    def __call__(self) -> bytes:
        with self._changed:
            wanted = self._started + 1  # the next run to start began after this request arrived
            while self._finished < wanted:
                if self._running:
                    self._changed.wait()
                    continue
                self._running, self._started = True, self._started + 1
                run = self._started
                self._changed.release()
                try:
                    answer: bytes | BaseException = self._run()
                except Exception as exc:  # noqa: BLE001 - the waiting requests get the failure, the service goes on
                    answer = exc
                finally:
                    self._changed.acquire()
                self._running, self._finished, self._answer = False, run, answer
                self._changed.notify_all()
            answer = self._answer
        if isinstance(answer, BaseException):
            raise answer
        return answer


def serve_http(host: str, port: int, metrics: Metrics, ready: Callable[[], Readiness],
               drift: Callable[[], bytes] | None = None) -> http.server.ThreadingHTTPServer:
    """/metrics, /healthz (the process answers) and /readyz (the last pass worked, or why not), in a daemon thread;
    with `drift`, /drift answers its JSON document, a detect-only pass run for the request (`Shared`)."""
    shared = Shared(drift) if drift is not None else None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/drift" and shared is not None:
                try:
                    self._send(200, shared(), "application/json")
                except Exception as exc:  # noqa: BLE001 - one line, never a traceback to the client
                    self._send(503, f"drift not read: {said(f'{type(exc).__name__}: {exc}')}\n".encode())
            elif self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                self._send(200, b"ok\n")
            elif self.path == "/readyz":
                state = ready()
                self._send(200 if state else 503, b"ok\n" if state else f"not ready: {state.reason}\n".encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds are not news
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="fleetops-http", daemon=True).start()
    return server


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra={"fields": {...}}` adds keys. Messages are redacted of URL credentials."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        entry.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            entry["error"] = redact(f"{record.exc_info[0].__name__}: {record.exc_info[1]}") if record.exc_info[0] else None
        return json.dumps(entry, default=str, sort_keys=True)


def json_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("fleetops")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
