"""The fleet process's garbage collector, set for a server that runs for days.

A started fleet holds a couple of hundred thousand long-lived objects (the imported
libraries, the pydantic schemas, the SQL metadata). CPython's default collector walks
all of them every few hundred thousand allocations, ≈ 150 ms on the 2-core machine of
BENCHMARKS.md, in the middle of whatever the loop was doing: an ack waits that long,
and under a burst the walks cost about a sixth of the fleet's CPU. Once the fleet has
started, what exists is frozen (never walked again) and young objects are collected
less often: an envelope's objects die by reference counting long before a collection
comes round, and reference cycles wait at most ``YOUNG_THRESHOLD`` allocations.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

# Allocations between two young collections (CPython's default: 700), and how many
# collections of one generation make one of the next (default: 10 and 10).
YOUNG_THRESHOLD = 10_000
OLDER_THRESHOLD = 50


def settle() -> Callable[[], None]:
    """Collect once, freeze what survives, then collect less often; returns what puts the
    collector back as it was (a bench that measures something else afterwards)."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)

    def restore() -> None:
        gc.unfreeze()
        gc.set_threshold(*before)

    return restore
