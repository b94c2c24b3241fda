"""The streams a turn opened in Slack while its model was still writing its first post
(docs/agent-surface.md): the message's ts, written as soon as Slack answers the start.

A row names its turn. The poster that sends the turn's first reply finishes that message
instead of posting another, then drops the row; a turn that ends without a post deletes
the message and the row. A turn a crash left is run again under a new id: it adopts the
row (``adopt``), so its reply still finishes the one message. A row written before the
start (``ts`` empty) says a start was attempted: its message is looked for in the thread.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import ReplyDraft as ReplyDraft

_DRAFT = Row(ReplyDraft, empty=("ts",))
_OPEN = text(_DRAFT.insert(values={"turn_id": ":turn", "ts": "''", "started_at": ":now"}))
_BY_TURN = {"instance": ":instance", "turn_id": ":turn"}
_STARTED = text(_DRAFT.update(["ts"], where=_BY_TURN))
_OF_TURN = text(f"SELECT {_DRAFT.sql} FROM reply_drafts WHERE instance = :instance AND turn_id = :turn")
# Drafts of turns that will never be recorded (left by a crash) in this conversation.
_LEFT = text(
    "SELECT d.turn_id FROM reply_drafts d WHERE d.instance = :instance AND d.channel = :channel"
    " AND d.turn_id <> :turn"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = d.turn_id AND t.status <> 'abandoned')"
    " ORDER BY d.started_at LIMIT 1"
)
_ADOPT = text(_DRAFT.update({"turn_id": ":turn"}, where={"instance": ":instance", "turn_id": ":left"}))
_DROP = text("DELETE FROM reply_drafts WHERE instance = :instance AND turn_id = :turn")


class ReplyDrafts:
    def __init__(self, db: Database) -> None:
        self._db = db

    def open(self, instance: str, turn_id: int, channel: str, thread_ts: str) -> None:
        """Before Slack is called: a start is being attempted."""
        params = {"instance": instance, "turn": turn_id, "channel": channel, "thread_ts": thread_ts}
        with self._db.transaction() as conn:
            conn.execute(_OPEN, {**params, "now": time.time()})

    def started(self, instance: str, turn_id: int, ts: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(_STARTED, {"instance": instance, "turn": turn_id, "ts": ts})

    def of_turn(self, instance: str, turn_id: int) -> ReplyDraft | None:
        with self._db.transaction() as conn:
            row = conn.execute(_OF_TURN, {"instance": instance, "turn": turn_id}).first()
        return _DRAFT.first(row)

    def adopt(self, instance: str, channel: str, turn_id: int) -> ReplyDraft | None:
        """The draft a turn a crash left in this conversation, now ``turn_id``'s."""
        with self._db.transaction() as conn:
            left = conn.execute(_LEFT, {"instance": instance, "channel": channel, "turn": turn_id}).scalar()
            if left is None:
                return None
            conn.execute(_ADOPT, {"instance": instance, "turn": turn_id, "left": left})
        return self.of_turn(instance, turn_id)

    def drop(self, instance: str, turn_id: int) -> None:
        with self._db.transaction() as conn:
            conn.execute(_DROP, {"instance": instance, "turn": turn_id})
