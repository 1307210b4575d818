"""Test doubles that stand in for servers fleetops talks to (kept out of the product, as
gitops-engine keeps its fakes apart from its packages)."""

from tests.fakes.cluster import WRITE_VERBS, CallCounts, Faults, MemoryCluster, merge_patch, selector_matcher

__all__ = ["WRITE_VERBS", "CallCounts", "Faults", "MemoryCluster", "merge_patch", "selector_matcher"]
