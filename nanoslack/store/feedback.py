"""People's 👍 / 👎 on the instance's DM replies (docs/agent-surface.md, "Feedback"): one row
per (turn, person), their last click; ``nanoslack turns`` shows the counts."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import bindparam, text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import FeedbackRow as FeedbackRow

_FEEDBACK = Row(FeedbackRow)
_UPSERT = text(
    _FEEDBACK.insert()
    + " ON CONFLICT (instance, turn_id, user_id) DO UPDATE SET value = excluded.value, at = excluded.at"
)
_OF_TURNS = text(
    "SELECT turn_id, value, count(*) FROM feedback WHERE turn_id IN :turns GROUP BY turn_id, value"
).bindparams(bindparam("turns", expanding=True))
_TURN_INSTANCE = text("SELECT instance FROM turns WHERE id = :turn")
VALUES = frozenset({"positive", "negative"})


class Feedback:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, instance: str, turn_id: int, user_id: str, value: str) -> bool:
        """Kept when ``turn_id`` is one of ``instance``'s turns (False: a forged or stale value)."""
        if value not in VALUES:
            return False
        with self._db.transaction() as conn:
            row = conn.execute(_TURN_INSTANCE, {"turn": turn_id}).first()
            if row is None or row[0] != instance:
                return False
            conn.execute(
                _UPSERT,
                {
                    "instance": instance,
                    "turn_id": turn_id,
                    "user_id": user_id,
                    "value": value,
                    "at": time.time(),
                },
            )
        return True

    def counts(self, turn_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """Per turn: how many people's last click was each value."""
        if not turn_ids:
            return {}
        found: dict[int, dict[str, int]] = {}
        with self._db.transaction() as conn:
            for turn, value, n in conn.execute(_OF_TURNS, {"turns": list(turn_ids)}).all():
                found.setdefault(int(turn), {})[str(value)] = int(n)
        return found
