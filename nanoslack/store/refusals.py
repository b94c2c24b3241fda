"""The refusal audit (docs/architecture.md): how often the gate said no to whom, first/last seen."""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row, update_sql
from nanoslack.store.tables import RefusalRow as RefusalRow
from nanoslack.store.tables import SenderRefusal

_REFUSAL = Row(RefusalRow, prefix="r.", columns={"platform_id": "m.platform_id"})
_COUNT = text(
    Row(SenderRefusal).insert(
        skip=("notified_at",),
        values={"messaging_group_id": ":group_id", "count": ":n", "first_seen": ":now", "last_seen": ":now"},
    )
    + " ON CONFLICT (messaging_group_id, sender_id, reason) DO UPDATE SET"
    " count = sender_refusals.count + excluded.count, last_seen = excluded.last_seen"
    " RETURNING count"
)
# Atomic claim, so two racing refusals cannot both send the decline notice.
_CLAIM_NOTICE = text(
    update_sql(
        "sender_refusals",
        {"notified_at": ":now"},
        where={"messaging_group_id": ":group_id", "sender_id": ":sender_id", "reason": ":reason"},
        also="(notified_at IS NULL OR notified_at <= :cutoff)",
    )
)
_LIST = text(
    f"SELECT {_REFUSAL.sql}"
    " FROM sender_refusals r LEFT JOIN messaging_groups m ON m.id = r.messaging_group_id"
    " ORDER BY r.last_seen DESC"
)


class Refusals:
    def __init__(self, db: Database) -> None:
        self._db = db

    def count(self, messaging_group_id: int, sender_id: str, instance: str, reason: str, n: int = 1) -> int:
        """Add ``n`` refusals; the running total for (group, sender, reason)."""
        params = {
            "group_id": messaging_group_id,
            "sender_id": sender_id,
            "reason": reason,
            "instance": instance,
            "n": n,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            return int(conn.execute(_COUNT, params).scalar_one())

    def claim_notice(self, messaging_group_id: int, sender_id: str, reason: str, *, every: float) -> bool:
        """True at most once per ``every`` seconds per (group, sender, reason): whether to
        tell the sender. The refusal must have been counted first."""
        now = time.time()
        params = {
            "group_id": messaging_group_id,
            "sender_id": sender_id,
            "reason": reason,
            "now": now,
            "cutoff": now - every,
        }
        with self._db.transaction() as conn:
            return conn.execute(_CLAIM_NOTICE, params).rowcount == 1

    def list(self) -> list[RefusalRow]:
        with self._db.transaction() as conn:
            return _REFUSAL.all(conn.execute(_LIST).all())
