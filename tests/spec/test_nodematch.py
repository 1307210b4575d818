"""Which pairs of node matches are compared: every pair that can claim one node, found without comparing all pairs."""

from __future__ import annotations

import itertools
import random

from fleetops import nodematch

PIECES = ["a", "b", "-", ".", "*", "?", "[ab]", "[!a]", "c0-", "c1-", "pool-"]


def test_prefix_pairs_hold_every_overlapping_pair_in_nested_loop_order() -> None:
    rng = random.Random(20261204)  # fixed seed: the same 500 sets of globs on every run
    for _ in range(500):
        patterns = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5))) or None for _ in range(rng.randint(1, 14))]
        pairs = list(nodematch.prefix_pairs(patterns))
        assert pairs == sorted(pairs, key=lambda pair: (pair[1], pair[0])) and all(m < n for m, n in pairs)
        for m, n in itertools.combinations(range(len(patterns)), 2):
            if nodematch.overlap(patterns[m], {}, patterns[n], {"x": "y"}) is not None:
                assert (m, n) in pairs, (patterns[m], patterns[n])


def test_groups_with_unrelated_prefixes_are_not_compared() -> None:
    patterns = [f"c{c}-pool{p}-*" for c in range(20) for p in range(40)]
    assert list(nodematch.prefix_pairs(patterns)) == []
    assert list(nodematch.prefix_pairs(["c1-*", "c1-pool-*", "c2-*", "*"])) == [(0, 1), (0, 3), (1, 3), (2, 3)]
