"""The files stored messages carry (docs/agents.md "Files"): one row per message that has
any, written with the message, read by the turn that answers it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from sqlalchemy import Connection, bindparam, text

from nanoslack.inbound import FLEET_SENDER, FileRef, Inbound
from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_execute
from nanoslack.store.rows import Row
from nanoslack.store.tables import MessageFilesRow

_ROW = Row(MessageFilesRow)
_ADD = text(_ROW.insert() + " ON CONFLICT DO NOTHING")
_OF = text(
    "SELECT ts, files FROM message_files WHERE instance = :instance AND channel = :channel AND ts IN :ts"
).bindparams(bindparam("ts", expanding=True))
_IDS = text("SELECT files FROM message_files")
_ONE = text("SELECT files FROM message_files WHERE instance = :instance AND channel = :channel AND ts = :ts")
_DROP = text("DELETE FROM message_files WHERE instance = :instance AND channel = :channel AND ts = :ts")
# The rows that may name a file id (``like`` narrows the read, the parsed row decides).
_NAMING = text("SELECT files FROM message_files WHERE files LIKE :like")
# The fleet's own messages of a channel (a handoff, a round's brief) whose files may name a
# file id: the copies a deleted share takes with it.
_COPIES = text(
    "SELECT f.instance, f.ts, f.files FROM message_files f JOIN messages m"
    " ON m.instance = f.instance AND m.channel = f.channel AND m.ts = f.ts"
    " WHERE f.channel = :channel AND f.files LIKE :like AND (m.handoff_depth > 0 OR m.sender_id = :fleet)"
)
_SET = text(
    "UPDATE message_files SET files = :files WHERE instance = :instance AND channel = :channel AND ts = :ts"
)


class Copy(NamedTuple):
    """A message the fleet wrote that named files of a deleted share (a handoff that passed
    them on): whose it is, its ts, and the files it no longer carries."""

    instance: str
    ts: str
    dropped: tuple[FileRef, ...]


class MessageFiles:
    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, msg: Inbound) -> None:
        """In the transaction that stores ``msg`` (a message without files writes nothing)."""
        if not msg.files:
            return
        with self._db.transaction() as conn:
            hot_execute(conn, _ADD, _row(msg.instance, msg.channel, msg.ts, msg.files))

    def add_refs(self, *, instance: str, channel: str, ts: str, refs: Sequence[FileRef]) -> None:
        """Files the fleet gives a message it wrote itself (a handoff that passes on files a
        turn saw, docs/agents.md ``send_to_agent``), in the transaction that stores it: the
        recipient's turn fetches and shows them as it would a person's message's files."""
        if not refs:
            return
        with self._db.transaction() as conn:
            conn.execute(_ADD, _row(instance, channel, ts, refs))

    def of(self, instance: str, channel: str, ts: Sequence[str]) -> dict[str, tuple[FileRef, ...]]:
        """The files of the messages ``ts`` of a channel, by ts (those without files absent)."""
        if not ts:
            return {}
        with self._db.read() as conn:
            rows = conn.execute(_OF, {"instance": instance, "channel": channel, "ts": list(ts)}).all()
        return {str(r[0]): _refs(str(r[1])) for r in rows}

    def drop(self, instance: str, channel: str, ts: str) -> tuple[str, ...]:
        """A deleted message's files leave the store (docs/agents.md, "Edits and deletes"):
        its row goes; the ids of the files it named (``unnamed`` says which downloads may go)."""
        key = {"instance": instance, "channel": channel, "ts": ts}
        with self._db.transaction() as conn:
            row = conn.execute(_ONE, key).first()
            if row is None:
                return ()
            conn.execute(_DROP, key)
            return tuple(dict.fromkeys(ref.id for ref in _refs(str(row[0])) if ref.id))

    def drop_copies(self, channel: str, file_ids: Sequence[str]) -> list[Copy]:
        """The files ``file_ids``, whose share in ``channel`` was deleted, leave every message
        the fleet wrote there that passed them on (a handoff's, any instance's): the row keeps
        its other files, or goes. The copies, for their words to say the file is gone."""
        ids = set(file_ids)
        if not ids:
            return []
        copies: list[Copy] = []
        with self._db.transaction() as conn:
            rows: dict[tuple[str, str], str] = {}
            for file_id in ids:
                params = {"channel": channel, "like": f'%"{file_id}"%', "fleet": FLEET_SENDER}
                rows.update({(str(r[0]), str(r[1])): str(r[2]) for r in conn.execute(_COPIES, params).all()})
            for (instance, ts), raw in rows.items():
                refs = _refs(raw)
                kept = tuple(ref for ref in refs if ref.id not in ids)
                if len(kept) == len(refs):
                    continue  # the ``like`` matched words, not an id
                key = {"instance": instance, "channel": channel, "ts": ts}
                if kept:
                    conn.execute(_SET, {**key, "files": _row(instance, channel, ts, kept)["files"]})
                else:
                    conn.execute(_DROP, key)
                copies.append(Copy(instance, ts, tuple(ref for ref in refs if ref.id in ids)))
        return copies

    def unnamed(self, file_ids: Sequence[str]) -> tuple[str, ...]:
        """Of ``file_ids``, those no stored message names any more: their downloads may go."""
        # In the deletion's transaction: it reads what the deletion left.
        with self._db.transaction() as conn:
            return tuple(i for i in dict.fromkeys(file_ids) if not _named(conn, i))

    def file_ids(self) -> set[str]:
        """Every file id a stored message still names: what the download cache may keep."""
        with self._db.read() as conn:
            rows = conn.execute(_IDS).all()
        return {ref.id for (files,) in rows for ref in _refs(str(files))}


def _row(instance: str, channel: str, ts: str, refs: Sequence[FileRef]) -> dict[str, object]:
    files = json.dumps([list(f) for f in refs], ensure_ascii=False)
    return {"instance": instance, "channel": channel, "ts": ts, "files": files, "created_at": time.time()}


def _named(conn: Connection, file_id: str) -> bool:
    """Whether a stored message still names ``file_id`` (another instance's copy of the
    message, another message sharing the same file)."""
    rows = conn.execute(_NAMING, {"like": f'%"{file_id}"%'}).all()
    return any(ref.id == file_id for (files,) in rows for ref in _refs(str(files)))


def _refs(raw: str) -> tuple[FileRef, ...]:
    try:
        data = json.loads(raw)
    except ValueError:
        return ()
    return tuple(_ref(item) for item in _items(data))


def _items(data: object) -> Iterable[list[object]]:
    return [item for item in data if isinstance(item, list)] if isinstance(data, list) else []


def _ref(item: list[object]) -> FileRef:
    values = [*item, "", "", "", 0, "", ""][:6]
    size = values[3]
    return FileRef(
        str(values[0]),
        str(values[1]),
        str(values[2]),
        size if isinstance(size, int) else 0,
        str(values[4]),
        str(values[5]),
    )
