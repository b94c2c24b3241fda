"""The collector of a started fleet (nanoslack/heap.py)."""

from __future__ import annotations

import gc

from nanoslack import heap


def test_a_settled_heap_is_frozen_collects_young_objects_less_often_and_restores() -> None:
    before = gc.get_threshold()
    restore = heap.settle()
    try:
        assert gc.get_freeze_count() > 0  # what start-up made is walked no more
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, heap.OLDER_THRESHOLD, heap.OLDER_THRESHOLD)
    finally:
        restore()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
