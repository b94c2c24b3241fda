"""People's reactions to an instance's posts (docs/agents.md): kept so that the thread's
next turn is shown them once (``[reactions] <name> :<emoji>: on your message "…"``).

Only a reaction to a post this instance sent is kept (the outbox knows its posts by their
ts); the reaction wakes nothing. Shown by ts: a turn shows those newer than the thread's
previous turn and no newer than the message it answers, so each is shown once.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.inbound import is_dm_channel
from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import ReactionRow as ReactionRow

_REACTION = Row(ReactionRow)
_OWN_POST = text(
    "SELECT thread_ts, dm_user, text FROM outbox WHERE instance = :instance AND kind = 'post'"
    " AND status = 'sent' AND posted_channel = :channel AND posted_ts = :ts LIMIT 1"
)
_ADD = text(_REACTION.insert() + " ON CONFLICT DO NOTHING")
_IN_THREAD = text(
    f"SELECT {_REACTION.sql} FROM reactions WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND ts > :after AND ts <= :until ORDER BY ts LIMIT 20"
)
# How much of the post a line quotes.
EXCERPT_WORDS = 8


class Reactions:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, instance: str, channel: str, ts: str, user_id: str, emoji: str, item_ts: str) -> bool:
        """Kept when ``item_ts`` is a post of ``instance`` (False: someone else's message)."""
        with self._db.transaction() as conn:
            post = conn.execute(_OWN_POST, {"instance": instance, "channel": channel, "ts": item_ts}).first()
            if post is None:
                return False
            thread_ts, dm_user, body = post
            # A reply's thread; a DM's top level is its one thread; a room's top-level post starts its own.
            thread_key = thread_ts or ("" if dm_user or is_dm_channel(channel) else item_ts)
            words = str(body).split()
            excerpt = " ".join(words[:EXCERPT_WORDS]) + ("…" if len(words) > EXCERPT_WORDS else "")
            conn.execute(
                _ADD,
                {
                    "instance": instance,
                    "channel": channel,
                    "ts": ts,
                    "user_id": user_id,
                    "emoji": emoji,
                    "thread_key": thread_key,
                    "excerpt": excerpt,
                    "created_at": time.time(),
                },
            )
        return True

    def in_thread(
        self, instance: str, channel: str, thread_key: str, after: str | None, until: str
    ) -> list[ReactionRow]:
        params = {
            "instance": instance,
            "channel": channel,
            "thread_key": thread_key,
            "after": after or "0",
            "until": until,
        }
        with self._db.transaction() as conn:
            return _REACTION.all(conn.execute(_IN_THREAD, params).all())
