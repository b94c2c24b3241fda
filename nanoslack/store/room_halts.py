"""Halted rooms (docs/operations.md): ``room_halts``, one row per halted room. The fleet
reads it through ``nanoslack.halts.Halts``.

A halt and a resume are each a single insert or delete whose row count says who won:
every instance in the room hears the owner's 🛑, the one whose insert landed announces.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all, hot_exists
from nanoslack.store.rows import Row
from nanoslack.store.tables import HaltRow as HaltRow

_HALT_ROW = Row(HaltRow)
_HALT = text(_HALT_ROW.insert(values={"halted_by": ":by", "halted_at": ":now"}) + " ON CONFLICT DO NOTHING")
_RESUME = text("DELETE FROM room_halts WHERE room = :room")
_IS_HALTED = text("SELECT 1 FROM room_halts WHERE room = :room")
_HALTED = text(f"SELECT {_HALT_ROW.sql} FROM room_halts ORDER BY halted_at")


class RoomHalts:
    def __init__(self, db: Database) -> None:
        self._db = db

    def halt(self, room: str, *, by: str, instance: str | None) -> bool:
        """True when this call halted the room (it was running)."""
        with self._db.transaction() as conn:
            params = {"room": room, "by": by, "now": time.time(), "instance": instance}
            return conn.execute(_HALT, params).rowcount == 1

    def resume(self, room: str) -> bool:
        """True when this call resumed the room (it was halted)."""
        with self._db.transaction() as conn:
            return conn.execute(_RESUME, {"room": room}).rowcount == 1

    def is_halted(self, room: str) -> bool:
        with self._db.read() as conn:
            return hot_exists(conn, _IS_HALTED, {"room": room})

    def halted(self) -> list[HaltRow]:
        with self._db.read() as conn:
            rows = hot_all(conn, _HALTED, {})  # every turn poll asks
        return _HALT_ROW.all(rows)

    def get(self, room: str) -> HaltRow | None:
        return next((row for row in self.halted() if row.room == room), None)

    def halted_rooms(self) -> frozenset[str]:
        return frozenset(row.room for row in self.halted())
