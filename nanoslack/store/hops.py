"""Hop counts for the A2A policy (docs/architecture.md), kept in the store.

A hop is a row per (room, instance, ts): reserving is idempotent for the same
message (a resumed event keeps its hop), a failed message's rollback takes its row
back, and a human message deletes the room's rows. ``identity`` scope counts this instance's rows;
``room`` scope counts distinct message ts across the fleet, so one bot message
seen by five instances is one hop of the room, not five.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.engine import PG_LOCK_SPACE
from nanoslack.store.fastpath import hot_execute, hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import A2AHop

# Held until the reserving transaction ends, so the count and the insert are one step
# for every process; READ COMMITTED then sees the previous holder's committed row.
_LOCK_ROOM = text("SELECT pg_advisory_xact_lock(:space, hashtext(:room))")
# One statement answers all a reservation asks before its insert: the hops used, whether
# this message holds one already, and its rank among them (the hops at or before its ts).
_TALLY_IDENTITY = text(
    "SELECT count(*), count(CASE WHEN ts = :ts THEN 1 END), count(CASE WHEN ts <= :ts THEN 1 END)"
    " FROM a2a_hops WHERE room = :room AND instance = :instance"
)
# ``room`` scope counts distinct bot messages; "held" is this instance's row, "counted"
# any instance's row for the message (then it costs the room no new hop).
_TALLY_ROOM = text(
    "SELECT count(DISTINCT ts), count(CASE WHEN ts = :ts AND instance = :instance THEN 1 END),"
    " count(CASE WHEN ts = :ts THEN 1 END), count(DISTINCT CASE WHEN ts <= :ts THEN ts END)"
    " FROM a2a_hops WHERE room = :room"
)
_COUNT_ROOM = text("SELECT count(DISTINCT ts) FROM a2a_hops WHERE room = :room")
_INSERT = text(Row(A2AHop).insert(values={"created_at": ":now"}) + " ON CONFLICT DO NOTHING")
_RESET_ROOM = text("DELETE FROM a2a_hops WHERE room = :room")
_RESET_IDENTITY = text("DELETE FROM a2a_hops WHERE room = :room AND instance = :instance")


@dataclass(frozen=True, slots=True)
class HopCount:
    room: str
    instance: str
    count: int
    last_at: float


_HOP_COUNT = Row(HopCount, table="a2a_hops", columns={"count": "count(*)", "last_at": "max(created_at)"})
_LIST = text(f"SELECT {_HOP_COUNT.sql} FROM a2a_hops GROUP BY room, instance ORDER BY room, instance")


class Hops:
    def __init__(self, db: Database) -> None:
        self._db = db
        # (room, instance) pairs known to hold no hop rows. Only the process running
        # an instance writes that instance's rows (one process per app token, its
        # lease holder; ``forget`` runs when a lease is taken), so
        # after a reset this process knows the pair is clean until it reserves
        # again: a human message then costs no DELETE. Forgotten on any rollback.
        self._clean: set[tuple[str, str]] = set()
        db.on_rollback(self._clean.clear)

    def forget(self, instance: str) -> None:
        """Another process may have written ``instance``'s rows (it held the
        instance's lease meanwhile): stop trusting what we knew about them."""
        self._clean = {pair for pair in self._clean if pair[1] != instance}

    def reserve(
        self, *, room: str, instance: str, ts: str, bot_id: str, max_hops: int, scope: str
    ) -> int | None:
        """Take a hop for this message; its 1-based number, or None at the limit.

        Check and insert share one transaction that holds the room's lock (SQLite:
        the IMMEDIATE write lock; PostgreSQL: an advisory lock on the room until
        commit), so concurrent deliveries, even from other processes, cannot over-admit.
        """
        key = {"room": room, "instance": instance, "ts": ts}
        with self._db.transaction() as conn:
            if not self._db.is_sqlite:
                conn.execute(_LOCK_ROOM, {"space": PG_LOCK_SPACE, "room": room})
            if scope == "room":
                used, held, counted, rank = _ints(hot_first(conn, _TALLY_ROOM, key), 4)
            else:
                used, held, rank = _ints(hot_first(conn, _TALLY_IDENTITY, key), 3)
                counted = held
            if held:
                return rank
            if not counted:
                if used >= max_hops:
                    return None
                rank += 1  # the new row is a hop of its own, at or before its ts
            hot_execute(conn, _INSERT, {**key, "bot_id": bot_id, "now": time.time()})
            self._clean.discard((room, instance))
            return rank

    def reset(self, *, room: str, instance: str | None) -> int:
        """A human spoke: forget the room's hops (one identity's, or everyone's)."""
        if instance is not None and (room, instance) in self._clean:
            return 0
        with self._db.transaction() as conn:
            if instance is None:
                # Room scope: other fleets' instances write rows here too; always ask.
                return hot_execute(conn, _RESET_ROOM, {"room": room})
            cleared = hot_execute(conn, _RESET_IDENTITY, {"room": room, "instance": instance})
        self._clean.add((room, instance))
        return cleared

    def room_count(self, room: str) -> int:
        """The room's hops as ``room`` scope counts them: distinct bot messages."""
        with self._db.transaction() as conn:
            (count,) = _ints(hot_first(conn, _COUNT_ROOM, {"room": room}), 1)
        return count

    def counts(self) -> list[HopCount]:
        with self._db.transaction() as conn:
            rows = conn.execute(_LIST).all()
        return _HOP_COUNT.all(rows)


def _ints(row: tuple[object, ...] | None, n: int) -> list[int]:
    """A row of counts as ints (``count`` never gives NULL; no row reads as zeros)."""
    return [int(v) if isinstance(v, int) else 0 for v in row] if row else [0] * n
