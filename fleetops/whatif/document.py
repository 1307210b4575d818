"""A `fleetops whatif --output json` document read back, for the audit report (`audit --whatif FILE`): the figures
of each side as the replay made them, so the report draws the same pictures and states the same assumptions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from fleetops import spec
from fleetops.errors import WhatifError
from fleetops.whatif.figures import SideFigures

# A document holds at most four sides of up to 1,000 utilisation steps and a row per tenant, flavor and class:
# well under a MiB for the largest environment; anything past this is not one.
DOCUMENT_BYTES = 16 * 1024 * 1024


class _Trace(BaseModel):
    source: str
    jobs: int
    window_hours: float


class _WhatifDocument(BaseModel):
    command: Literal["whatif"]
    environment: str
    trace: _Trace
    assumptions: list[str]
    sides: list[SideFigures]


@dataclass(frozen=True)
class Replayed:
    """What a replay said: the trace it played, the figures of every side, and the assumptions they rest on."""

    environment: str
    source: str
    jobs: int
    window_hours: float
    assumptions: list[str]
    figures: list[SideFigures]


def read(path: Path) -> Replayed:
    """The replay a whatif JSON document holds; anything else is one WhatifError naming the file and the first wrong field."""
    try:
        document = spec.read_output(path, _WhatifDocument, DOCUMENT_BYTES, "whatif")
    except ValueError as exc:
        raise WhatifError(str(exc)) from None
    if not document.sides:
        raise WhatifError(f"{path}: a whatif document without sides: nothing to report")
    return Replayed(document.environment, document.trace.source, document.trace.jobs, document.trace.window_hours,
                    document.assumptions, document.sides)
