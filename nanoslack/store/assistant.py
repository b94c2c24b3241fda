"""The assistant pane's threads (docs/agent-surface.md): which channel a person was viewing
when they opened the instance's pane or last switched channels with it open.

Recorded from ``assistant_thread_started`` and ``assistant_thread_context_changed``; the
next turn in that DM is told ``[Viewing #<channel>]``. One row per thread, replaced by
every change (``assistant_threads``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import AssistantThread

_RECORD = text(
    Row(AssistantThread).insert(values={"updated_at": ":now"})
    + " ON CONFLICT (instance, channel, thread_ts) DO UPDATE SET user_id = excluded.user_id,"
    " context_channel = excluded.context_channel, context_name = excluded.context_name,"
    " updated_at = excluded.updated_at"
)


@dataclass(frozen=True, slots=True)
class Viewing:
    channel: str
    name: str | None


_VIEWING_ROW = Row(
    Viewing, table="assistant_threads", columns={"channel": "context_channel", "name": "context_name"}
)
# A thread whose context never named a channel is no viewing (``viewing`` skips it).
_VIEWING = text(
    f"SELECT {_VIEWING_ROW.sql} FROM assistant_threads"
    " WHERE instance = :instance AND channel = :channel ORDER BY updated_at DESC LIMIT 1"
)


class AssistantThreads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self,
        *,
        instance: str,
        channel: str,
        thread_ts: str,
        user_id: str | None,
        context_channel: str | None,
        context_name: str | None = None,
    ) -> None:
        params = {
            "instance": instance,
            "channel": channel,
            "thread_ts": thread_ts,
            "user_id": user_id,
            "context_channel": context_channel,
            "context_name": context_name,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_RECORD, params)

    def viewing(self, instance: str, channel: str) -> Viewing | None:
        """The channel the person in this DM last viewed with the pane open, if any."""
        with self._db.transaction() as conn:
            row = conn.execute(_VIEWING, {"instance": instance, "channel": channel}).first()
        if row is None or not row[0]:
            return None
        viewing = _VIEWING_ROW.read(row)
        return Viewing(viewing.channel, viewing.name or None)
