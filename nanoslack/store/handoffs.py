"""Handoffs between instances (docs/agents.md ``send_to_agent``), as a record."""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.inbound import InboxKey
from nanoslack.store.database import Database
from nanoslack.store.messages import Messages
from nanoslack.store.rows import Row
from nanoslack.store.tables import HandoffRow as HandoffRow

_HANDOFF = Row(HandoffRow)
_ADD = text(_HANDOFF.insert(skip=("id",), values={"created_at": ":now"}))
_WAITING = text(f"SELECT {_HANDOFF.sql} FROM handoffs WHERE waits_on = :key ORDER BY id")
_DELIVERED = text(
    "UPDATE handoffs SET ts = :ts, thread_key = :thread_key, waits_on = NULL"
    " WHERE id = :id AND waits_on IS NOT NULL"
)
# The run's post will never be in Slack: its waiting handoffs have no thread to go to.
_ABANDON = text("UPDATE handoffs SET waits_on = NULL WHERE id = :id AND waits_on IS NOT NULL")
_RECENT = text(f"SELECT {_HANDOFF.sql} FROM handoffs ORDER BY id DESC LIMIT :limit")
# The trace a recipient's turn continues: the handoff that wrote its waking message.
_TRACE_OF = text(
    "SELECT traceparent FROM handoffs WHERE to_instance = :instance AND channel = :channel AND ts = :ts"
    " ORDER BY id DESC LIMIT 1"
)


class Handoffs:
    def __init__(self, db: Database) -> None:
        self._db = db

    def add(
        self,
        *,
        from_instance: str,
        to_instance: str,
        channel: str,
        thread_key: str,
        text: str,
        depth: int,
        turn_id: int,
        ts: str,
        traceparent: str | None = None,
        waits_on: str | None = None,
    ) -> None:
        """``waits_on``: a routine's handoff, the outbox key of the post whose thread its
        answer goes to (``deliver_waiting``)."""
        params = {
            "from_instance": from_instance,
            "to_instance": to_instance,
            "channel": channel,
            "thread_key": thread_key,
            "text": text,
            "depth": depth,
            "turn_id": turn_id,
            "ts": ts,
            "traceparent": traceparent,
            "waits_on": waits_on,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_ADD, params)

    def deliver_waiting(self, post_key: str, thread_ts: str, messages: Messages) -> list[str]:
        """The handoffs waiting for the post ``post_key`` (a routine's run, docs/routines.md),
        delivered into its thread now that it has its ts: each recipient's message made
        pending there; the recipients. In the transaction that records the post sent, so
        a crash leaves both or neither, and a post recorded twice delivers nothing twice."""
        delivered: list[str] = []
        with self._db.transaction() as conn:
            for row in _HANDOFF.all(conn.execute(_WAITING, {"key": post_key}).all()):
                key = InboxKey(row.to_instance, row.channel, row.ts)
                ts = messages.deliver(key, thread_ts)
                if ts is not None:
                    delivered.append(row.to_instance)
                params = {"id": row.id, "ts": ts or row.ts, "thread_key": thread_ts}
                conn.execute(_DELIVERED, params)
        return delivered

    def abandon_waiting(self, post_key: str) -> list[str]:
        """The handoffs waiting for the post ``post_key``, which Slack refused for good: they
        wait no more (their messages stay ``waiting``, never answered, until retention); the
        recipients, for the log line that says why."""
        with self._db.transaction() as conn:
            rows = _HANDOFF.all(conn.execute(_WAITING, {"key": post_key}).all())
            for row in rows:
                conn.execute(_ABANDON, {"id": row.id})
        return [row.to_instance for row in rows]

    def recent(self, limit: int = 50) -> list[HandoffRow]:
        with self._db.transaction() as conn:
            return _HANDOFF.all(conn.execute(_RECENT, {"limit": limit}).all())

    def traceparent(self, instance: str, channel: str, ts: str) -> str | None:
        """The trace of the handoff that wrote ``instance``'s message ``ts`` (None: none, or
        traces were off when it was written)."""
        with self._db.read() as conn:
            value = conn.execute(_TRACE_OF, {"instance": instance, "channel": channel, "ts": ts}).scalar()
        return str(value) if value else None
