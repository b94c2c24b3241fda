"""The steps of a turn (docs/agents.md): every model call and tool call, as it happened."""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import StepRow as StepRow

ARGUMENTS_CHARS = 500


_STEP = Row(StepRow)
_ADD = text(_STEP.insert(skip=("id",), values={"created_at": ":now"}))
_OF = text(f"SELECT {_STEP.sql} FROM turn_steps WHERE turn_id = :turn_id ORDER BY step, id")


class Steps:
    def __init__(self, db: Database) -> None:
        self._db = db

    def add(
        self,
        turn_id: int,
        step: int,
        *,
        kind: str,
        name: str,
        arguments: str | None = None,
        result_size: int = 0,
        tokens: int = 0,
        cached_tokens: int = 0,
        cost_usd: float | None = None,
        ms: float = 0.0,
        error: str | None = None,
    ) -> None:
        params = {
            "turn_id": turn_id,
            "step": step,
            "kind": kind,
            "name": name,
            "arguments": arguments[:ARGUMENTS_CHARS] if arguments else None,
            "result_size": result_size,
            "tokens": tokens,
            "cached_tokens": cached_tokens,
            "cost_usd": cost_usd,
            "ms": round(ms, 1),
            "error": error[:500] if error else None,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_ADD, params)

    def of(self, turn_id: int) -> list[StepRow]:
        with self._db.transaction() as conn:
            return _STEP.all(conn.execute(_OF, {"turn_id": turn_id}).all())
