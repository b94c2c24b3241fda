"""An agent's own conversation, turn by turn (``agent_history``; docs/memory.md).

One row per recorded turn of an instance in one thread (a DM is one thread), written in
the turn's transaction. A turn reads the thread's rows in two steps: their sizes (cheap,
every row) to decide which fit the history bound, then the bodies of those it keeps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all, hot_execute
from nanoslack.store.rows import Row
from nanoslack.store.tables import HistoryRow as HistoryRow


class Unreadable(ValueError):
    """A row whose JSON does not parse (edited by hand): the turn goes on without it."""


def _strings(raw: str) -> tuple[str, ...]:
    value = json.loads(raw or "[]")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Unreadable("expected a JSON list of strings")
    return tuple(value)


def _ints(raw: str) -> tuple[int, ...]:
    value = json.loads(raw or "[]")
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise Unreadable("expected a JSON list of integers")
    return tuple(value)


# The JSON columns are parsed as the row is read: a row that does not parse is
# ``Unreadable`` (``parse_row``), so one bad row costs only itself.
_HISTORY = Row(
    HistoryRow,
    convert={"posts": lambda v: _strings(str(v or "[]")), "notes_known": lambda v: _ints(str(v or "[]"))},
    empty=("messages", "opening", "chars"),
)
_SIZES = text(
    "SELECT id, chars FROM agent_history WHERE instance = :instance AND channel = :channel"
    " AND thread_key = :thread_key ORDER BY id"
)
# The thread's first row and every row from ``start`` on: the window a turn replays.
_BODIES = text(
    f"SELECT {_HISTORY.sql} FROM agent_history"
    " WHERE instance = :instance AND channel = :channel AND thread_key = :thread_key"
    " AND (id = :first OR id >= :start) ORDER BY id"
)
# What the rows weigh: their text columns, plus ~40 bytes of ids and times each.
_FOOTPRINT = text(
    "SELECT sum(length(prompt) + length(messages) + length(posts) + length(opening)"
    " + length(notes_known) + 40), count(*) FROM agent_history"
)
_ADD = text(_HISTORY.insert(skip=("id",), values={"created_at": ":now"}))


def parse_row(r: Sequence[Any]) -> HistoryRow:
    """Raises ``Unreadable`` (with the row's id in ``args``) for a row edited into nonsense."""
    try:
        return _HISTORY.read(r)
    except (ValueError, TypeError) as exc:
        raise Unreadable(f"agent_history row {r[0]}: {exc}") from None


class History:
    def __init__(self, db: Database) -> None:
        self._db = db

    def footprint(self) -> tuple[int, int]:
        """(bytes the rows hold, rows), every instance's."""
        with self._db.transaction() as conn:
            row = conn.execute(_FOOTPRINT).one()
        return int(row[0] or 0), int(row[1])

    def sizes(self, instance: str, channel: str, thread_key: str) -> list[tuple[int, int]]:
        """``(row id, chars)`` of every turn kept for the thread, oldest first."""
        params = {"instance": instance, "channel": channel, "thread_key": thread_key}
        with self._db.transaction() as conn:
            return [(int(r[0]), int(r[1] or 0)) for r in hot_all(conn, _SIZES, params)]

    def bodies(
        self, instance: str, channel: str, thread_key: str, *, first: int, start: int
    ) -> list[tuple[Any, ...]]:
        """The raw rows of the window: the row ``first`` and those from ``start`` on
        (``parse_row`` reads each, so one bad row costs only itself)."""
        params = {
            "instance": instance,
            "channel": channel,
            "thread_key": thread_key,
            "first": first,
            "start": start,
        }
        with self._db.transaction() as conn:
            return hot_all(conn, _BODIES, params)

    def add(
        self,
        *,
        instance: str,
        channel: str,
        thread_key: str,
        turn_id: int,
        prompt: str,
        messages: str = "",
        posts: Sequence[str] = (),
        opening: str = "",
        notes_known: Sequence[int] = (),
        chars: int = 0,
    ) -> None:
        params = {
            "instance": instance,
            "channel": channel,
            "thread_key": thread_key,
            "turn_id": turn_id,
            "prompt": prompt,
            "messages": messages,
            "posts": json.dumps(list(posts), ensure_ascii=False),
            "opening": opening,
            "notes_known": json.dumps(sorted(set(notes_known))),
            "chars": chars,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            hot_execute(conn, _ADD, params)
