"""Room control state (DESIGN §5 "Room control"): halted rooms and once-only notices.

Also the daily token budgets' grants (an owner's Allow 1× more / Stop for today).
Each decision that several instances (or processes) race to is a single insert or
delete whose row count says who won: the winner announces, the others stay quiet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import text

from nanoslack.store.db import Database, hot_exists, hot_first

_HALT = text(
    "INSERT INTO room_halts (room, halted_by, halted_at, instance) VALUES (:room, :by, :now, :instance)"
    " ON CONFLICT DO NOTHING"
)
_RESUME = text("DELETE FROM room_halts WHERE room = :room")
_IS_HALTED = text("SELECT 1 FROM room_halts WHERE room = :room")
_HALTED = text("SELECT room, halted_by, halted_at, instance FROM room_halts ORDER BY halted_at")
_CLAIM = text(
    "INSERT INTO room_notices (room, kind, epoch, instance, created_at)"
    " VALUES (:room, :kind, :epoch, :instance, :now) ON CONFLICT DO NOTHING"
)
# The last human message this instance saw in the room: a pause lasts until the next one.
_LAST_HUMAN = text(
    "SELECT ts FROM messages WHERE instance = :instance AND channel = :room"
    " AND sender_id NOT LIKE 'slack:bot:%' ORDER BY CAST(ts AS REAL) DESC LIMIT 1"
)

# Tokens the room's turns used today, every instance together (NANOSLACK_ROOM_TOKENS).
_ROOM_TOKENS = text(
    "SELECT coalesce(sum(tokens), 0) FROM turns WHERE channel = :room AND started_at >= :since"
)
_GRANT = text(
    "SELECT allowed, stopped_by FROM budget_grants WHERE scope = :scope AND subject = :subject AND day = :day"
)
_ALLOW = text(
    "INSERT INTO budget_grants (scope, subject, day, allowed, stopped_by, updated_at)"
    " VALUES (:scope, :subject, :day, :allowed, NULL, :now)"
    " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = NULL,"
    " allowed = CASE WHEN budget_grants.allowed > :allowed THEN budget_grants.allowed ELSE :allowed END,"
    " updated_at = :now"
)
_STOP = text(
    "INSERT INTO budget_grants (scope, subject, day, allowed, stopped_by, updated_at)"
    " VALUES (:scope, :subject, :day, 0, :by, :now)"
    " ON CONFLICT (scope, subject, day) DO UPDATE SET stopped_by = :by, updated_at = :now"
)


@dataclass(frozen=True, slots=True)
class Grant:
    allowed: int  # the day's raised cap (0: none)
    stopped_by: str | None


@dataclass(frozen=True, slots=True)
class HaltRow:
    room: str
    halted_by: str
    halted_at: float
    instance: str | None


class Rooms:
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
        with self._db.transaction() as conn:
            return hot_exists(conn, _IS_HALTED, {"room": room})

    def halted(self) -> list[HaltRow]:
        with self._db.transaction() as conn:
            rows = conn.execute(_HALTED).all()
        return [HaltRow(str(r[0]), str(r[1]), float(r[2]), r[3]) for r in rows]

    def get(self, room: str) -> HaltRow | None:
        return next((row for row in self.halted() if row.room == room), None)

    def halted_rooms(self) -> frozenset[str]:
        return frozenset(row.room for row in self.halted())

    def claim_notice(self, room: str, kind: str, epoch: str, *, instance: str) -> bool:
        """True for the one caller that gets to post this notice."""
        params = {"room": room, "kind": kind, "epoch": epoch, "instance": instance, "now": time.time()}
        with self._db.transaction() as conn:
            return conn.execute(_CLAIM, params).rowcount == 1

    def last_human_ts(self, instance: str, room: str) -> str:
        with self._db.transaction() as conn:
            row = hot_first(conn, _LAST_HUMAN, {"instance": instance, "room": room})
        return str(row[0]) if row else ""

    def room_tokens(self, room: str, *, since: float) -> int:
        with self._db.transaction() as conn:
            row = hot_first(conn, _ROOM_TOKENS, {"room": room, "since": since})
        return int(row[0]) if row and row[0] is not None else 0

    def grant(self, scope: str, subject: str, day: str) -> Grant:
        with self._db.transaction() as conn:
            row = conn.execute(_GRANT, {"scope": scope, "subject": subject, "day": day}).first()
        return Grant(int(row[0]), row[1]) if row else Grant(0, None)

    def allow(self, scope: str, subject: str, day: str, *, up_to: int) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "allowed": up_to, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_ALLOW, params)

    def stop(self, scope: str, subject: str, day: str, *, by: str) -> None:
        params = {"scope": scope, "subject": subject, "day": day, "by": by, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_STOP, params)
