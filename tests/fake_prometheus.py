"""A tiny local HTTP server that answers as Prometheus's API does: what it answers is scripted by the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest


@dataclass
class Script:
    """What the fake server answers next, and what it was asked."""

    status: int = 200
    body: bytes = b""
    answer: Callable[[dict[str, str]], bytes] | None = None  # the body for each request's form, in place of `body`
    asked: list[tuple[str, dict[str, str], Message]] = field(default_factory=list)


def success(data: dict) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            script.asked.append((self.path, form, self.headers))  # case-insensitive, as HTTP headers are
            body = script.answer(form) if script.answer else script.body
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


