"""The durable inbox (docs/architecture.md): record before ack, finish once, resume after a crash."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextClause, text

from nanoslack.inbound import Inbound, InboxKey
from nanoslack.store.database import Database
from nanoslack.store.fastpath import (
    hot_execute,
    hot_first,
    hot_many_in_order,
    hot_rows,
    in_order,
    positional_names,
)
from nanoslack.store.rows import Row, insert_sql, update_sql
from nanoslack.store.tables import InboxEntry

# What recording writes: every column but the outcome's (``status`` starts as received).
_RECORD_COLUMNS = tuple(n for n in Row(InboxEntry).names if n not in ("reason", "finished_at"))
_RECORD_FIXED = {"status": "'received'", "attempts": "0"}
_RECORD = text(
    insert_sql("inbox", _RECORD_COLUMNS, values={**_RECORD_FIXED, "received_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
# A batch's rows in one statement; the keys that were new come back (a duplicate, in
# the store or earlier in the same batch, returns nothing). Chunk sizes are few, so
# the driver's statement cache keeps every shape prepared.
_RECORD_BOUND = len(_RECORD_COLUMNS) - len(_RECORD_FIXED)
_RECORD_CHUNKS = (64, 16, 4, 1)
_FINISH = in_order(
    text(
        update_sql(
            "inbox",
            {"status": ":status", "reason": ":reason", "finished_at": ":now"},
            also="status = 'received'",
        )
    ),
    ("status", "reason", "now", "instance", "channel", "ts"),  # as ``finish_many`` gives them
)
_ATTEMPT = text(
    update_sql("inbox", {"attempts": "attempts + 1", "reason": ":reason"}) + " RETURNING attempts"
)
_UNFINISHED = text(
    "SELECT payload FROM inbox WHERE instance = :instance AND status = 'received' ORDER BY received_at, ts"
)
_COUNTS = text("SELECT status, count(*) FROM inbox GROUP BY status")
_PAYLOAD = text("SELECT payload FROM inbox WHERE instance = :instance AND channel = :channel AND ts = :ts")
_STATUS = text("SELECT status FROM inbox WHERE instance = :instance AND channel = :channel AND ts = :ts")
# A deleted message's entry and those of its edits (their payloads name it as ``item_ts``);
# ``like`` narrows the read, the payload decides.
_NAMING = text(
    "SELECT ts, payload FROM inbox WHERE instance = :instance AND channel = :channel"
    " AND (ts = :ts OR payload LIKE :like)"
)
_SET_PAYLOAD = text(update_sql("inbox", ["payload"]))
_NEWEST = text(
    "SELECT max(ts) FROM inbox WHERE instance = :instance AND channel = :channel AND received_at <= :by"
)

# A message whose downstream keeps failing is parked after this many tries, so
# one poison payload cannot wedge an instance's resume loop forever.
MAX_ATTEMPTS = 3


@functools.lru_cache(maxsize=len(_RECORD_CHUNKS))
def _record_sql(rows: int) -> TextClause:
    names = iter(positional_names(rows * _RECORD_BOUND))
    values = ", ".join(
        "(" + ", ".join(_RECORD_FIXED.get(c) or next(names) for c in _RECORD_COLUMNS) + ")"
        for _ in range(rows)
    )
    return text(
        f"INSERT INTO inbox ({', '.join(_RECORD_COLUMNS)}) VALUES {values}"
        " ON CONFLICT DO NOTHING RETURNING instance, channel, ts"
    )


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

    def record_many(self, msgs: Sequence[Inbound]) -> list[bool]:
        """``record`` for a batch, in a few multi-row statements; for each message,
        whether it was new (the first of two with one key in a batch is the new one)."""
        now = time.time()
        new: set[tuple[str, str, str]] = set()
        with self._db.transaction() as conn:
            start = 0
            while start < len(msgs):
                size = next(n for n in _RECORD_CHUNKS if n <= len(msgs) - start)
                chunk = msgs[start : start + size]
                start += size
                params: list[Any] = []
                for m in chunk:
                    params += (m.instance, m.channel, m.ts, m.event_type, m.event_id, m.to_payload(), now)
                rows = hot_rows(conn, _record_sql(size), params)
                new.update((str(r[0]), str(r[1]), str(r[2])) for r in rows)
        fresh: list[bool] = []
        for m in msgs:
            key = (m.instance, m.channel, m.ts)
            fresh.append(key in new)
            new.discard(key)
        return fresh

    def finish_many(self, rows: Sequence[tuple[InboxKey, str, str | None]]) -> None:
        """``finish`` for a batch (key, status, reason), in one call."""
        now = time.time()
        params = [(st, r, now, k.instance, k.channel, k.ts) for k, st, r in rows]
        with self._db.transaction() as conn:
            hot_many_in_order(conn, _FINISH, params)

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

    def message(self, key: InboxKey) -> Inbound | None:
        """The message as it was recorded (its thread, its author), if it was."""
        with self._db.transaction() as conn:
            row = hot_first(conn, _PAYLOAD, key._asdict())
        return Inbound.from_payload(row[0]) if row else None

    def scrub(self, key: InboxKey) -> int:
        """A deleted message's words leave the inbox too (docs/agents.md, "Edits and
        deletes"): its entry's and its edits' payloads keep everything but the text. How
        many entries were scrubbed."""
        params = {**key._asdict(), "like": f'%"{key.ts}"%'}
        scrubbed = 0
        with self._db.transaction() as conn:
            for ts, payload in conn.execute(_NAMING, params).all():
                msg = Inbound.from_payload(payload)
                if (msg.ts != key.ts and msg.item_ts != key.ts) or not (
                    msg.text or msg.mentions or msg.files
                ):
                    continue
                blank = dataclasses.replace(msg, text="", mentions=(), previous_mentions=(), files=())
                conn.execute(_SET_PAYLOAD, {**key._asdict(), "ts": ts, "payload": blank.to_payload()})
                scrubbed += 1
        return scrubbed

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

    def counts(self) -> dict[str, int]:
        """Rows per status, every instance's (what a bench checks its count of against)."""
        with self._db.transaction() as conn:
            return {str(r[0]): int(r[1]) for r in conn.execute(_COUNTS).all()}
