"""An agent's own conversation, turn by turn (``agent_history``; docs/memory.md).

One row per recorded turn of an instance in one thread (a DM is one thread), written in
the turn's transaction. A turn reads the thread's rows in two steps: their sizes (cheap,
every row) to decide which fit the history bound, then the bodies of those it keeps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

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
# The rows of a thread that showed the message ``ts`` (``like`` narrows the read, the
# parsed spans decide).
_SHOWING = text(
    "SELECT id, prompt, messages, shown FROM agent_history WHERE instance = :instance"
    " AND channel = :channel AND thread_key = :thread_key AND shown LIKE :like"
)
_SCRUBBED = text(
    "UPDATE agent_history SET prompt = :prompt, messages = :messages, shown = :shown WHERE id = :id"
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
        shown: str | None = None,
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
            "shown": shown,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            hot_execute(conn, _ADD, params)

    def scrub(self, instance: str, channel: str, thread_key: str, gone: Sequence[str], words: str) -> int:
        """Messages deleted after a turn was shown them (docs/agents.md, "Edits and deletes"):
        in each row of the thread that showed one, its line's words become ``words``, in the
        prompt and in the model messages alike. How many rows changed."""
        params = {"instance": instance, "channel": channel, "thread_key": thread_key}
        changed = 0
        with self._db.transaction() as conn:
            rows: dict[int, tuple[Any, ...]] = {}
            for ts in gone:
                for r in conn.execute(_SHOWING, {**params, "like": f'%"{ts}"%'}).all():
                    rows[int(r[0])] = tuple(r)
            for row_id, prompt, messages, shown in rows.values():
                scrubbed = scrub_shown(str(prompt), str(messages or ""), spans(shown), set(gone), words)
                if scrubbed.prompt != prompt:
                    conn.execute(_SCRUBBED, {"id": row_id, **scrubbed.params()})
                    changed += 1
        return changed


# A message's place in a prompt: its ts, where its line starts and ends, and how long the
# ``name: `` before its words is.
Span = tuple[str, int, int, int]


def spans(raw: object) -> list[Span]:
    """``agent_history.shown`` as spans (none for a row written before it, or unreadable)."""
    try:
        data = json.loads(str(raw)) if raw else []
        return [(str(ts), int(start), int(end), int(head)) for ts, start, end, head in data]
    except (ValueError, TypeError):
        return []


def spans_json(found: Sequence[Span]) -> str:
    return json.dumps([list(s) for s in found], ensure_ascii=False)


class Scrubbed(NamedTuple):
    prompt: str
    messages: str
    shown: list[Span]

    def params(self) -> dict[str, str]:
        return {"prompt": self.prompt, "messages": self.messages, "shown": spans_json(self.shown)}


def scrub_shown(
    prompt: str, messages: str, shown: Sequence[Span], gone: Collection[str], words: str
) -> Scrubbed:
    """``prompt`` with the lines of the messages ``gone`` saying only ``words`` after their
    sender, the same lines replaced in every string of ``messages`` (the model messages as
    JSON; "" when they do not parse: the turn is then replayed from its prompt), and the
    spans moved to match."""
    out: list[Span] = []
    replaced: list[tuple[str, str]] = []
    shift = 0
    for ts, start, end, head in sorted(shown, key=lambda s: s[1]):
        start, end = start + shift, end + shift
        if ts in gone:
            old = prompt[start:end]
            new = old[:head] + words
            if old != new:
                prompt = prompt[:start] + new + prompt[end:]
                replaced.append((old, new))
                shift += len(new) - len(old)
                end = start + len(new)
        out.append((ts, start, end, head))
    if replaced and messages:
        messages = _replaced_json(messages, replaced)
    return Scrubbed(prompt, messages, out)


def _replaced_json(raw: str, replaced: Sequence[tuple[str, str]]) -> str:
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    return json.dumps(_replaced(data, replaced), ensure_ascii=False, separators=(",", ":"))


def _replaced(value: Any, replaced: Sequence[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replaced:
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_replaced(v, replaced) for v in value]
    if isinstance(value, dict):
        return {k: _replaced(v, replaced) for k, v in value.items()}
    return value
