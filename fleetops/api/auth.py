"""Bearer tokens and their scopes, from a file (a mounted Kubernetes Secret is one).

The file holds each token's SHA-256, never the token: `{"tokens": [{"name": "portal", "sha256":
"<64 hex>", "scope": "operator"}, {"name": "vision-portal", "sha256": "...", "scope": "tenant",
"tenant": "vision"}]}`. A presented token is hashed and compared with every entry in constant time
(hmac.compare_digest, no early exit), so neither the file nor the timing tells a token. Requests are
logged by the token's name, never by the token. A file naming two entries alike, or holding one hash
twice (a token that would be a tenant's and an operator's at once), is refused at the entry's line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import json.scanner
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from fleetops import spec
from fleetops.api.models import Scope
from fleetops.errors import FleetopsError

MAX_TOKENS_BYTES = 1 << 20


class TokenError(FleetopsError):
    """The tokens file is missing, unreadable or invalid."""


class Principal(BaseModel):
    """Who a request comes from: the token's name and what it may see."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
    scope: Scope
    tenant: spec.Name | None = None

    @model_validator(mode="after")
    def _tenant_iff_tenant_scope(self) -> Principal:
        if (self.scope is Scope.TENANT) != (self.tenant is not None):
            raise ValueError("a tenant token names its tenant; an operator token names none")
        return self

    def sees(self, tenant: str) -> bool:
        return self.scope is Scope.OPERATOR or self.tenant == tenant

    @property
    def key(self) -> str:
        """What the answers seen with this token depend on (ETags differ by it)."""
        return self.scope.value if self.tenant is None else f"{self.scope.value}-{self.tenant}"


class Entry(Principal):
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[Entry] = Field(min_length=1, max_length=10_000)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    def __init__(self, entries: list[Entry]):
        self._entries = [(bytes.fromhex(e.sha256), Principal(name=e.name, scope=e.scope, tenant=e.tenant)) for e in entries]

    def who(self, token: str) -> Principal | None:
        presented = hashlib.sha256(token.encode()).digest()
        found = None
        for stored, principal in self._entries:  # every entry compared, a match or not: constant time
            if hmac.compare_digest(stored, presented):
                found = principal
        return found


def _parsed(raw: str) -> tuple[object, dict[int, int]]:
    """The JSON document, and the offset at which each of its objects opens (by the object's id): json's own
    scanner, in its Python form, told to note where it parses an object."""
    decoder = json.JSONDecoder()
    opens: dict[int, int] = {}

    def parse_object(s_and_end: tuple[str, int], *args: object) -> tuple[object, int]:
        made, end = json.decoder.JSONObject(s_and_end, *args)  # type: ignore[attr-defined]
        opens[id(made)] = s_and_end[1] - 1
        return made, end

    decoder.parse_object = parse_object  # type: ignore[assignment]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder.decode(raw), opens


@dataclass(frozen=True)
class TokensRead:
    """A tokens file read and checked on its own (JSON, entries, no name or hash twice), before the
    environment it serves is loaded; `admit` checks its tenant tokens against that environment."""

    path: Path
    entries: list[Entry]
    lines: list[int | None]  # the line each entry opens on

    def at(self, i: int) -> str:
        return _place(self.path, self.lines, i)


def _place(path: Path, lines: list[int | None], i: int) -> str:
    """`file:line` of entry `i`, or the file alone where its line is not known."""
    return f"{path}:{lines[i]}" if i < len(lines) and lines[i] is not None else str(path)


def read(path: Path) -> TokensRead:
    """The tokens of `path`, checked as far as the file alone can be. Raises TokenError, one line naming the
    entry's line: `serve` reads it before it loads anything, so a missing or broken file is said at once."""
    try:
        raw = spec.read_bounded(path, MAX_TOKENS_BYTES, str(path), "the tokens file").decode()
        data, opens = _parsed(raw)
    except spec.SpecError as exc:
        raise TokenError(problems=exc.problems[:1]) from None
    except UnicodeDecodeError as exc:
        raise TokenError(f"{path}: not JSON: not UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise TokenError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    entries = data.get("tokens") if isinstance(data, dict) else None
    lines = [raw.count("\n", 0, opens[id(e)]) + 1 if id(e) in opens else None for e in entries] if isinstance(entries, list) else []
    try:
        document = TokensFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        place = _place(path, lines, first["loc"][1]) if len(first["loc"]) > 1 and isinstance(first["loc"][1], int) else str(path)
        # the input is not repeated: it may be a token pasted where its hash belongs
        raise TokenError(f"{place}: {where}: {first['msg']}") from None
    checked = TokensRead(path, document.tokens, lines)
    named: dict[str, int] = {}
    hashed: dict[str, int] = {}
    for i, entry in enumerate(document.tokens):
        if (j := named.setdefault(entry.name, i)) != i:
            raise TokenError(f"{checked.at(i)}: tokens.{i}.name: {entry.name!r} names tokens.{j} too (line {lines[j]}): the log and the rate limits "
                             "tell tokens by their names")
        if (j := hashed.setdefault(entry.sha256, i)) != i:
            first_entry = document.tokens[j]
            raise TokenError(f"{checked.at(i)}: tokens.{i}.sha256: the same token as tokens.{j} (line {lines[j]}, {first_entry.scope.value} "
                             f"{first_entry.name!r}): a token is one principal, with one scope")
    return checked


def admit(given: TokensRead, tenants: set[str]) -> Tokens:
    """The tokens read, each tenant token's tenant one of `tenants` (the environment served). Raises TokenError at the entry's line."""
    for i, entry in enumerate(given.entries):
        if entry.tenant is not None and entry.tenant not in tenants:
            raise TokenError(f"{given.at(i)}: tokens.{i}.tenant: no tenant {entry.tenant!r} in the environment served")
    return Tokens(given.entries)
