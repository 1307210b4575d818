"""Pulumi ComponentResources, one per fleet concept. `stacks/__main__.py` composes them through `Fleet`."""

from modules.fleet import Fleet

__all__ = ["Fleet"]
