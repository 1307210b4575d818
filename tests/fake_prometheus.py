"""A tiny local HTTP server that answers as Prometheus's API does: either scripted body by body (`Script`,
the `server` fixture) or by metric name, as the metering recording rules would hold them (`Fake`, `serve`)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import BinaryIO
from urllib.parse import parse_qs

import pytest

from tests import servers

Answer = list[tuple[dict[str, str], float]]  # (labels, value) per series


@dataclass
class Script:
    """What the fake server answers next, and what it was asked."""

    status: int = 200
    body: bytes = b""
    answer: Callable[[dict[str, str]], bytes] | None = None  # the body for each request's form, in place of `body`
    asked: list[tuple[str, dict[str, str], Message]] = field(default_factory=list)
    pace: float = 0.0  # seconds between two bytes of the answer: a server that trickles it
    held: threading.Event | None = None  # set: the answers go out; until then every request is held

    def respond(self, form: dict[str, str]) -> tuple[int, bytes]:
        return self.status, self.answer(form) if self.answer else self.body


@dataclass
class Fake:
    """What the server answers (`answers`: metric name -> series; or `status` with `error`) and what it was asked."""

    answers: dict[str, Answer] = field(default_factory=dict)
    status: int = 200
    error: str = ""
    asked: list[tuple[str, dict[str, str], Message]] = field(default_factory=list)  # path, form, headers
    url: str = ""

    def respond(self, form: dict[str, str]) -> tuple[int, bytes]:
        if self.status != 200:
            return self.status, json.dumps({"status": "error", "errorType": "bad_data", "error": self.error}).encode()
        expr = form.get("query", "")
        series = next((s for metric, s in self.answers.items() if metric in expr), [])
        result = [{"metric": labels, "value": [float(form.get("time", 0)), repr(value)]} for labels, value in series]
        return 200, success({"resultType": "vector", "result": result})


def trickle(out: BinaryIO, body: bytes, pace: float) -> None:
    """A byte every `pace` seconds (the slow server's pace, not a test's timing); OSError when the client hangs up."""
    for i in range(len(body)):
        time.sleep(pace)
        out.write(body[i:i + 1])


def success(data: dict) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


@contextlib.contextmanager
def _listening(script: Script | Fake) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            script.asked.append((self.path, form, self.headers))  # case-insensitive, as HTTP headers are
            status, body = script.respond(form)
            if isinstance(script, Script) and script.held is not None:
                script.held.wait(300)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            try:
                self.end_headers()
                if isinstance(script, Script) and script.pace:
                    trickle(self.wfile, body, script.pace)
                else:
                    self.wfile.write(body)
            except OSError:  # the client hung up (at its deadline, or stopped while the answer was held)
                pass

        def log_message(self, *args: object) -> None:
            pass

    with servers.serving(Handler) as address:
        yield f"http://{address}"


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    with _listening(script) as url:
        yield url, script


@contextlib.contextmanager
def serve(fake: Fake) -> Iterator[Fake]:
    with _listening(fake) as fake.url:
        yield fake
