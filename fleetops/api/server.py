"""`fleetops serve`'s wiring: load the environment at one revision, build the API on it and run it under
uvicorn, following the revision when asked. The command checks its options; this runs the server from them.

What goes wrong here is a FleetopsError of one line, exit 2 (`fleetops.cli.main`)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from fleetops import cluster, errors, reconcile, revisions, spec
from fleetops.api import app as api_app
from fleetops.api import auth, guard, metering as api_metering, snapshot

STOP_SECONDS = 10  # serve's requests still answering when it is stopped have this long; then they are cancelled
STATUS_TIMEOUT = 10.0  # seconds: one read of a cluster's reconcile status


@dataclass(frozen=True)
class Serving:
    """What `fleetops serve` was asked, its options checked."""

    env: str
    repo: str
    rev: str
    listen: str
    host: str
    port: int
    tls_cert: Path | None
    tls_key: Path | None
    rate_limit: str
    max_body_bytes: int
    kubeconfig: Path | None
    in_cluster: bool
    cache_dir: Path | None
    refresh_seconds: float
    tokens: Path | None
    openapi: Path | None
    prometheus: str | None
    prometheus_token_file: Path | None
    trusted_proxies: list[str]


def run(s: Serving, progress: Callable[[str], AbstractContextManager[None]], announce: Callable[[str], None]) -> str | None:
    """Serve until stopped; with `s.openapi`, return the API's OpenAPI document instead (the command writes it)."""
    import uvicorn

    from fleetops.prometheus import Prometheus

    # A bad tokens file, Prometheus URL or token file is said before the revision is loaded (rendered, judged), not
    # after; the tenants the tokens name are checked once it is. The Prometheus client lives as long as
    # the server: each query is bounded, and each request's wait for metering (the app's), not a whole.
    given_tokens = auth.read(s.tokens) if s.openapi is None and s.tokens is not None else None
    meter = api_metering.StatementCache(Prometheus(s.prometheus, s.prometheus_token_file, client_deadline=None)) if s.prometheus is not None else None
    source = None if Path(s.repo).is_dir() else reconcile.GitSource(s.repo, s.rev, s.cache_dir)  # a URL: cloned, credentials kept out

    def fetch() -> tuple[Path, str]:
        if source is None:
            top = Path(s.repo)
            return top, revisions.resolve(top, s.rev)
        fetched = source.fetch()
        if fetched.path is None or fetched.revision is None or fetched.error:
            raise errors.GitError(f"--repo: {fetched.error}")
        return fetched.path, fetched.revision

    stack = contextlib.ExitStack()
    with progress(f"loading {s.env} at {s.rev}: rendering, judging, planning"):
        local, revision = fetch()
        loaded = snapshot.load(local, s.env, revision, stack)
    current = snapshot.Current(loaded, stack)
    try:
        if s.openapi is not None:
            document = api_app.create_app(current, auth.Tokens([]), lambda: [], clusters=lambda c: None).openapi()
            return json.dumps(document, indent=2, sort_keys=True) + "\n"
        assert given_tokens is not None
        known = auth.admit(given_tokens, {t.name for t in loaded.env.tenants})
        own = loaded.env.api.cluster if loaded.env.api else None

        def connect(c: spec.Cluster) -> cluster.ClusterAPI | None:
            if s.in_cluster:
                return cluster.connect(c.name, None, None, True, STATUS_TIMEOUT) if c.name == own else None
            return cluster.connect(c.name, str(s.kubeconfig) if s.kubeconfig else c.kubeconfig, c.context, False, STATUS_TIMEOUT)

        application = api_app.create_app(current, known, api_app.StatusReader(current, connect),
                                         api_app.Settings(rate=s.rate_limit, max_body_bytes=s.max_body_bytes), meter, connect)
        try:
            sock = socket.create_server((s.host, s.port), family=socket.AF_INET6 if ":" in s.host else socket.AF_INET)
        except OSError as exc:
            raise errors.FleetopsError(f"--listen {s.listen}: cannot listen: {exc.strerror or exc}") from None
        # Forwarded headers are read from the trusted proxies only (uvicorn trusts loopback's by default: any local
        # process could then pick the address rate limits count); their connections are not capped per address.
        proxies = s.trusted_proxies
        limits_per_client = guard.ClientLimits(trusted=tuple(proxies))
        config = uvicorn.Config(application, ssl_certfile=s.tls_cert, ssl_keyfile=s.tls_key, access_log=False, log_config=None,
                                server_header=False, limit_concurrency=256, timeout_keep_alive=5, http=limits_per_client.protocol(),
                                proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None, timeout_graceful_shutdown=STOP_SECONDS)
        try:
            config.load()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise errors.FleetopsError(f"--tls-cert {s.tls_cert} / --tls-key {s.tls_key}: cannot load: {getattr(exc, 'strerror', None) or exc}") from None
        reconcile.json_logging()
        bound = sock.getsockname()
        announce(f"serving {s.env} at {loaded.revision[:12]} on {'https' if s.tls_cert else 'http'}://{s.listen.rpartition(':')[0]}:{bound[1]}")
        stop = threading.Event()
        if s.refresh_seconds:
            threading.Thread(target=snapshot.follow, args=(current, fetch, s.refresh_seconds, stop), name="refresh", daemon=True).start()
        uvicorn.Server(config).run(sockets=[sock])
        stop.set()
        return None
    finally:
        current.close()

