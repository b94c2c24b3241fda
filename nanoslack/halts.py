"""Which rooms are halted (docs/operations.md): ``Halts`` is the one reader of the halt state.

Room control, the round keeper, the turn scheduler, the routines' clock, the poster and the
operator commands ask it; the store's ``room_halts`` rows are the truth, so a halt made by
another process (or ``nanoslack halt``) is seen on the next question.
"""

from __future__ import annotations

from nanoslack.store import HaltRow, Store


class Halts:
    def __init__(self, store: Store) -> None:
        self._store = store

    def is_halted(self, room: str) -> bool:
        return self._store.room_halts.is_halted(room)

    def rooms(self) -> frozenset[str]:
        return self._store.room_halts.halted_rooms()

    def halted(self) -> list[HaltRow]:
        """Every halt, oldest first."""
        return self._store.room_halts.halted()

    def get(self, room: str) -> HaltRow | None:
        return self._store.room_halts.get(room)
