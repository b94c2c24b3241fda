"""Turns (docs/agents.md) and the token usage they cost, kept in the store.

A turn row is written when the agent starts and finished in the same transaction
that records its output (the outbox rows of its posts, its messages marked done),
so after a crash a turn is either recorded whole or still ``running``; a restart
marks the latter ``abandoned`` and its messages, still pending, wake a new turn. A
turn that failed before its agent ran is taken over by the thread's next start.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_execute, hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import AgentUsage
from nanoslack.store.tables import TurnRow as TurnRow

_TURN = Row(TurnRow)
_START = text(
    _TURN.insert(
        skip=("id", "error", "finished_at"),
        values={"status": "'running'", "posts": "0", "tokens": "0", "started_at": ":now"},
    )
    + " RETURNING id"
)
# A thread's turn left ``running`` by an attempt of this run that never got to its agent
# (see ``Turns.start``), and taking it over.
_LEFT_RUNNING = text(
    "SELECT id FROM turns WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND status = 'running' ORDER BY id DESC LIMIT 1"
)
_TAKE_OVER = text(
    _TURN.update(
        {
            "reply_thread_ts": ":reply_thread_ts",
            "sender_id": ":sender_id",
            "through_ts": ":through_ts",
            "messages": ":messages",
            "wrapping_up": ":wrapping_up",
            "started_at": ":now",
        },
        also="status = 'running'",
    )
)
_FINISH = text(
    _TURN.update(
        {"status": ":status", "posts": ":posts", "error": ":error", "finished_at": ":now"},
        also="status = 'running'",
    )
)
# Each model call's tokens, as it is made: the room's budget counts a turn under way.
_ADD_TOKENS = text(_TURN.update({"tokens": "tokens + :tokens"}))
_ABANDON = text(
    _TURN.update(
        {"status": "'abandoned'", "finished_at": ":now"}, where=("instance",), also="status = 'running'"
    )
)
# The newest message a finished turn answered in this thread: the next turn's
# transcript starts after it.
_LAST_THROUGH = text(
    "SELECT max(through_ts) FROM turns WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND status IN ('done', 'silent', 'failed', 'budget')"
)
# Whether a turn (under way or finished) was shown the message ``ts`` of this thread: an
# abandoned turn's messages run again, so it showed nothing that counts.
_SHOWN = text(
    "SELECT 1 FROM turns WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND through_ts >= :ts AND status <> 'abandoned' LIMIT 1"
)
_RECENT = text(f"SELECT {_TURN.sql} FROM turns ORDER BY id DESC LIMIT :limit")
_RECENT_OF = text(f"SELECT {_TURN.sql} FROM turns WHERE instance = :instance ORDER BY id DESC LIMIT :limit")
_GET = text(f"SELECT {_TURN.sql} FROM turns WHERE id = :id")
# The turns that answered a turn's asks (``thread_key`` ``ask:<turn>:<n>``: docs/agents.md).
_ASKED = text(f"SELECT {_TURN.sql} FROM turns WHERE thread_key LIKE :prefix ORDER BY id")
_ADD_USAGE = text(
    Row(AgentUsage).insert()
    + " ON CONFLICT (instance, day) DO UPDATE SET tokens = agent_usage.tokens + excluded.tokens"
)
_USED = text("SELECT tokens FROM agent_usage WHERE instance = :instance AND day = :day")
# Tokens the room's turns used since a moment, every instance together (NANOSLACK_ROOM_TOKENS).
_ROOM_TOKENS = text(
    "SELECT coalesce(sum(tokens), 0) FROM turns WHERE channel = :room AND started_at >= :since"
)


def utc_day(at: float | None = None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if at is None else at))


class Turns:
    def __init__(self, db: Database) -> None:
        self._db = db

    def start(
        self,
        *,
        instance: str,
        channel: str,
        thread_key: str,
        reply_thread_ts: str,
        sender_id: str,
        through_ts: str,
        messages: int,
        wrapping_up: bool,
    ) -> int:
        """The turn's id: a new row, or the thread's row an earlier attempt left ``running``.

        The scheduler runs one turn per thread at a time, and a restart abandons what a
        previous run left running, so a running row of this thread is an attempt that
        failed between its start and its agent (the store went away while the turn read
        what its tools need, or the COMMIT of its start was lost on the way back while
        the server kept it). This attempt is that turn, not a second one beside it."""
        params = {
            "instance": instance,
            "channel": channel,
            "thread_key": thread_key,
            "reply_thread_ts": reply_thread_ts,
            "sender_id": sender_id,
            "through_ts": through_ts,
            "messages": messages,
            "wrapping_up": wrapping_up,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            # A turn's statements: the driver's fast path.
            left = hot_first(conn, _LEFT_RUNNING, params)
            if left is not None and hot_execute(conn, _TAKE_OVER, {**params, "id": left[0]}) == 1:
                return int(left[0])
            row = hot_first(conn, _START, params)
            assert row is not None
            return int(row[0])

    def finish(self, turn_id: int, status: str, *, posts: int = 0, error: str | None = None) -> bool:
        """False when the turn was no longer running (abandoned by a restart). Its tokens
        were counted as they were spent (``add_tokens``)."""
        params = {
            "id": turn_id,
            "status": status,
            "posts": posts,
            "error": error[:500] if error else None,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            return hot_execute(conn, _FINISH, params) == 1

    def add_tokens(self, turn_id: int, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._db.transaction() as conn:
            conn.execute(_ADD_TOKENS, {"id": turn_id, "tokens": tokens})

    def abandon_running(self, instance: str) -> int:
        """At start: turns a previous run left ``running`` will never finish."""
        with self._db.transaction() as conn:
            return int(conn.execute(_ABANDON, {"instance": instance, "now": time.time()}).rowcount)

    def last_through(self, instance: str, channel: str, thread_key: str) -> str | None:
        params = {"instance": instance, "channel": channel, "thread_key": thread_key}
        with self._db.read() as conn:
            row = hot_first(conn, _LAST_THROUGH, params)
        return None if row is None or row[0] is None else str(row[0])

    def shown(self, instance: str, channel: str, thread_key: str, ts: str) -> bool:
        """Whether a turn of this thread, under way or finished, was shown the message ``ts``
        (an edit of it is then news for the next turn: docs/agents.md, "Edits and deletes")."""
        params = {"instance": instance, "channel": channel, "thread_key": thread_key, "ts": ts}
        with self._db.read() as conn:
            return hot_first(conn, _SHOWN, params) is not None

    def get(self, turn_id: int) -> TurnRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": turn_id}).first()
        return _TURN.first(r)

    def asked_by(self, turn_id: int) -> list[TurnRow]:
        """The turns that answered this turn's ``ask_agent`` calls, oldest first."""
        with self._db.read() as conn:
            rows = conn.execute(_ASKED, {"prefix": f"ask:{turn_id}:%"}).all()
        return _TURN.all(rows)

    def recent(self, *, instance: str | None = None, limit: int = 20) -> list[TurnRow]:
        with self._db.transaction() as conn:
            if instance is None:
                rows = conn.execute(_RECENT, {"limit": limit}).all()
            else:
                rows = conn.execute(_RECENT_OF, {"instance": instance, "limit": limit}).all()
        return _TURN.all(rows)

    def room_tokens(self, room: str, *, since: float) -> int:
        with self._db.transaction() as conn:
            row = hot_first(conn, _ROOM_TOKENS, {"room": room, "since": since})
        return int(row[0]) if row and row[0] is not None else 0

    def add_usage(self, instance: str, tokens: int, *, day: str | None = None) -> None:
        if tokens <= 0:
            return
        with self._db.transaction() as conn:
            conn.execute(_ADD_USAGE, {"instance": instance, "day": day or utc_day(), "tokens": tokens})

    def used_today(self, instance: str, *, day: str | None = None) -> int:
        with self._db.transaction() as conn:
            value = conn.execute(_USED, {"instance": instance, "day": day or utc_day()}).scalar()
        return int(value or 0)
