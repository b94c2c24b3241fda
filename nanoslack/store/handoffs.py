"""Handoffs between instances (docs/agents.md ``send_to_agent``), as a record."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from nanoslack.store.database import Database

_ADD = text(
    "INSERT INTO handoffs"
    " (from_instance, to_instance, channel, thread_key, text, depth, turn_id, ts, created_at)"
    " VALUES (:from_instance, :to_instance, :channel, :thread_key, :text, :depth, :turn_id, :ts, :now)"
)
_RECENT = text(
    "SELECT id, from_instance, to_instance, channel, thread_key, text, depth, turn_id, ts, created_at"
    " FROM handoffs ORDER BY id DESC LIMIT :limit"
)


@dataclass(frozen=True, slots=True)
class HandoffRow:
    id: int
    from_instance: str
    to_instance: str
    channel: str
    thread_key: str
    text: str
    depth: int
    turn_id: int
    ts: str
    created_at: float


def _row(r: Any) -> HandoffRow:
    return HandoffRow(
        int(r[0]),
        str(r[1]),
        str(r[2]),
        str(r[3]),
        str(r[4]),
        str(r[5]),
        int(r[6]),
        int(r[7]),
        str(r[8]),
        float(r[9]),
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
    ) -> None:
        params = {
            "from_instance": from_instance,
            "to_instance": to_instance,
            "channel": channel,
            "thread_key": thread_key,
            "text": text,
            "depth": depth,
            "turn_id": turn_id,
            "ts": ts,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_ADD, params)

    def recent(self, limit: int = 50) -> list[HandoffRow]:
        with self._db.transaction() as conn:
            return [_row(r) for r in conn.execute(_RECENT, {"limit": limit}).all()]
