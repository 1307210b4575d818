"""A small client for Prometheus's HTTP API: instant and range queries, typed answers.

On urllib3 (pinned; the Kubernetes client already brings it): its `Retry` retries refused
connections and 502/503/504 with backoff, its `Timeout` bounds connect and each read. What this
module adds is what a fleet command needs of an answer: a whole time per query and per client (a
server that trickles its answer, a byte before each read's timeout, is cut at it), at most
`max_bytes` read, the answer checked to be the shape asked for (a range query's points on the
asked steps, each series once: anything else is not Prometheus's answer), and errors in the
project's family that name the URL without its credentials. A bearer token is read from a file (as Prometheus's own `authorization.credentials_file`)
and never printed: it travels only in the Authorization header.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from fleetops.errors import FleetopsError, connection_failure

CONNECT_TIMEOUT = 5.0  # seconds: an unreachable server is known in seconds
READ_TIMEOUT = 60.0  # seconds: a month of range queries over a large fleet takes a while on a busy server
QUERY_DEADLINE = 180.0  # seconds for one query, retries included, whatever the server trickles
CLIENT_DEADLINE = 600.0  # seconds for all the queries of one client (a command's): statements and plan ask a few
MAX_BYTES = 64 * 1024 * 1024  # of one answer: a month at 1h steps for ~10,000 series is well below
TOKEN_BYTES = 16 * 1024  # of a token file: a service-account JWT is ~1 KiB
RETRIES = 2  # after the first attempt, on refused connections and 502/503/504
MESSAGE_CHARS = 300  # of Prometheus's error message in ours


class PrometheusError(FleetopsError):
    """Prometheus could not be asked or did not answer usably: a command cannot judge (exit 2)."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels and its value at the query's time."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and its (unix seconds, value) points, oldest first."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


def _seconds(at: datetime | float) -> float:
    return at.timestamp() if isinstance(at, datetime) else float(at)


def _value(pair: object) -> tuple[float, float]:
    """A [time, "value"] pair as Prometheus writes it (values are strings: NaN and ±Inf travel as text)."""
    if not (isinstance(pair, list) and len(pair) == 2):
        raise ValueError(f"not a [time, value] pair: {str(pair)[:40]}")
    return float(pair[0]), float(pair[1])


def _labels(item: dict[str, object]) -> dict[str, str]:
    metric = item.get("metric", {})
    if not isinstance(metric, dict):
        raise ValueError("metric is not an object")
    return {str(k): str(v) for k, v in metric.items()}


_asking = threading.local()  # the deadline of the query this thread is asking, if any


class _Deadline:
    """A query's whole time. urllib3's timeouts bound each read, so a server that sends a byte before
    each read's timeout holds a query forever; at the deadline, every socket the query opened is shut
    down, which ends a read blocked on it, and later attempts fail at once."""

    def __init__(self, seconds: float):
        self.seconds, self.expired = seconds, False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        _asking.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        _asking.deadline = None

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed: nothing left to end
        pass


def _watched(sock: socket.socket) -> socket.socket:
    deadline = getattr(_asking, "deadline", None)
    if deadline is not None:
        deadline.watch(sock)
    return sock


class _HTTP(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _watched(super()._new_conn())


class _HTTPS(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _watched(super()._new_conn())


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTP


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPS


class Prometheus:
    """One Prometheus server (or a Thanos/Mimir querier speaking its API) at `url`.

    `queries` counts the queries sent: the statements' bound ("a fixed number of range queries")
    is checked against it. Each query has `query_deadline` seconds, and all of them `client_deadline`
    from the client's making (a command's whole time with Prometheus; None for a server's long-lived
    client, whose queries are bounded one by one)."""

    def __init__(self, url: str, token_file: Path | None = None, *, connect_timeout: float = CONNECT_TIMEOUT,
                 read_timeout: float = READ_TIMEOUT, max_bytes: int = MAX_BYTES, retries: int = RETRIES,
                 query_deadline: float = QUERY_DEADLINE, client_deadline: float | None = CLIENT_DEADLINE):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PrometheusError(f"--prometheus {shown_url(url)}: not an http(s) URL (e.g. http://prometheus.monitoring:9090)")
        self.url = shown_url(url)  # what errors name: never the user:password a URL may carry
        self._base = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), "", ""))
        self._headers: dict[str, str] = {}
        if parts.username is not None:
            self._headers.update(urllib3.make_headers(basic_auth=f"{parts.username}:{parts.password or ''}"))
        self._secret = ""
        if token_file is not None:
            self._secret = read_token(token_file)
            self._headers["Authorization"] = f"Bearer {self._secret}"
        self.max_bytes = max_bytes
        self.queries = 0
        self.query_deadline, self.client_deadline = query_deadline, client_deadline
        self._ends = None if client_deadline is None else time.monotonic() + client_deadline
        self._pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=urllib3.Retry(total=retries, backoff_factor=0.2, status_forcelist=(502, 503, 504),
                                  allowed_methods=frozenset({"POST"}), raise_on_status=False, redirect=0),
        )
        # Sockets made by the query's deadline's watch; each query on a connection of its own (closed after
        # it), so that every socket a query reads from was opened under its deadline.
        self._pool.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def query(self, expr: str, at: datetime | float) -> list[Sample]:
        """An instant query at `at`: one sample per series (a scalar answer is one sample without labels)."""
        data = self._ask("query", {"query": expr, "time": f"{_seconds(at):.3f}"})
        kind, result = data.get("resultType"), data.get("result")
        try:
            if kind == "vector" and isinstance(result, list):
                samples = [Sample(_labels(item), _value(item.get("value"))[1]) for item in result]
                _once_each(s.labels for s in samples)
                return samples
            if kind == "scalar":
                return [Sample({}, _value(result)[1])]
        except (ValueError, AttributeError, TypeError) as exc:
            raise PrometheusError(f"{self.url}: an answer to a query that is not Prometheus's: {exc}") from None
        raise PrometheusError(f"{self.url}: a query answered with a {kind} where a vector was expected")

    def query_range(self, expr: str, start: datetime | float, end: datetime | float, step: float) -> list[Series]:
        """A range query: every series with its points from `start` to `end` every `step` seconds."""
        fields = {"query": expr, "start": f"{_seconds(start):.3f}", "end": f"{_seconds(end):.3f}", "step": f"{step:g}"}
        data = self._ask("query_range", fields)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PrometheusError(f"{self.url}: a range query answered with a {data.get('resultType')} where a matrix was expected")
        try:
            series = [Series(_labels(item), tuple(_value(p) for p in item.get("values", []))) for item in result]
            _once_each(s.labels for s in series)
            steps = _Steps(float(fields["start"]), float(fields["end"]), float(fields["step"]))
            for s in series:
                steps.check(s.points)
        except (ValueError, AttributeError, TypeError) as exc:
            raise PrometheusError(f"{self.url}: an answer to a range query that is not Prometheus's: {exc}") from None
        return series

    def _ask(self, endpoint: str, fields: dict[str, str]) -> dict[str, object]:
        """POST (a long expression does not fit a URL) the form to /api/v1/<endpoint>; the answer's data."""
        self.queries += 1
        where = f"{self.url}/api/v1/{endpoint}"
        with _Deadline(self._seconds_left(where)) as deadline:
            try:
                response = self._pool.request("POST", f"{self._base}/api/v1/{endpoint}", fields=fields,
                                              encode_multipart=False, headers=self._headers, preload_content=False)
            except urllib3.exceptions.HTTPError as exc:
                raise PrometheusError(f"{where}: no answer: {self._reason(exc, deadline)}") from None
            try:
                body = self._read(response, where, deadline)
            finally:
                response.close()  # with its connection: the next query opens its own under its own deadline
                response.release_conn()
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise PrometheusError(f"{where}: HTTP {response.status}, an answer that is not Prometheus's JSON")
        if answer.get("status") != "success":
            message = self._scrub(str(answer.get("error") or "no message"))
            raise PrometheusError(f"{where}: HTTP {response.status}, {answer.get('errorType', 'error')}: {message}")
        data = answer.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(f"{where}: an answer without data")
        return data

    def _seconds_left(self, where: str) -> float:
        """This query's time: its own deadline, or what is left of the client's if less."""
        if self._ends is None:
            return self.query_deadline
        left = self._ends - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"{where}: not asked: the {self.client_deadline:g} s given to Prometheus's queries are spent")
        return min(self.query_deadline, left)

    def _read(self, response: urllib3.BaseHTTPResponse, where: str, deadline: _Deadline) -> bytes:
        """The body, at most `max_bytes` of it: a larger answer is refused, not read into memory."""
        chunks, size = [], 0
        try:
            for chunk in response.stream(1 << 16):
                size += len(chunk)
                if size > self.max_bytes:
                    raise PrometheusError(f"{where}: an answer larger than {self.max_bytes} bytes; ask for a shorter period or a coarser step")
                chunks.append(chunk)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PrometheusError(f"{where}: the answer broke off: {self._reason(exc, deadline)}") from None
        if deadline.expired:  # the shutdown read as the end of an answer without a length
            raise PrometheusError(f"{where}: the answer broke off: {self._reason(TimeoutError(), deadline)}")
        return b"".join(chunks)

    def _reason(self, exc: Exception, deadline: _Deadline) -> str:
        """A failed request in a few words, not urllib3's nested repr (which names the whole URL)."""
        if deadline.expired:
            return f"no whole answer within {deadline.seconds:.3g} s (the server answers too slowly, or trickles)"
        return connection_failure(exc) or type(exc).__name__

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "..."


def _once_each(labels: Iterable[dict[str, str]]) -> None:
    """Prometheus answers each series once: the same labels twice (two replicas not deduplicated, a proxy
    merging answers) would count what they measured twice."""
    seen: set[tuple[tuple[str, str], ...]] = set()
    for item in labels:
        key = tuple(sorted(item.items()))
        if key in seen:
            raise ValueError(f"the series {dict(key)} is answered twice")
        seen.add(key)


@dataclass(frozen=True)
class _Steps:
    """The points a range query asked for: from `start` to `end` every `step` seconds, each at most once."""

    start: float
    end: float
    step: float

    def check(self, points: tuple[tuple[float, float], ...]) -> None:
        start, end, step = (round(x * 1000) for x in (self.start, self.end, self.step))  # Prometheus's times are in ms
        last = None
        for t, _ in points:
            at = round(t * 1000)
            if not start <= at <= end or (at - start) % step:
                raise ValueError(f"a point at {_iso(t)}, not one of the asked steps from {_iso(self.start)} to {_iso(self.end)} "
                                 f"every {self.step:g} s")
            if last is not None and at <= last:
                raise ValueError(f"a series with the point at {_iso(t)} twice or out of order")
            last = at


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def shown_url(url: str) -> str:
    """The URL as errors and logs show it: without user:password and without a query string."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), "", ""))


def read_token(path: Path) -> str:
    """A bearer token from a file, bounded and stripped; errors name the file, never its contents."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(TOKEN_BYTES + 1)
    except OSError as exc:
        raise PrometheusError(f"{path}: cannot read the Prometheus token file: {exc.strerror}") from None
    if len(raw) > TOKEN_BYTES:
        raise PrometheusError(f"{path}: the Prometheus token file is larger than {TOKEN_BYTES} bytes")
    token = raw.decode("utf-8", "replace").strip()
    if not token or any(c.isspace() for c in token):
        raise PrometheusError(f"{path}: the Prometheus token file holds no single token")
    return token


def finite(value: float) -> bool:
    """Whether a sample counts: Prometheus answers NaN for 0/0 (e.g. a pool without devices)."""
    return math.isfinite(value)
