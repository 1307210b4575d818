"""A small client for Prometheus's HTTP API: instant and range queries, typed answers.

On urllib3 (pinned; the Kubernetes client already brings it): its `Retry` retries refused
connections and 502/503/504 with backoff, its `Timeout` bounds connect and read. What this module
adds is what a fleet command needs of an answer: at most `max_bytes` read, the answer checked to
be the shape asked for, and errors in the project's family that name the URL without its
credentials. A bearer token is read from a file (as Prometheus's own `authorization.credentials_file`)
and never printed: it travels only in the Authorization header.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import urllib3

from fleetops.errors import FleetopsError

CONNECT_TIMEOUT = 5.0  # seconds: an unreachable server is known in seconds
READ_TIMEOUT = 60.0  # seconds: a month of range queries over a large fleet takes a while on a busy server
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


class Prometheus:
    """One Prometheus server (or a Thanos/Mimir querier speaking its API) at `url`.

    `queries` counts the queries sent: the statements' bound ("a fixed number of range queries")
    is checked against it."""

    def __init__(self, url: str, token_file: Path | None = None, *, connect_timeout: float = CONNECT_TIMEOUT,
                 read_timeout: float = READ_TIMEOUT, max_bytes: int = MAX_BYTES, retries: int = RETRIES):
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
        self._pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=urllib3.Retry(total=retries, backoff_factor=0.2, status_forcelist=(502, 503, 504),
                                  allowed_methods=frozenset({"POST"}), raise_on_status=False, redirect=0),
        )

    def query(self, expr: str, at: datetime | float) -> list[Sample]:
        """An instant query at `at`: one sample per series (a scalar answer is one sample without labels)."""
        data = self._ask("query", {"query": expr, "time": f"{_seconds(at):.3f}"})
        kind, result = data.get("resultType"), data.get("result")
        try:
            if kind == "vector" and isinstance(result, list):
                return [Sample(_labels(item), _value(item.get("value"))[1]) for item in result]
            if kind == "scalar":
                return [Sample({}, _value(result)[1])]
        except (ValueError, AttributeError, TypeError) as exc:
            raise PrometheusError(f"{self.url}: an answer to a query that is not Prometheus's: {exc}") from None
        raise PrometheusError(f"{self.url}: a query answered with a {kind} where a vector was expected")

    def query_range(self, expr: str, start: datetime | float, end: datetime | float, step: float) -> list[Series]:
        """A range query: every series with its points from `start` to `end` every `step` seconds."""
        data = self._ask("query_range", {"query": expr, "start": f"{_seconds(start):.3f}",
                                          "end": f"{_seconds(end):.3f}", "step": f"{step:g}"})
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PrometheusError(f"{self.url}: a range query answered with a {data.get('resultType')} where a matrix was expected")
        try:
            return [Series(_labels(item), tuple(_value(p) for p in item.get("values", []))) for item in result]
        except (ValueError, AttributeError, TypeError) as exc:
            raise PrometheusError(f"{self.url}: an answer to a range query that is not Prometheus's: {exc}") from None

    def _ask(self, endpoint: str, fields: dict[str, str]) -> dict[str, object]:
        """POST (a long expression does not fit a URL) the form to /api/v1/<endpoint>; the answer's data."""
        self.queries += 1
        where = f"{self.url}/api/v1/{endpoint}"
        try:
            response = self._pool.request("POST", f"{self._base}/api/v1/{endpoint}", fields=fields,
                                          encode_multipart=False, headers=self._headers, preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            raise PrometheusError(f"{where}: no answer: {self._reason(exc)}") from None
        try:
            body = self._read(response, where)
        finally:
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

    def _read(self, response: urllib3.BaseHTTPResponse, where: str) -> bytes:
        """The body, at most `max_bytes` of it: a larger answer is refused, not read into memory."""
        chunks, size = [], 0
        try:
            for chunk in response.stream(1 << 16):
                size += len(chunk)
                if size > self.max_bytes:
                    raise PrometheusError(f"{where}: an answer larger than {self.max_bytes} bytes; ask for a shorter period or a coarser step")
                chunks.append(chunk)
        except urllib3.exceptions.HTTPError as exc:
            raise PrometheusError(f"{where}: the answer broke off: {self._reason(exc)}") from None
        return b"".join(chunks)

    def _reason(self, exc: Exception) -> str:
        """A failed request in a few words, not urllib3's nested repr (which names the whole URL)."""
        text = f"{type(exc).__name__} {exc}"
        for marker, reason in (("Connection refused", "connection refused"), ("ConnectTimeout", "no connection in time"),
                               ("timed out", "timed out"), ("Name or service not known", "host name not found"),
                               ("NameResolution", "host name not found"), ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"),
                               ("SSLError", "TLS handshake failed"), ("too many 5", "the server kept failing (HTTP 5xx)"),
                               ("RemoteDisconnected", "the server closed the connection")):
            if marker in text:
                return reason
        return type(exc).__name__

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "..."


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
