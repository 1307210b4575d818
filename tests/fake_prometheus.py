"""A small local HTTP server speaking Prometheus's query API: each instant query is answered with the
samples of the metric it names, as the metering recording rules would hold them."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

Answer = list[tuple[dict[str, str], float]]  # (labels, value) per series


@dataclass
class Fake:
    """What the server answers (`answers`: metric name -> series; or `status` with `error`) and what it was asked."""

    answers: dict[str, Answer] = field(default_factory=dict)
    status: int = 200
    error: str = ""
    asked: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)  # path, form, headers
    url: str = ""

    def body(self, form: dict[str, str]) -> bytes:
        if self.status != 200:
            return json.dumps({"status": "error", "errorType": "bad_data", "error": self.error}).encode()
        expr = form.get("query", "")
        series = next((s for metric, s in self.answers.items() if metric in expr), [])
        result = [{"metric": labels, "value": [float(form.get("time", 0)), repr(value)]} for labels, value in series]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@contextlib.contextmanager
def serve(fake: Fake) -> Iterator[Fake]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            fake.asked.append((self.path, form, dict(self.headers)))
            body = fake.body(form)
            self.send_response(fake.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_port}"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
