"""The assistant pane's threads (docs/agent-surface.md): which channel a person was viewing
when they opened the instance's pane or last switched channels with it open.

Recorded from ``assistant_thread_started`` and ``assistant_thread_context_changed``; the
next turn in that DM is told ``[Viewing #<channel>]``. One row per thread, replaced by
every change (``assistant_threads``). An ``agent_view`` app's DM has no pane thread: its
row has ``thread_ts = ''``, made when a person opens the app's Messages tab (``opened``) and
given the context of ``app_context_changed``, which names no person: it is taken to be
the one who opened the Messages tab last (``last_opened``).
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
# Opening the Messages tab again keeps the context last seen there.
_OPENED = text(
    "INSERT INTO assistant_threads (instance, channel, thread_ts, user_id, updated_at)"
    " VALUES (:instance, :channel, '', :user_id, :now)"
    " ON CONFLICT (instance, channel, thread_ts) DO UPDATE SET user_id = excluded.user_id,"
    " updated_at = excluded.updated_at"
)
_LAST_OPENED = text(
    "SELECT channel FROM assistant_threads WHERE instance = :instance AND thread_ts = ''"
    " ORDER BY updated_at DESC LIMIT 1"
)
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

    def opened(self, *, instance: str, channel: str, user_id: str | None) -> None:
        """A person opened the Messages tab of an ``agent_view`` app: their DM ``channel``."""
        params = {"instance": instance, "channel": channel, "user_id": user_id, "now": time.time()}
        with self._db.transaction() as conn:
            conn.execute(_OPENED, params)

    def last_opened(self, instance: str) -> str | None:
        """The DM whose Messages tab was opened last (where ``app_context_changed`` applies)."""
        with self._db.transaction() as conn:
            row = conn.execute(_LAST_OPENED, {"instance": instance}).first()
        return str(row[0]) if row is not None else None
