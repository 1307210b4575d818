"""What the collector sets aside (fleetops/memory.py)."""

from __future__ import annotations

import gc
import weakref

from fleetops import memory


def test_what_the_collector_set_aside_is_collected_on_release() -> None:
    class Node:
        pass

    with memory.acyclic():
        node = Node()
        node.itself = node  # a cycle: only the collector frees it
        alive = weakref.ref(node)
    del node
    gc.collect()
    assert alive() is not None  # set aside when the block ended
    memory.release()
    assert alive() is None
