"""fleetops's errors."""

from __future__ import annotations


class RenderError(Exception):
    """The program could not be rendered: it raised, or it broke a rule the real engine enforces."""
