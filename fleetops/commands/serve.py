"""`fleetops serve`: its options, checked; the server itself is fleetops.api.server's."""

from pathlib import Path
from typing import Annotated

import typer

from fleetops.commands.base import EnvOpt, PrometheusTokenOpt, fail, parse_interval, write_files
from fleetops.output.terminal import progress, say


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, the host an address or name ([::1] for IPv6), the port 0-65535 (0: any free one)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        fail(f"--listen: expected HOST:PORT like 127.0.0.1:8443, got {text!r}")
    return host, int(port)


def serve(
    env: EnvOpt,
    repo: Annotated[str, typer.Option("--repo", help="Git repository (path or URL) holding environments/", envvar="FLEETOPS_REPO")] = ".",
    rev: Annotated[str, typer.Option("--rev", help="The revision to serve: branch, tag or commit")] = "HEAD",
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to listen on")] = "127.0.0.1:8443",
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate (chain); needed beyond loopback")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert")] = None,
    rate_limit: Annotated[str, typer.Option(help="Requests per token (and per address without a valid one), e.g. 120/minute")] = "120/minute",
    max_body_bytes: Annotated[int, typer.Option(min=1024, max=16 << 20, help="Largest request body (a quote); beyond it 413")] = 64 << 10,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig to read each cluster's reconcile status (default: each cluster's own)")] = None,
    in_cluster: Annotated[bool, typer.Option("--in-cluster", help="Read the reconcile status of the cluster the pod runs in (api.cluster) only")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="Where a --repo URL is cloned (default ~/.cache/fleetops/repos)")] = None,
    refresh: Annotated[str | None, typer.Option(help="Follow --rev: look for a newer commit every DURATION (60s, 5m) and serve it once loaded whole")] = None,
    tokens: Annotated[Path | None, typer.Option("--tokens", help="JSON file of the tokens' SHA-256 and scopes (a mounted Secret's key); see README")] = None,
    openapi: Annotated[Path | None, typer.Option("--openapi", help="Write the API's OpenAPI document here and exit (no --tokens needed)")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="Answer use and statements from the metering this Prometheus holds (as `fleetops statements`)")] = None,
    prometheus_token_file: PrometheusTokenOpt = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option("--trusted-proxy", help="An address or network (10.0.0.0/8) of a proxy in front: its X-Forwarded-For names the client that rate limits count (repeatable; none trusted by default)")] = None,
) -> None:
    """Serve the environment at one revision over HTTP, read only: capacity, prices, quotas, decisions, plan, status, quotes and,
    with --prometheus, each tenant's use and statements. SIGTERM stops it within 10 s.

    Exit 2 when the revision does not load or judge, or an option is wrong."""
    import ipaddress

    import limits

    from fleetops.api import server

    host, port = parse_listen(listen)
    if tokens is None and openapi is None:
        fail("serve: --tokens FILE is required (the tokens' SHA-256 and scopes; see README)")
    if (tls_cert is None) != (tls_key is None):
        fail("--tls-cert and --tls-key go together")
    if tls_cert is None and host not in ("127.0.0.1", "::1", "localhost"):
        fail(f"--listen {listen}: beyond loopback the API needs --tls-cert and --tls-key (bearer tokens must not cross a network in clear)")
    try:
        limits.parse(rate_limit)
    except ValueError:
        fail(f"--rate-limit: expected COUNT/PERIOD like 120/minute, got {rate_limit!r}")
    proxies = trusted_proxy or []
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            fail(f"--trusted-proxy {proxy!r}: not an address or network (e.g. 10.0.0.5 or 10.0.0.0/8)")
    period = parse_interval(refresh, "--refresh") if refresh is not None else 0.0
    document = server.run(server.Serving(env, repo, rev, listen, host, port, tls_cert, tls_key, rate_limit, max_body_bytes, kubeconfig, in_cluster,
                                         cache_dir, period, tokens, openapi, prometheus, prometheus_token_file, proxies), progress, say)
    if openapi is not None and document is not None:
        write_files({openapi: document}, "the OpenAPI document")
