"""The outbox: posts decided in a transaction, sent later by the poster (docs/agents.md,
docs/architecture.md).

``dedupe_key`` is unique, so a decision replayed after a crash enqueues nothing new. A
row says what it is in typed columns (``purpose``, ``ask_id``, ``turn_id``), never in
its key: the key is an idempotency token and nothing else.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Literal

from sqlalchemy import bindparam, text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all, hot_execute
from nanoslack.store.rows import Row
from nanoslack.store.tables import OutboxFileRow as OutboxFileRow
from nanoslack.store.tables import OutboxRow as OutboxRow

_OUTBOX = Row(OutboxRow)
_FILE = Row(OutboxFileRow)
_ADD_FILE = text(_FILE.insert() + " ON CONFLICT DO NOTHING")
_FILE_OF = text(f"SELECT {_FILE.sql} FROM outbox_files WHERE outbox_id = :outbox_id")
# Recorded once: a second upload of the same row (which would mean the first was lost)
# never replaces the id a completion may already have used.
_UPLOADED = text(
    "UPDATE outbox_files SET file_id = :file_id WHERE outbox_id = :outbox_id AND file_id IS NULL"
)
_ENQUEUE = text(
    _OUTBOX.insert(
        skip=(
            "id",
            "blocks",
            "metadata_json",
            "error",
            "posted_channel",
            "posted_ts",
            "sent_at",
            "attempted_at",
        ),
        values={"status": "'queued'", "attempts": "0", "created_at": ":now"},
    )
    + " ON CONFLICT DO NOTHING RETURNING id"
)
_QUEUED = text(
    f"SELECT {_OUTBOX.sql} FROM outbox WHERE instance = :instance AND status = 'queued'"
    " ORDER BY id LIMIT :limit"
)
_GET = text(f"SELECT {_OUTBOX.sql} FROM outbox WHERE id = :id")
_SENDING = text(
    _OUTBOX.update(
        {"status": "'sending'", "posted_channel": ":channel", "attempted_at": ":now"},
        also="status = 'queued'",
    )
)
_IN_DOUBT = text(
    f"SELECT {_OUTBOX.sql} FROM outbox WHERE instance = :instance AND status = 'sending' ORDER BY id"
)
# A stream's ts, written as soon as Slack started it (the row stays in doubt until sent).
_STREAMING = text(_OUTBOX.update({"posted_ts": ":ts"}, also="status = 'sending'"))
_REQUEUE = text(_OUTBOX.update({"status": "'queued'"}, also="status = 'sending'"))
# What an instance already said in a thread: its next turn's transcript shows it.
_SENT_POSTS = text(
    "SELECT posted_ts, text FROM outbox WHERE instance = :instance AND kind = 'post' AND status = 'sent'"
    " AND posted_channel = :channel AND coalesce(thread_ts, '') = :thread_ts AND posted_ts > :since"
    " ORDER BY posted_ts DESC LIMIT :limit"
)
# A turn's replies the poster has not sent yet: the next turn of the thread may start
# before they reach Slack, and the agent must still see what it said.
# A top-level post of this instance whose ts is a thread's key: the thread is its own.
_OWN_ROOT = text(
    "SELECT text FROM outbox WHERE instance = :instance AND kind = 'post' AND status = 'sent'"
    " AND posted_channel = :channel AND coalesce(thread_ts, '') = '' AND posted_ts = :ts LIMIT 1"
)
_UNSENT_REPLIES = text(
    "SELECT text FROM outbox WHERE instance = :instance AND kind = 'post' AND purpose = 'reply'"
    " AND status IN ('queued', 'sending') AND channel = :channel AND coalesce(thread_ts, '') = :thread_ts"
    " ORDER BY id"
)
_OF_TURNS = text(
    "SELECT turn_id, text, status FROM outbox WHERE purpose = 'reply' AND kind = 'post' AND turn_id IN :ids"
    " ORDER BY id"
).bindparams(bindparam("ids", expanding=True))
_CANCEL_REPLIES = text(
    _OUTBOX.update(
        {"status": "'cancelled'"},
        where={"purpose": "'reply'", "status": "'queued'", "channel": ":channel"},
        also="coalesce(thread_ts, '') = :thread_ts",
    )
)
_ASKING = text(f"SELECT {_OUTBOX.sql} FROM outbox WHERE ask_id = :ask_id AND kind = 'post' ORDER BY id")
_BY_KEY = text(f"SELECT {_OUTBOX.sql} FROM outbox WHERE dedupe_key = :key")
_SENT = text(
    _OUTBOX.update(
        {
            "status": "'sent'",
            "posted_channel": ":channel",
            "posted_ts": ":ts",
            "sent_at": ":now",
            "error": "NULL",
        }
    )
)
_FAILED = text(
    _OUTBOX.update(
        {
            "attempts": "attempts + 1",
            "error": ":error",
            "status": "CASE WHEN :final THEN 'failed' ELSE 'queued' END",
        }
    )
)
_CANCEL = text(
    _OUTBOX.update({"status": "'cancelled'"}, where={"dedupe_key": ":key"}, also="status = 'queued'")
)

Purpose = Literal["reply", "notice", "ask", "post", "vote"]


class Outbox:
    def __init__(self, db: Database, on_queued: Callable[[str], None] | None = None) -> None:
        self._db = db
        # Called with the instance once a transaction that queued a row for it commits
        # (the fleet wakes that instance's poster); rows queued by another process are
        # found by the poster's poll.
        self._on_queued = on_queued
        # One callable per instance, so that a transaction queuing several rows for it
        # calls ``on_queued`` once (``Database.after_commit`` runs a callback once).
        self._wakes: dict[str, Callable[[], None]] = {}

    def enqueue(
        self,
        *,
        instance: str,
        dedupe_key: str,
        text: str,
        purpose: Purpose = "post",
        channel: str | None = None,
        dm_user: str | None = None,
        thread_ts: str | None = None,
        ask_id: int | None = None,
        turn_id: int | None = None,
        kind: str = "post",
        update_ts: str | None = None,
        update_of: str | None = None,
        vote_id: int | None = None,
    ) -> int | None:
        """The new row's id; None when ``dedupe_key`` was enqueued before (which makes
        the key a once-only claim: the pause notice of one pause is one row)."""
        params = {
            "instance": instance,
            "dedupe_key": dedupe_key,
            "kind": kind,
            "purpose": purpose,
            "ask_id": ask_id,
            "turn_id": turn_id,
            "update_of": update_of,
            "channel": channel,
            "dm_user": dm_user,
            "thread_ts": thread_ts,
            "update_ts": update_ts,
            "text": text,
            "now": time.time(),
            "vote_id": vote_id,
        }
        with self._db.transaction() as conn:
            # Every reply, notice and ask: on the driver's fast path (≈ 130 µs a row less
            # than SQLAlchemy's execute). All rows read, so the statement is finished.
            rows = hot_all(conn, _ENQUEUE, params)
            r = rows[0] if rows else None
            if r and self._on_queued is not None:
                self._db.after_commit(self._wake(instance))
        return int(r[0]) if r else None

    def enqueue_file(
        self,
        *,
        instance: str,
        dedupe_key: str,
        turn_id: int,
        channel: str,
        thread_ts: str | None,
        filename: str,
        title: str,
        content: str,
        comment: str,
    ) -> int | None:
        """A turn's ``send_file`` (docs/agents.md): an outbox row of ``kind = file`` (``text``
        the comment) and the file it uploads, in one transaction. None: queued before."""
        with self._db.transaction() as conn:
            outbox_id = self.enqueue(
                instance=instance,
                dedupe_key=dedupe_key,
                kind="file",
                purpose="reply",
                turn_id=turn_id,
                channel=channel,
                thread_ts=thread_ts,
                text=comment,
            )
            if outbox_id is not None:
                params = {"outbox_id": outbox_id, "filename": filename, "title": title, "content": content}
                conn.execute(_ADD_FILE, {**params, "file_id": None})
        return outbox_id

    def file_of(self, outbox_id: int) -> OutboxFileRow | None:
        """The file a ``kind = file`` row uploads, with Slack's id once it is up."""
        with self._db.transaction() as conn:
            return _FILE.first(conn.execute(_FILE_OF, {"outbox_id": outbox_id}).first())

    def file_uploaded(self, outbox_id: int, file_id: str) -> None:
        """The bytes are up as Slack's file ``file_id``: recorded before it is completed."""
        with self._db.transaction() as conn:
            conn.execute(_UPLOADED, {"outbox_id": outbox_id, "file_id": file_id})

    def _wake(self, instance: str) -> Callable[[], None]:
        wake = self._wakes.get(instance)
        if wake is None:
            assert self._on_queued is not None
            wake = self._wakes[instance] = functools.partial(self._on_queued, instance)
        return wake

    def queued(self, instance: str, limit: int = 50) -> list[OutboxRow]:
        with self._db.transaction() as conn:
            return _OUTBOX.all(conn.execute(_QUEUED, {"instance": instance, "limit": limit}).all())

    def get(self, outbox_id: int) -> OutboxRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": outbox_id}).first()
        return _OUTBOX.first(r)

    def get_by_key(self, dedupe_key: str) -> OutboxRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_BY_KEY, {"key": dedupe_key}).first()
        return _OUTBOX.first(r)

    def mark_sent(self, outbox_id: int, channel: str, ts: str) -> None:
        with self._db.transaction() as conn:  # every post: the fast path, as enqueue
            hot_execute(conn, _SENT, {"id": outbox_id, "channel": channel, "ts": ts, "now": time.time()})

    def mark_sending(self, outbox_id: int, channel: str) -> bool:
        """About to call Slack for this row: if the process dies before
        ``mark_sent``, the row is *in doubt*, not forgotten and not blindly resent.
        The moment is kept (``attempted_at``): the post, if it landed, is newer."""
        params = {"id": outbox_id, "channel": channel, "now": time.time()}
        with self._db.transaction() as conn:
            return hot_execute(conn, _SENDING, params) == 1

    def mark_streaming(self, outbox_id: int, ts: str) -> None:
        """Slack started streaming this row as message ``ts``: a run that dies before
        ``mark_sent`` finishes that message instead of posting another."""
        with self._db.transaction() as conn:
            hot_execute(conn, _STREAMING, {"id": outbox_id, "ts": ts})

    def in_doubt(self, instance: str) -> list[OutboxRow]:
        """Rows a previous run was sending when it stopped."""
        with self._db.transaction() as conn:
            return _OUTBOX.all(conn.execute(_IN_DOUBT, {"instance": instance}).all())

    def requeue(self, outbox_id: int) -> None:
        with self._db.transaction() as conn:
            conn.execute(_REQUEUE, {"id": outbox_id})

    def mark_failed(self, outbox_id: int, error: str, final: bool) -> None:
        with self._db.transaction() as conn:
            conn.execute(_FAILED, {"id": outbox_id, "error": error[:500], "final": final})

    def sent_posts(
        self, instance: str, channel: str, thread_ts: str, since_ts: str | None, *, limit: int = 50
    ) -> list[tuple[str, str]]:
        """``(ts, text)`` of this instance's posts in a thread after ``since_ts``, oldest first."""
        params = {
            "instance": instance,
            "channel": channel,
            "thread_ts": thread_ts,
            "since": since_ts or "",
            "limit": limit,
        }
        with self._db.read() as conn:
            rows = hot_all(conn, _SENT_POSTS, params)  # every turn's transcript
        return [(str(r[0]), str(r[1])) for r in reversed(rows)]

    def own_root(self, instance: str, channel: str, ts: str) -> str | None:
        """The text of this instance's top-level post ``ts`` (a routine's), if it is one."""
        with self._db.read() as conn:
            rows = hot_all(conn, _OWN_ROOT, {"instance": instance, "channel": channel, "ts": ts})
        return str(rows[0][0]) if rows else None

    def unsent_replies(self, instance: str, channel: str, thread_ts: str) -> list[str]:
        """Texts of this instance's turn replies in a thread still waiting to be sent."""
        params = {"instance": instance, "channel": channel, "thread_ts": thread_ts}
        with self._db.read() as conn:
            return [str(r[0]) for r in hot_all(conn, _UNSENT_REPLIES, params)]

    def replies_of(self, turn_ids: list[int]) -> list[tuple[int, str, str]]:
        """``(turn id, text, status)`` of these turns' replies, in the order they were queued."""
        if not turn_ids:
            return []
        with self._db.transaction() as conn:
            rows = conn.execute(_OF_TURNS, {"ids": turn_ids}).all()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def cancel_replies(self, channel: str, thread_ts: str) -> int:
        """Every instance's replies still queued for a thread (a round an owner stopped)."""
        with self._db.transaction() as conn:
            return int(conn.execute(_CANCEL_REPLIES, {"channel": channel, "thread_ts": thread_ts}).rowcount)

    def asking(self, ask_id: int) -> list[OutboxRow]:
        """The DMs that put an owner ask to each owner."""
        with self._db.transaction() as conn:
            return _OUTBOX.all(conn.execute(_ASKING, {"ask_id": ask_id}).all())

    def update_post(self, post: OutboxRow, *, dedupe_key: str, text: str) -> bool:
        """Answer a post (an owner's DM with buttons): withdraw it if it has not gone
        out, else queue a ``chat.update`` of it; while it is still being posted the
        update names it (``update_of``) and the poster fills in its ts once it is out.
        False when nothing is to be updated (withdrawn, failed, cancelled)."""
        if self.cancel(post.dedupe_key):
            return False
        current = self.get(post.id) or post
        if current.status in ("failed", "cancelled"):
            return False
        ts = current.posted_ts if current.status == "sent" else None
        channel = current.posted_channel or current.channel
        self.enqueue(
            instance=current.instance,
            dedupe_key=dedupe_key,
            kind="update",
            purpose=current.purpose,  # type: ignore[arg-type]  # a stored purpose is one of them
            ask_id=current.ask_id,
            channel=channel,
            dm_user=None if channel else current.dm_user,
            update_ts=ts,
            update_of=None if ts else current.dedupe_key,
            text=text,
        )
        return True

    def cancel(self, dedupe_key: str) -> bool:
        """Withdraw a post that has not gone out yet (e.g. a request already answered)."""
        with self._db.transaction() as conn:
            return conn.execute(_CANCEL, {"key": dedupe_key}).rowcount == 1
