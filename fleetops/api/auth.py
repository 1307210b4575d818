"""Bearer tokens and their scopes, from a file (a mounted Kubernetes Secret is one).

The file holds each token's SHA-256, never the token: `{"tokens": [{"name": "portal", "sha256":
"<64 hex>", "scope": "operator"}, {"name": "vision-portal", "sha256": "...", "scope": "tenant",
"tenant": "vision"}]}`. A presented token is hashed and compared with every entry in constant time
(hmac.compare_digest, no early exit), so neither the file nor the timing tells a token. Requests are
logged by the token's name, never by the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
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


def load(path: Path, tenants: set[str]) -> Tokens:
    """The tokens of `path`; each tenant token's tenant must be one of `tenants`. Raises TokenError, one line."""
    try:
        raw = spec.read_bounded(path, MAX_TOKENS_BYTES, str(path), "the tokens file")
        document = TokensFile.model_validate(json.loads(raw))
    except spec.SpecError as exc:
        raise TokenError(problems=exc.problems[:1]) from None
    except json.JSONDecodeError as exc:
        raise TokenError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        # the input is not repeated: it may be a token pasted where its hash belongs
        raise TokenError(f"{path}: {where}: {first['msg']}") from None
    for i, entry in enumerate(document.tokens):
        if entry.tenant is not None and entry.tenant not in tenants:
            raise TokenError(f"{path}: tokens.{i}.tenant: no tenant {entry.tenant!r} in the environment served")
    return Tokens(document.tokens)
