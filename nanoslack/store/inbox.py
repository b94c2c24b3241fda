"""The durable inbox (DESIGN §3.4): record before ack, finish once, resume after a crash."""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.inbound import Inbound, InboxKey
from nanoslack.store.db import Database, hot_execute, hot_first

_RECORD = text(
    "INSERT INTO inbox (instance, channel, ts, event_type, event_id, payload, status, attempts, received_at)"
    " VALUES (:instance, :channel, :ts, :event_type, :event_id, :payload, 'received', 0, :now)"
    " ON CONFLICT DO NOTHING"
)
_FINISH = text(
    "UPDATE inbox SET status = :status, reason = :reason, finished_at = :now"
    " WHERE instance = :instance AND channel = :channel AND ts = :ts AND status = 'received'"
)
_ATTEMPT = text(
    "UPDATE inbox SET attempts = attempts + 1, reason = :reason"
    " WHERE instance = :instance AND channel = :channel AND ts = :ts RETURNING attempts"
)
_UNFINISHED = text(
    "SELECT payload FROM inbox WHERE instance = :instance AND status = 'received' ORDER BY received_at, ts"
)
_STATUS = text("SELECT status FROM inbox WHERE instance = :instance AND channel = :channel AND ts = :ts")
_NEWEST = text(
    "SELECT max(ts) FROM inbox WHERE instance = :instance AND channel = :channel AND received_at <= :by"
)

# A message whose downstream keeps failing is parked after this many tries, so
# one poison payload cannot wedge an instance's resume loop forever.
MAX_ATTEMPTS = 3


class Inbox:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, msg: Inbound) -> bool:
        """Store ``msg``; False when its key was already recorded (retry or twin)."""
        params = {
            "instance": msg.instance,
            "channel": msg.channel,
            "ts": msg.ts,
            "event_type": msg.event_type,
            "event_id": msg.event_id,
            "payload": msg.to_payload(),
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            return hot_execute(conn, _RECORD, params) == 1

    def finish(self, key: InboxKey, status: str = "done", reason: str | None = None) -> bool:
        """Close an entry; False when it was already closed (so work ran twice)."""
        params = {**key._asdict(), "status": status, "reason": reason, "now": time.time()}
        with self._db.transaction() as conn:
            return hot_execute(conn, _FINISH, params) == 1

    def note_failure(self, key: InboxKey, error: str) -> bool:
        """Count a failed attempt; True when the entry is now parked as failed."""
        with self._db.transaction() as conn:
            row = conn.execute(_ATTEMPT, {**key._asdict(), "reason": error[:500]}).first()
            attempts = int(row[0]) if row else MAX_ATTEMPTS
            if attempts >= MAX_ATTEMPTS:
                params = {**key._asdict(), "status": "failed", "reason": error[:500], "now": time.time()}
                conn.execute(_FINISH, params)
                return True
            return False

    def status(self, key: InboxKey) -> str | None:
        with self._db.transaction() as conn:
            row = hot_first(conn, _STATUS, key._asdict())
            return str(row[0]) if row else None

    def newest_ts(self, instance: str, channel: str, *, received_by: float) -> str | None:
        """The newest Slack ts the instance had recorded in ``channel`` by ``received_by``
        (its own clock): a time on Slack's clock that anything the instance posted
        after that moment is newer than, whatever the two clocks say."""
        params = {"instance": instance, "channel": channel, "by": received_by}
        with self._db.transaction() as conn:
            row = conn.execute(_NEWEST, params).first()
        return str(row[0]) if row and row[0] else None

    def unfinished(self, instance: str) -> list[Inbound]:
        """Entries recorded but never finished: what a restart must resume."""
        with self._db.transaction() as conn:
            rows = conn.execute(_UNFINISHED, {"instance": instance}).all()
        return [Inbound.from_payload(row[0]) for row in rows]
