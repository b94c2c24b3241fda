"""The outbox: posts decided in a transaction, sent later by the poster (DESIGN §5, §8).

``dedupe_key`` is unique, so a decision replayed after a crash enqueues nothing new.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from nanoslack.store.db import Database

# An update written before the post it updates had its ts names that post's key here
# (metadata event payload); the poster fills the ts in once the post is sent.
UPDATE_OF = "update_of"

_COLUMNS = (
    "id, instance, dedupe_key, kind, channel, dm_user, thread_ts, update_ts, text, blocks, metadata_json,"
    " status, attempts, error, posted_channel, posted_ts, created_at, sent_at"
)
_ENQUEUE = text(
    "INSERT INTO outbox (instance, dedupe_key, kind, channel, dm_user, thread_ts, update_ts, text, blocks,"
    " metadata_json, status, attempts, created_at)"
    " VALUES (:instance, :dedupe_key, :kind, :channel, :dm_user, :thread_ts, :update_ts, :text, :blocks,"
    " :metadata, 'queued', 0, :now)"
    " ON CONFLICT DO NOTHING RETURNING id"
)
_QUEUED = text(
    f"SELECT {_COLUMNS} FROM outbox WHERE instance = :instance AND status = 'queued' ORDER BY id LIMIT :limit"
)
_GET = text(f"SELECT {_COLUMNS} FROM outbox WHERE id = :id")
_SENDING = text(
    "UPDATE outbox SET status = 'sending', posted_channel = :channel WHERE id = :id AND status = 'queued'"
)
_IN_DOUBT = text(
    f"SELECT {_COLUMNS} FROM outbox WHERE instance = :instance AND status = 'sending' ORDER BY id"
)
_REQUEUE = text("UPDATE outbox SET status = 'queued' WHERE id = :id AND status = 'sending'")
# What an instance already said in a thread: its next turn's transcript shows it.
_SENT_POSTS = text(
    "SELECT posted_ts, text FROM outbox WHERE instance = :instance AND kind = 'post' AND status = 'sent'"
    " AND posted_channel = :channel AND coalesce(thread_ts, '') = :thread_ts AND posted_ts > :since"
    " ORDER BY posted_ts DESC LIMIT :limit"
)
_BY_KEY = text(f"SELECT {_COLUMNS} FROM outbox WHERE dedupe_key = :key")
_SENT = text(
    "UPDATE outbox SET status = 'sent', posted_channel = :channel, posted_ts = :ts, sent_at = :now,"
    " error = NULL"
    " WHERE id = :id"
)
_FAILED = text(
    "UPDATE outbox SET attempts = attempts + 1, error = :error,"
    " status = CASE WHEN :final THEN 'failed' ELSE 'queued' END WHERE id = :id"
)
_CANCEL = text("UPDATE outbox SET status = 'cancelled' WHERE dedupe_key = :key AND status = 'queued'")


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    instance: str
    dedupe_key: str
    kind: str  # post | update
    channel: str | None
    dm_user: str | None
    thread_ts: str | None
    update_ts: str | None
    text: str
    blocks: str | None  # JSON, as stored (``blocks_list`` decodes it)
    metadata_json: str | None  # JSON {event_type, event_payload}
    status: str  # queued | sending (in doubt if the process died) | sent | failed | cancelled
    attempts: int
    error: str | None
    posted_channel: str | None
    posted_ts: str | None
    created_at: float
    sent_at: float | None

    @property
    def blocks_list(self) -> list[dict[str, Any]] | None:
        return json.loads(self.blocks) if self.blocks else None

    @property
    def metadata(self) -> dict[str, Any] | None:
        return json.loads(self.metadata_json) if self.metadata_json else None


def _row(r: Any) -> OutboxRow:
    return OutboxRow(
        int(r[0]),
        str(r[1]),
        str(r[2]),
        str(r[3]),
        r[4],
        r[5],
        r[6],
        r[7],
        str(r[8]),
        r[9],
        r[10],
        str(r[11]),
        int(r[12]),
        r[13],
        r[14],
        r[15],
        float(r[16]),
        None if r[17] is None else float(r[17]),
    )


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


class Outbox:
    def __init__(self, db: Database) -> None:
        self._db = db

    def enqueue(
        self,
        *,
        instance: str,
        dedupe_key: str,
        text: str,
        channel: str | None = None,
        dm_user: str | None = None,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        kind: str = "post",
        update_ts: str | None = None,
    ) -> int | None:
        """The new row's id; None when ``dedupe_key`` was enqueued before."""
        params = {
            "instance": instance,
            "dedupe_key": dedupe_key,
            "kind": kind,
            "channel": channel,
            "dm_user": dm_user,
            "thread_ts": thread_ts,
            "update_ts": update_ts,
            "text": text,
            "blocks": _json(blocks),
            "metadata": _json(metadata),
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            r = conn.execute(_ENQUEUE, params).first()
        return int(r[0]) if r else None

    def queued(self, instance: str, limit: int = 50) -> list[OutboxRow]:
        with self._db.transaction() as conn:
            return [_row(r) for r in conn.execute(_QUEUED, {"instance": instance, "limit": limit}).all()]

    def get(self, outbox_id: int) -> OutboxRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": outbox_id}).first()
        return _row(r) if r else None

    def get_by_key(self, dedupe_key: str) -> OutboxRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_BY_KEY, {"key": dedupe_key}).first()
        return _row(r) if r else None

    def mark_sent(self, outbox_id: int, channel: str, ts: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(_SENT, {"id": outbox_id, "channel": channel, "ts": ts, "now": time.time()})

    def mark_sending(self, outbox_id: int, channel: str) -> bool:
        """About to call Slack for this row: if the process dies before
        ``mark_sent``, the row is *in doubt*, not forgotten and not blindly resent."""
        with self._db.transaction() as conn:
            return int(conn.execute(_SENDING, {"id": outbox_id, "channel": channel}).rowcount) == 1

    def in_doubt(self, instance: str) -> list[OutboxRow]:
        """Rows a previous run was sending when it stopped."""
        with self._db.transaction() as conn:
            return [_row(r) for r in conn.execute(_IN_DOUBT, {"instance": instance}).all()]

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
        with self._db.transaction() as conn:
            rows = conn.execute(_SENT_POSTS, params).all()
        return [(str(r[0]), str(r[1])) for r in reversed(rows)]

    def update_post(
        self,
        key: str,
        *,
        instance: str,
        dedupe_key: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        channel: str | None = None,
        ts: str | None = None,
    ) -> bool:
        """Answer the post queued as ``key`` (an owner's DM with buttons): withdraw it
        if it has not gone out, else queue a ``chat.update`` of it. ``channel``/``ts``
        default to where it was posted; while it is still being posted the update
        names it (``UPDATE_OF``) and the poster fills in its ts. False when nothing
        is to be updated (withdrawn, or never queued)."""
        if self.cancel(key):
            return False
        sent = self.get_by_key(key)
        channel = channel or (sent.posted_channel if sent else None)
        ts = ts or (sent.posted_ts if sent else None)
        if sent is None and (not channel or not ts):
            return False
        self.enqueue(
            instance=instance,
            dedupe_key=dedupe_key,
            kind="update",
            channel=channel,
            dm_user=None if channel else (sent.dm_user if sent else None),
            update_ts=ts,
            metadata=None if ts else {"event_type": "nanoslack_update", "event_payload": {UPDATE_OF: key}},
            text=text,
            blocks=blocks,
        )
        return True

    def cancel(self, dedupe_key: str) -> bool:
        """Withdraw a post that has not gone out yet (e.g. a request already answered)."""
        with self._db.transaction() as conn:
            return conn.execute(_CANCEL, {"key": dedupe_key}).rowcount == 1
