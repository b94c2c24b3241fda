"""The steps of a turn (docs/agents.md): every model call and tool call, as it happened."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import TextClause, text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import StepRow as StepRow

ARGUMENTS_CHARS = 500


@dataclass(frozen=True, slots=True)
class SpendRow:
    """What the turns of one instance in one conversation (and one routine, "" for none)
    spent since a moment (``nanoslack spend``)."""

    instance: str
    channel: str
    routine: str
    turns: int
    tokens: int  # as the budgets count them (``turns.tokens``)
    cost_usd: float
    unpriced: int  # model calls with no price: their tokens counted, no dollars


_STEP = Row(StepRow)
_SPEND = Row(SpendRow)
_ADD = text(_STEP.insert(skip=("id",), values={"created_at": ":now"}))
_OF = text(f"SELECT {_STEP.sql} FROM turn_steps WHERE turn_id = :turn_id ORDER BY step, id")
# What model calls cost since a moment (the dollar budgets, docs/agents.md): an instance's,
# or a room's with every instance together.
_COST_OF_INSTANCE = text(
    "SELECT coalesce(sum(s.cost_usd), 0) FROM turn_steps s JOIN turns t ON t.id = s.turn_id"
    " WHERE t.instance = :instance AND s.created_at >= :since"
)
_SPEND_SINCE = text(
    "SELECT t.instance, t.channel, coalesce(r.routine, ''), count(*), coalesce(sum(t.tokens), 0),"
    " coalesce(sum((SELECT sum(s.cost_usd) FROM turn_steps s WHERE s.turn_id = t.id)), 0),"
    " coalesce(sum((SELECT count(*) FROM turn_steps s WHERE s.turn_id = t.id"
    " AND s.kind = 'model' AND s.cost_usd IS NULL AND s.tokens > 0)), 0)"
    " FROM turns t LEFT JOIN routine_runs r ON r.turn_id = t.id AND r.instance = t.instance"
    " WHERE t.started_at >= :since GROUP BY t.instance, t.channel, coalesce(r.routine, '')"
    " ORDER BY t.instance, t.channel"
)
_COST_OF_ROOM = text(
    "SELECT coalesce(sum(s.cost_usd), 0) FROM turn_steps s JOIN turns t ON t.id = s.turn_id"
    " WHERE t.channel = :room AND s.created_at >= :since"
)


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

    def instance_cost_usd(self, instance: str, *, since: float) -> float:
        return self._sum(_COST_OF_INSTANCE, {"instance": instance, "since": since})

    def room_cost_usd(self, room: str, *, since: float) -> float:
        return self._sum(_COST_OF_ROOM, {"room": room, "since": since})

    def _sum(self, query: TextClause, params: dict[str, object]) -> float:
        with self._db.transaction() as conn:
            value = conn.execute(query, params).scalar()
        return float(value or 0.0)

    def spend(self, *, since: float) -> list[SpendRow]:
        """Tokens and dollars of the turns started since ``since``, per instance,
        conversation and routine (``nanoslack spend``)."""
        with self._db.transaction() as conn:
            return _SPEND.all(conn.execute(_SPEND_SINCE, {"since": since}).all())
