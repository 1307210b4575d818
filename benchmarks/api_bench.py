"""The fleet API under concurrent clients: `fleetops serve` on loopback, prod at one commit.

    .venv/bin/python benchmarks/api_bench.py [--clients 16] [--seconds 10] [--quotes 5]

Each client keeps one HTTP/1.1 connection and reads the routes a portal reads (capacity, tenants,
prices, revision, round robin) for `--seconds`; then quotes are asked one after the other (+16
nvidia.com/gpu for vision, judged as plan judges it). Printed: latency p50 and p99 of the reads and
the quotes, and the reads' throughput. The server is one process (uvicorn, one event loop, routes in
its thread pool), as the Deployment runs it; the clients run in this process's threads.
Goals: reads p99 <= 250 ms at 16 clients and >= 200 requests/s; a quote p50 <= 3 s.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.goals import Goal, report  # noqa: E402
from tests.plan.test_plan import make_repo  # noqa: E402  (a commit of this project's fleet: what serve loads, whatever the working tree holds)

TOKEN = "bench-operator-token-not-a-secret"
ROUTES = ["/v1/capacity", "/v1/tenants", "/v1/prices", "/v1/revision"]
QUOTE = {"changes": [{"op": "quota", "tenant": "vision", "resource": "nvidia.com/gpu", "guaranteed_delta": 16, "burst_delta": 16,
                      "guaranteed_per_pool_delta": {"h100-train": 8, "a100-infer": 8}}]}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def reads(port: int, clients: int, seconds: float) -> tuple[list[float], int]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures = [0]
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = i
        while time.perf_counter() < stop:
            started = time.perf_counter()
            conn.request("GET", ROUTES[n % len(ROUTES)], headers={"Authorization": f"Bearer {TOKEN}"})
            response = conn.getresponse()
            response.read()
            latencies[i].append(time.perf_counter() - started)
            if response.status != 200:
                failures[0] += 1
            n += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for per in latencies for x in per], failures[0]


def quotes(port: int, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    out = []
    for _ in range(count):
        started = time.perf_counter()
        conn.request("POST", "/v1/quotes", body=json.dumps(QUOTE), headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"api_bench: a quote answered {response.status}")
        out.append(time.perf_counter() - started)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--quotes", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="api-bench-") as tmp:
        repo = make_repo(Path(tmp))
        tokens = Path(tmp) / "tokens.json"
        tokens.write_text(json.dumps({"tokens": [{"name": "bench", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "scope": "operator"}]}))
        log = Path(tmp) / "serve.log"
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with log.open("w") as out:
            server = subprocess.Popen([sys.executable, "-m", "fleetops.cli", "serve", "--env", "prod", "--repo", str(repo), "--listen",
                                       f"127.0.0.1:{port}", "--tokens", str(tokens), "--rate-limit", "100000000/minute"],
                                      stdout=subprocess.DEVNULL, stderr=out)
        try:
            started = time.perf_counter()
            while "serving prod" not in log.read_text():
                if server.poll() is not None:
                    raise SystemExit(f"api_bench: serve exited: {log.read_text()[-2000:]}")
                time.sleep(0.05)  # waiting for the server to load the revision, not timing anything
            load = time.perf_counter() - started
            reads(port, 2, 1.0)  # warm-up: imports and first answers
            started = time.perf_counter()
            latencies, failures = reads(port, args.clients, args.seconds)
            wall = time.perf_counter() - started
            quoted = quotes(port, args.quotes)
        finally:
            server.terminate()
            server.wait(30)
    rate = len(latencies) / wall
    print(f"api_bench: serve loaded prod in {load:.2f} s; {args.clients} clients x {args.seconds:g} s: {len(latencies)} reads "
          f"({failures} not 200), {rate:.0f}/s, p50 {1000 * statistics.median(latencies):.1f} ms, p99 {1000 * percentile(latencies, 99):.1f} ms; "
          f"{len(quoted)} quotes: p50 {statistics.median(quoted):.2f} s, max {max(quoted):.2f} s")
    return report("", [
        Goal(f"reads p99 at {args.clients} clients", 1000 * percentile(latencies, 99), 250, "ms"),
        Goal(f"reads throughput at {args.clients} clients", rate, 200, "/s", at_least=True),
        Goal("every read answered 200", failures, 0),
        Goal("quote p50", statistics.median(quoted), 3, "s"),
    ])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
