"""Questions put to the owners (``nanoslack.asks``): one row per ask, its DMs in the outbox.

Opening and answering are each one guarded statement whose row count says who won:
the instance whose insert lands asks (the open index allows one open ask per kind and
ref), the first answer closes it and later ones change nothing.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import AskRow as AskRow

_ASK = Row(AskRow)
_OPEN = text(
    _ASK.insert(
        skip=("id", "choice", "answered_by", "verdict", "answered_at"),
        values={"status": "'open'", "created_at": ":now"},
    )
    + " ON CONFLICT DO NOTHING RETURNING id"
)
_GET = text(f"SELECT {_ASK.sql} FROM owner_asks WHERE id = :id")
_OPEN_FOR = text(f"SELECT {_ASK.sql} FROM owner_asks WHERE kind = :kind AND ref = :ref AND status = 'open'")
_OPEN_OF = text(
    f"SELECT {_ASK.sql} FROM owner_asks WHERE instance = :instance AND status = 'open' ORDER BY id"
)
_LATEST = text(
    f"SELECT {_ASK.sql} FROM owner_asks WHERE kind = :kind AND ref = :ref ORDER BY id DESC LIMIT 1"
)
_ANSWER = text(
    _ASK.update(
        {
            "status": "'answered'",
            "choice": ":choice",
            "answered_by": ":by",
            "verdict": ":verdict",
            "answered_at": ":now",
        },
        also="status = :expected",
    )
)


class Asks:
    def __init__(self, db: Database) -> None:
        self._db = db

    def open(self, *, kind: str, ref: str, instance: str, question: str, detail: str | None) -> int | None:
        """The new ask's id; None when the same ask is already open (someone asked first)."""
        params = {
            "kind": kind,
            "ref": ref,
            "instance": instance,
            "question": question,
            "detail": detail,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            r = conn.execute(_OPEN, params).first()
        return int(r[0]) if r else None

    def get(self, ask_id: int) -> AskRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": ask_id}).first()
        return _ASK.first(r)

    def open_for(self, kind: str, ref: str) -> AskRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_OPEN_FOR, {"kind": kind, "ref": ref}).first()
        return _ASK.first(r)

    def open_of(self, instance: str) -> list[AskRow]:
        """The instance's open asks, oldest first (its owners' Home lists them)."""
        with self._db.transaction() as conn:
            rows = conn.execute(_OPEN_OF, {"instance": instance}).all()
        return _ASK.all(rows)

    def latest(self, kind: str, ref: str) -> AskRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_LATEST, {"kind": kind, "ref": ref}).first()
        return _ASK.first(r)

    def answer(self, ask_id: int, *, choice: str, by: str, verdict: str, again: bool = False) -> bool:
        """Close the ask with this answer; False when it was answered already. ``again``
        replaces an earlier answer instead (the operator reversing a decision)."""
        params = {
            "id": ask_id,
            "choice": choice,
            "by": by,
            "verdict": verdict,
            "now": time.time(),
            "expected": "answered" if again else "open",
        }
        with self._db.transaction() as conn:
            return int(conn.execute(_ANSWER, params).rowcount) == 1
