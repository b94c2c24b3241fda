"""Messages as one instance saw them, and where each stands (docs/architecture.md).

What each status means: ``MessageRow`` (``tables``). Status changes are guarded by
the expected old status, so a replay (held → pending) happens exactly once even if two
deciders race.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, text

from nanoslack.inbound import Inbound, InboxKey
from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all, hot_execute, hot_execute_in_order, hot_first, in_order
from nanoslack.store.files import MessageFiles
from nanoslack.store.rows import Row
from nanoslack.store.tables import MessageRow as MessageRow
from nanoslack.store.writebehind import WriteBehind

_MESSAGE = Row(MessageRow, empty=("handoff_depth",))
_ADD_VALUES = {"messaging_group_id": ":group_id", "created_at": ":now"}
_ADD = in_order(
    text(_MESSAGE.insert(skip=("handoff_depth", "edit_of"), values=_ADD_VALUES) + " ON CONFLICT DO NOTHING"),
    # The order ``Messages.add`` gives the values in.
    ("instance", "channel", "ts", "thread_key", "group_id", "sender_id", "text", "status", "hop", "hop_limit")
    + ("now",),
)
# What the fleet itself writes (a handoff, a wake): pending, of no group, no hop.
_FLEET_WRITTEN = {
    "messaging_group_id": "NULL",
    "edit_of": "NULL",
    "status": "'pending'",
    "hop": "0",
    "hop_limit": "0",
    "created_at": ":now",
}
_GET = text(
    f"SELECT {_MESSAGE.sql} FROM messages WHERE instance = :instance AND channel = :channel AND ts = :ts"
)
_SET_STATUS_FROM = text(_MESSAGE.update(["status"], also="status = :from_status"))
_PENDING = text(
    f"SELECT {_MESSAGE.sql} FROM messages WHERE instance = :instance AND status = 'pending' ORDER BY ts"
)
# The threads with pending messages, in the order their first one arrived: what the
# turn scheduler asks on every wake (one row per thread, not per message).
_PENDING_THREADS_SQL = (
    "SELECT channel, thread_key FROM messages{indexed} WHERE instance = :instance AND status = 'pending'"
    " GROUP BY channel, thread_key ORDER BY min(ts)"
)
_PENDING_THREADS = text(_PENDING_THREADS_SQL.format(indexed=""))
_PENDING_THREADS_SQLITE = text(_PENDING_THREADS_SQL.format(indexed=" INDEXED BY messages_pending"))
_HELD = text(
    f"SELECT {_MESSAGE.sql} FROM messages"
    " WHERE instance = :instance AND sender_id = :sender_id AND status = 'held'"
    " ORDER BY ts"
)
_MOVE_HELD = text(
    _MESSAGE.update(["status"], where=("instance", "sender_id"), also="status = 'held'")
    + " RETURNING channel, ts"
)
# A thread as the agent may read it: its messages after the instance's last turn there,
# never held or refused ones (from senders nobody has let in).
# ``ts >= :thread_key``: a thread's messages are its root (whose ts is the key) and later
# ones, so the primary key's range starts at the root, not at the channel's first
# message (a turn read the whole channel since its last turn there). DMs
# (key "") are one thread.
_THREAD = text(
    f"SELECT {_MESSAGE.sql} FROM messages WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND ts >= :thread_key AND ts > :since AND ts <= :until"
    " AND status IN ('context', 'pending', 'done', 'deleted')"
    " ORDER BY ts DESC LIMIT :limit"
)
_CONSUME_EVERYONES = text(
    _MESSAGE.update(
        {"status": "'done'"}, where={"channel": ":channel"}, also="ts IN :ts AND status = 'pending'"
    )
).bindparams(bindparam("ts", expanding=True))
_ADD_HANDOFF = text(
    _MESSAGE.insert(values={**_FLEET_WRITTEN, "handoff_depth": ":depth"}) + " ON CONFLICT DO NOTHING"
)
# A routine's handoff before the run's post has its ts (docs/routines.md): no turn reads it.
_ADD_WAITING = text(
    _MESSAGE.insert(values={**_FLEET_WRITTEN, "status": "'waiting'", "handoff_depth": ":depth"})
    + " ON CONFLICT DO NOTHING"
)
_DROP_WAITING = text(
    "DELETE FROM messages WHERE instance = :instance AND channel = :channel AND ts = :ts"
    " AND status = 'waiting'"
)
# A message in Slack that an instance must answer though nothing mentioned it (a vote put
# to the room wakes its bots): pending, whether or not the instance stored it yet.
_WAKE = text(
    _MESSAGE.insert(skip=("handoff_depth",), values=_FLEET_WRITTEN)
    + " ON CONFLICT (instance, channel, ts) DO UPDATE SET status = 'pending'"
    " WHERE messages.status = 'context'"
)
# SQLite's planner, without statistics, prefers the primary key's (instance, channel)
# to the small partial index of pending rows, and so read every message of the
# channel on every turn: on SQLite these name the index (``INDEXED BY``);
# PostgreSQL's planner has statistics.
_PENDING_IN_THREAD_SQL = (
    "SELECT {columns} FROM messages{indexed} WHERE instance = :instance AND status = 'pending'"
    " AND channel = :channel AND thread_key = :thread_key ORDER BY ts"
)
_HAS_PENDING_SQL = (
    "SELECT 1 FROM messages{indexed} WHERE instance = :instance AND status = 'pending'"
    " AND channel = :channel AND thread_key = :thread_key LIMIT 1"
)
_HAS_PENDING = text(_HAS_PENDING_SQL.format(indexed=""))
_HAS_PENDING_SQLITE = text(_HAS_PENDING_SQL.format(indexed=" INDEXED BY messages_pending"))
_PENDING_IN_THREAD = text(_PENDING_IN_THREAD_SQL.format(columns=_MESSAGE.sql, indexed=""))
_PENDING_IN_THREAD_SQLITE = text(
    _PENDING_IN_THREAD_SQL.format(columns=_MESSAGE.sql, indexed=" INDEXED BY messages_pending")
)
# The last human message this instance saw in the room: a pause lasts until the next one.
_LAST_HUMAN = text(
    "SELECT ts FROM messages WHERE instance = :instance AND channel = :room"
    " AND sender_id NOT LIKE 'slack:bot:%' ORDER BY CAST(ts AS REAL) DESC LIMIT 1"
)
_THREAD_COUNT = text(
    "SELECT count(*) FROM messages WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key AND ts > :since AND ts <= :until"
    " AND status IN ('context', 'pending', 'done', 'deleted')"
)
# Edits and deletes (docs/agents.md): a message's text replaced before a turn showed it; an
# edit made after, as a row of its own; a deleted message's text gone, its row a tombstone
# (its ts keeps its place in the thread), the rows of its later edits gone with it.
_SET_TEXT = text(_MESSAGE.update(["text"], also="status <> 'deleted'"))
_MARK_EDIT = text(_MESSAGE.update(["edit_of"]))
_TOMBSTONE = text(_MESSAGE.update({"text": "''", "status": "'deleted'"}))
_DROP_EDITS = text("DELETE FROM messages WHERE instance = :instance AND channel = :channel AND edit_of = :ts")
_STATUSES = text(
    "SELECT ts, status FROM messages WHERE instance = :instance AND channel = :channel AND ts IN :ts"
).bindparams(bindparam("ts", expanding=True))
_EDITS_OF = text(
    "SELECT ts FROM messages WHERE instance = :instance AND channel = :channel AND edit_of = :ts"
)
_DROP = text("DELETE FROM messages WHERE instance = :instance AND channel = :channel AND ts = :ts")
# Later than any ts Slack mints (compared as text, like every ts here).
_LAST_TS = "999999999999.999999999"
_PENDING_COUNT = text("SELECT count(*) FROM messages WHERE status = 'pending'")
_COUNT_BY_STATUS = text("SELECT status, count(*) FROM messages WHERE instance = :instance GROUP BY status")


# The statuses a turn may still answer (``held`` once its sender is let in).
_MAY_BE_ANSWERED = frozenset({"pending", "held"})


class Messages:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._added = WriteBehind(db, _ADD)
        self._files = MessageFiles(db)
        # How many times stored words of a conversation changed in this process (an edit,
        # a deletion), by (instance, channel): a turn whose transcript was built across
        # such a change builds it again (``TurnScheduler``; docs/agents.md, "Edits and deletes").
        self._changed: dict[tuple[str, str], int] = {}

    def changes(self, instance: str, channel: str) -> int:
        """The count of edits and deletions applied in the conversation so far (this process)."""
        return self._changed.get((instance, channel), 0)

    def _changing(self, key: InboxKey) -> None:
        where = (key.instance, key.channel)
        self._changed[where] = self._changed.get(where, 0) + 1

    def batched(self) -> contextlib.AbstractContextManager[None]:
        """Inside one transaction (a pipeline batch): ``add`` keeps its rows, written in one
        call at the end or before anything reads them (``store/writebehind.py``)."""
        return self._added.batched()

    def flush(self) -> None:
        self._added.flush()

    def add(self, msg: Inbound, *, group_id: int | None, status: str) -> bool:
        """Store ``msg``; False when its (instance, channel, ts) is already there (always
        True inside ``batched``, where the row is written later)."""
        params = (
            msg.instance,
            msg.channel,
            msg.ts,
            msg.thread_key or "",
            group_id,
            msg.sender_id,
            msg.text,
            status,
            msg.hop,
            msg.hop_limit,
            time.time(),
        )
        # Only a message a turn may answer needs its files: room context never does (nine
        # rows in ten of a file shared in a room of ten). Its own row, in the batch's transaction.
        if msg.files and status in _MAY_BE_ANSWERED:
            self._files.add(msg)
        if self._added.keep(params):  # a pipeline batch: no transaction to enter per row
            return True
        with self._db.transaction() as conn:
            return hot_execute_in_order(conn, _ADD, params) == 1

    def get(self, key: InboxKey) -> MessageRow | None:
        self.flush()
        with self._db.transaction() as conn:
            r = conn.execute(_GET, key._asdict()).first()
        return _MESSAGE.first(r)

    def set_statuses(self, keys: Sequence[InboxKey], status: str, *, from_status: str) -> int:
        self.flush()
        with self._db.transaction() as conn:
            return sum(
                hot_execute(
                    conn, _SET_STATUS_FROM, {**k._asdict(), "status": status, "from_status": from_status}
                )
                for k in keys
            )

    def set_text(self, key: InboxKey, text: str) -> bool:
        """An edit before any turn showed the message: the turn shows the newest text."""
        self._changing(key)
        self.flush()
        with self._db.transaction() as conn:
            return hot_execute(conn, _SET_TEXT, {**key._asdict(), "text": text}) == 1

    def mark_edit(self, key: InboxKey, edit_of: str) -> None:
        """The row at ``key`` is the edit of the message ``edit_of`` (its later turn's
        ``[edited]`` line)."""
        self.flush()
        with self._db.transaction() as conn:
            conn.execute(_MARK_EDIT, {**key._asdict(), "edit_of": edit_of})

    def forget(self, key: InboxKey) -> None:
        """Remove the row (an unseen edit routes its message again, with the new text)."""
        self._changing(key)
        self.flush()
        with self._db.transaction() as conn:
            conn.execute(_DROP, key._asdict())

    def statuses(self, instance: str, channel: str, ts: Sequence[str]) -> dict[str, str]:
        """The status of each of the messages ``ts`` still stored, by ts."""
        if not ts:
            return {}
        self.flush()
        with self._db.read() as conn:
            rows = conn.execute(_STATUSES, {"instance": instance, "channel": channel, "ts": list(ts)}).all()
        return {str(r[0]): str(r[1]) for r in rows}

    def edits_of(self, key: InboxKey) -> list[str]:
        """The ts of the rows of the message's edits made after a turn was shown it."""
        self.flush()
        with self._db.read() as conn:
            return [str(r[0]) for r in conn.execute(_EDITS_OF, key._asdict()).all()]

    def tombstone(self, key: InboxKey) -> bool:
        """A deleted message: its text and its edits' rows gone, the row kept as ``deleted``
        (never answered; a later transcript shows that a message was deleted). False when
        the instance never stored it."""
        self._changing(key)
        self.flush()
        with self._db.transaction() as conn:
            conn.execute(_DROP_EDITS, key._asdict())
            return hot_execute(conn, _TOMBSTONE, key._asdict()) == 1

    def pending(self, instance: str) -> list[MessageRow]:
        self.flush()
        with self._db.transaction() as conn:
            return _MESSAGE.all(conn.execute(_PENDING, {"instance": instance}).all())

    def consume_everyones(self, channel: str, ts: list[str]) -> int:
        """Every instance's pending copy of these messages, consumed without a turn (a round
        an owner stopped: nothing of it may run after the resume)."""
        if not ts:
            return 0
        self.flush()
        with self._db.transaction() as conn:
            return int(conn.execute(_CONSUME_EVERYONES, {"channel": channel, "ts": ts}).rowcount)

    def add_internal(
        self,
        *,
        instance: str,
        channel: str,
        thread_key: str,
        sender_id: str,
        text: str,
        depth: int,
        waiting: bool = False,
    ) -> str:
        """A message the fleet itself gives ``instance`` (a handoff from a sibling, ``depth``
        > 0; a round's closing brief for the chief), pending for its turn; its ts (minted
        here, after every ts Slack gave so far: a turn answers in ts order). ``waiting``: a
        routine's handoff, kept from every turn until ``deliver`` gives it its thread."""
        now = time.time()
        stmt = _ADD_WAITING if waiting else _ADD_HANDOFF
        self.flush()
        with self._db.transaction() as conn:
            for bump in range(1000):  # two handoffs in the same microsecond: the next one
                ts = f"{now + bump * 1e-6:.6f}"
                params = _fleet_params(instance, channel, ts, thread_key, sender_id, text, now)
                if conn.execute(stmt, {**params, "depth": depth}).rowcount == 1:
                    return ts
        raise RuntimeError("no free ts for a message of the fleet")

    def deliver(self, key: InboxKey, thread_key: str) -> str | None:
        """A ``waiting`` message made pending in ``thread_key``, at a ts minted now (after the
        post that started that thread: a turn shows its thread up to the message it answers);
        its new ts, or None when it is not waiting (delivered already, or pruned)."""
        with self._db.transaction() as conn:
            row = _MESSAGE.first(conn.execute(_GET, key._asdict()).first())
            if row is None or row.status != "waiting":
                return None
            conn.execute(_DROP_WAITING, key._asdict())
            return self.add_internal(
                instance=row.instance,
                channel=row.channel,
                thread_key=thread_key,
                sender_id=row.sender_id,
                text=row.text,
                depth=row.handoff_depth,
            )

    def wake(
        self, *, instance: str, channel: str, ts: str, thread_key: str, sender_id: str, text: str
    ) -> bool:
        """Make the Slack message ``ts`` one ``instance`` answers: stored pending, or moved
        from room context to pending. False when it was already pending, answered or held."""
        params = _fleet_params(instance, channel, ts, thread_key, sender_id, text, time.time())
        self.flush()
        with self._db.transaction() as conn:
            return int(conn.execute(_WAKE, params).rowcount) == 1

    def thread_count(
        self,
        instance: str,
        channel: str,
        thread_key: str,
        since_ts: str | None = None,
        *,
        until: str | None = None,
    ) -> int:
        """How many messages ``thread`` could show (before its limit)."""
        params = _thread_params(instance, channel, thread_key, since_ts, until)
        self.flush()
        with self._db.transaction() as conn:
            return int(conn.execute(_THREAD_COUNT, params).scalar_one())

    def pending_threads(self, instance: str) -> list[tuple[str, str]]:
        """(channel, thread_key) of every thread with a pending message, oldest first."""
        self.flush()
        with self._db.read() as conn:
            stmt = _PENDING_THREADS_SQLITE if self._db.is_sqlite else _PENDING_THREADS
            rows = hot_all(conn, stmt, {"instance": instance})
        return [(str(r[0]), str(r[1])) for r in rows]

    def has_pending(self, instance: str, channel: str, thread_key: str) -> bool:
        """Whether the thread has a message waiting for a turn (one indexed row)."""
        params = {"instance": instance, "channel": channel, "thread_key": thread_key}
        self.flush()
        with self._db.read() as conn:
            stmt = _HAS_PENDING_SQLITE if self._db.is_sqlite else _HAS_PENDING
            return hot_first(conn, stmt, params) is not None

    def pending_in_thread(self, instance: str, channel: str, thread_key: str) -> list[MessageRow]:
        params = {"instance": instance, "channel": channel, "thread_key": thread_key}
        self.flush()
        with self._db.read() as conn:
            stmt = _PENDING_IN_THREAD_SQLITE if self._db.is_sqlite else _PENDING_IN_THREAD
            return _MESSAGE.all(hot_all(conn, stmt, params))

    def held(self, instance: str, sender_id: str) -> list[MessageRow]:
        self.flush()
        with self._db.transaction() as conn:
            return [
                _MESSAGE.read(r)
                for r in conn.execute(_HELD, {"instance": instance, "sender_id": sender_id}).all()
            ]

    def release_held(self, instance: str, sender_id: str, status: str) -> list[InboxKey]:
        """Move every held message of ``sender_id`` to ``status``; the keys that moved."""
        params = {"instance": instance, "sender_id": sender_id, "status": status}
        self.flush()
        with self._db.transaction() as conn:
            rows = conn.execute(_MOVE_HELD, params).all()
        return sorted(InboxKey(instance, str(r[0]), str(r[1])) for r in rows)

    def thread(
        self,
        instance: str,
        channel: str,
        thread_key: str,
        since_ts: str | None = None,
        *,
        until: str | None = None,
        limit: int = 100,
    ) -> list[MessageRow]:
        """The newest ``limit`` messages of a thread after ``since_ts`` and up to
        ``until`` (both ts), oldest first; never held or refused ones."""
        params = {**_thread_params(instance, channel, thread_key, since_ts, until), "limit": limit}
        self.flush()
        with self._db.read() as conn:
            rows = _MESSAGE.all(hot_all(conn, _THREAD, params))
        rows.reverse()
        return rows

    def last_human_ts(self, instance: str, room: str) -> str:
        self.flush()
        with self._db.read() as conn:
            row = hot_first(conn, _LAST_HUMAN, {"instance": instance, "room": room})
        return str(row[0]) if row else ""

    def counts(self, instance: str) -> dict[str, int]:
        self.flush()
        with self._db.transaction() as conn:
            return {
                str(r[0]): int(r[1]) for r in conn.execute(_COUNT_BY_STATUS, {"instance": instance}).all()
            }

    def pending_count(self) -> int:
        """Messages waiting for a turn, every instance's: the fleet's turn backlog."""
        self.flush()
        with self._db.transaction() as conn:
            return int(conn.execute(_PENDING_COUNT).scalar() or 0)


def _fleet_params(
    instance: str, channel: str, ts: str, thread_key: str, sender_id: str, text: str, now: float
) -> dict[str, Any]:
    """The parameters of a message the fleet writes itself (``_FLEET_WRITTEN``)."""
    return {
        "instance": instance,
        "channel": channel,
        "ts": ts,
        "thread_key": thread_key,
        "sender_id": sender_id,
        "text": text,
        "now": now,
    }


def _thread_params(
    instance: str, channel: str, thread_key: str, since_ts: str | None, until: str | None
) -> dict[str, Any]:
    """A thread's window, as ``thread`` and ``thread_count`` read it."""
    return {
        "instance": instance,
        "channel": channel,
        "thread_key": thread_key,
        "since": since_ts or "",
        "until": until or _LAST_TS,
    }
