"""The notes agents keep (``memories``; docs/memory.md).

A note written in a turn is a ``draft`` (it has its id, so the tool can name it) until
the turn's recording transaction keeps it; a turn that never gets recorded (a crash, a
failure, a halt) leaves drafts nobody sees, swept later. Operators' notes are kept at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import bindparam, text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all
from nanoslack.store.rows import Row
from nanoslack.store.tables import NoteRow as NoteRow

SCOPES = ("self", "private", "room")


_NOTE = Row(NoteRow, empty=("conversation",))
# What one turn may see: its own self notes, its private ones in an owner's DM, the
# room's notes of its conversation; with a turn id, that turn's drafts too. Newest first.
_VISIBLE = text(
    f"SELECT {_NOTE.sql} FROM memories"
    " WHERE (status = 'kept' OR (status = 'draft' AND turn_id = :turn_id)) AND ("
    " (instance = :instance AND scope = 'self')"
    " OR (instance = :instance AND scope = 'private' AND :private = 1)"
    " OR (scope = 'room' AND conversation = :conversation))"
    " ORDER BY id DESC"
)
_ADD = text(_NOTE.insert(skip=("id",), values={"created_at": ":now"}) + " RETURNING id")
_KEEP = text(_NOTE.update({"status": "'kept'"}, where=("turn_id",), also="status = 'draft'"))
_GET = text(f"SELECT {_NOTE.sql} FROM memories WHERE id = :id AND status = 'kept'")
_DELETE = text("DELETE FROM memories WHERE id IN :ids").bindparams(bindparam("ids", expanding=True))
# A scope's notes as its bound counts them: kept ones and this turn's drafts, oldest first.
_IN_SCOPE = text(
    "SELECT id, length(text) FROM memories WHERE scope = :scope"
    " AND (status = 'kept' OR (status = 'draft' AND turn_id = :turn_id))"
    " AND ((scope = 'room' AND conversation = :conversation) OR (scope != 'room' AND instance = :instance))"
    " ORDER BY id"
)
_LIST = text(f"SELECT {_NOTE.sql} FROM memories WHERE status = 'kept' ORDER BY id")
_USAGE = text(
    "SELECT scope, conversation, coalesce(sum(length(text)), 0), count(*) FROM memories"
    " WHERE instance = :instance AND status = 'kept'"
    " GROUP BY scope, conversation ORDER BY scope, conversation"
)


def parse_ref(ref: str) -> int | None:
    """``m12`` (or ``12``) → 12; anything else → None."""
    raw = ref.strip().lower().removeprefix("m")
    return int(raw) if raw.isdigit() and len(raw) < 19 else None


class Memories:
    def __init__(self, db: Database) -> None:
        self._db = db

    def visible(
        self, instance: str, conversation: str, *, private: bool, turn_id: int | None = None
    ) -> list[NoteRow]:
        """The notes a turn may see; ``turn_id``: that turn's own drafts too (``recall``)."""
        params = {
            "instance": instance,
            "conversation": conversation,
            "private": 1 if private else 0,
            "turn_id": turn_id,
        }
        with self._db.transaction() as conn:
            return _NOTE.all(hot_all(conn, _VISIBLE, params))

    def add(
        self,
        *,
        instance: str,
        scope: str,
        text: str,
        asked_by: str,
        conversation: str = "",
        turn_id: int | None = None,
        draft: bool = False,
    ) -> int:
        params = {
            "instance": instance,
            "scope": scope,
            "conversation": conversation if scope == "room" else "",
            "text": text,
            "asked_by": asked_by,
            "turn_id": turn_id,
            "status": "draft" if draft else "kept",
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            row = conn.execute(_ADD, params).first()
        assert row is not None
        return int(row[0])

    def keep(self, turn_id: int) -> int:
        """Inside the turn's recording transaction: its drafts become notes."""
        with self._db.transaction() as conn:
            return int(conn.execute(_KEEP, {"turn_id": turn_id}).rowcount)

    def get(self, note_id: int) -> NoteRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": note_id}).first()
        return _NOTE.first(r)

    def delete(self, note_ids: Sequence[int]) -> int:
        if not note_ids:
            return 0
        with self._db.transaction() as conn:
            return int(conn.execute(_DELETE, {"ids": list(note_ids)}).rowcount)

    def in_scope(
        self, *, instance: str, scope: str, conversation: str, turn_id: int
    ) -> list[tuple[int, int]]:
        """``(id, characters)`` of the notes a scope's bound counts, oldest first."""
        params = {"instance": instance, "scope": scope, "conversation": conversation, "turn_id": turn_id}
        with self._db.transaction() as conn:
            return [(int(r[0]), int(r[1])) for r in conn.execute(_IN_SCOPE, params).all()]

    def all(self, *, instance: str | None = None, conversation: str | None = None) -> list[NoteRow]:
        """Every kept note, oldest first, of one instance (its room notes included) and/or
        one conversation's room notes."""
        with self._db.transaction() as conn:
            rows = _NOTE.all(conn.execute(_LIST).all())
        if instance is not None:
            rows = [r for r in rows if r.instance == instance]
        if conversation is not None:
            rows = [r for r in rows if r.scope == "room" and r.conversation == conversation]
        return rows

    def usage(self, instance: str) -> list[tuple[str, str, int, int]]:
        """``(scope, conversation, characters, notes)`` of an instance's kept notes."""
        with self._db.transaction() as conn:
            rows = conn.execute(_USAGE, {"instance": instance}).all()
        return [(str(r[0]), str(r[1] or ""), int(r[2]), int(r[3])) for r in rows]
