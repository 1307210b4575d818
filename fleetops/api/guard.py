"""What one client's connections may hold of the server: uvicorn's HTTP/1.1 protocol (h11), bounded.

uvicorn answers 503 to every request once `limit_concurrency` connections are open, and leaves a
connection open for as long as its client sends a byte of a request's head now and then: 260 slow
connections silenced the API. Here a connection must send a request's whole head within
`head_seconds` of its opening or of the head's first byte (else it is closed), and one address holds
at most `per_client` connections at once (one past it is answered 429 and closed). The body's time
is the app's (BodyLimit). A trusted proxy carries many clients' connections: it is not capped.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from fleetops.api import models

log = logging.getLogger("fleetops.api")
HEAD_SECONDS = 10.0  # a request's head is a few hundred bytes: a client that takes longer is holding the connection
PER_CLIENT = 32  # connections from one address at once: a browser opens 6, a portal's pool a few more


@dataclass
class ClientLimits:
    head_seconds: float = HEAD_SECONDS
    per_client: int = PER_CLIENT
    trusted: tuple[str, ...] = ()  # addresses or networks not capped: the proxies in front
    open: Counter[str] = field(default_factory=Counter)  # connections per address, now

    def capped(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:  # not an IP (a UNIX socket's peer): one client
            return True
        return not any(ip in ipaddress.ip_network(net, strict=False) for net in self.trusted)

    def protocol(self) -> Callable[..., asyncio.Protocol]:
        """The protocol class uvicorn makes a connection's protocol with (Config(http=...))."""
        return functools.partial(Guarded, limits=self)

    def refusal(self) -> bytes:
        detail = f"more than {self.per_client} connections from this address at once"
        body = json.dumps(models.ProblemDetails(type=models.PROBLEM_TYPE + "too-many-connections", title="too many requests", status=429,
                                         detail=detail, problems=[]).model_dump()).encode()
        head = (f"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\n"
                f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n")
        return head.encode() + body


class Guarded(H11Protocol):
    """H11Protocol with a deadline on each request's head and a cap on an address's connections."""

    def __init__(self, *args: Any, limits: ClientLimits, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._counted: str | None = None
        self._head: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else "-"
        if self.limits.capped(address):
            if self.limits.open[address] >= self.limits.per_client:
                transport.write(self.limits.refusal())
                transport.close()
                return
            self.limits.open[address] += 1
            self._counted = address
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted is not None:
            self.limits.open[self._counted] -= 1
            if not self.limits.open[self._counted]:
                del self.limits.open[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # a head begun and not ended: its time runs from its first byte
            self._arm()
        else:
            self._disarm()

    def _arm(self) -> None:
        if self._head is None and not self.transport.is_closing():
            self._head = self.loop.call_later(self.limits.head_seconds, self._late)

    def _disarm(self) -> None:
        if self._head is not None:
            self._head.cancel()
            self._head = None

    def _late(self) -> None:
        self._head = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.info("closed a connection from %s: no request head within %gs", self.client[0] if self.client else "-", self.limits.head_seconds)
            self.transport.close()
