"""Questions put to a room and their answers (docs/team-rooms.md): ``votes``, ``ballots``.

Every step of a vote's life is a guarded update, so each happens once however many
processes look: the question is adopted once it is out (``posted``), reminded once
(``claim_reminder``), closed once (``close``). Times are passed in (``now``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all
from nanoslack.store.rows import Row
from nanoslack.store.tables import BallotRow as BallotRow
from nanoslack.store.tables import VoteRow as VoteRow
from nanoslack.store.tables import human_voter as human_voter


def _names(raw: Any) -> tuple[str, ...]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


_VOTE = Row(VoteRow, convert={"options": _names, "humans": _names, "bots": _names})
_BALLOT_ROW = Row(BallotRow)


_OPEN = text(
    _VOTE.insert(
        skip=("id", "ts", "posted_at", "reminded_at", "closed_at", "result"),
        values={"status": "'open'", "created_at": ":now"},
    )
    + " RETURNING id"
)
_GET = text(f"SELECT {_VOTE.sql} FROM votes WHERE id = :id")
_BY_TS = text(f"SELECT {_VOTE.sql} FROM votes WHERE room = :room AND ts = :ts")
_OPEN_IN = text(
    f"SELECT {_VOTE.sql} FROM votes WHERE room = :room AND status = 'open' AND ts IS NOT NULL"
    " ORDER BY posted_at DESC, id DESC"
)
_ASKED_BY = text(f"SELECT {_VOTE.sql} FROM votes WHERE instance = :me AND status = 'open' ORDER BY id")
_POSTED = text(_VOTE.update({"ts": ":ts", "posted_at": ":now"}, also="ts IS NULL AND status = 'open'"))
_UNPOSTABLE = text(_VOTE.update({"status": "'failed'", "closed_at": ":now"}, also="status = 'open'"))
_REMIND = text(_VOTE.update({"reminded_at": ":now"}, also="reminded_at IS NULL AND status = 'open'"))
_CLOSE = text(
    _VOTE.update({"status": "'closed'", "closed_at": ":now", "result": ":result"}, also="status = 'open'")
)
_BALLOT = text(
    _BALLOT_ROW.insert(values={"cast_at": ":now"})
    + " ON CONFLICT (vote_id, voter) DO UPDATE SET choice = excluded.choice, kind = excluded.kind,"
    " cast_at = excluded.cast_at"
)
_BALLOTS = text(f"SELECT {_BALLOT_ROW.sql} FROM ballots WHERE vote_id = :id ORDER BY cast_at, voter")


class Votes:
    def __init__(self, db: Database) -> None:
        self._db = db

    def open(
        self,
        *,
        room: str,
        thread_ts: str,
        instance: str,
        question: str,
        options: Sequence[str],
        humans: Sequence[str],
        bots: Sequence[str],
        post_key: str,
        now: float,
    ) -> int:
        params = {
            "room": room,
            "thread_ts": thread_ts,
            "instance": instance,
            "question": question,
            "options": json.dumps(list(options), ensure_ascii=False),
            "humans": json.dumps(list(humans)),
            "bots": json.dumps(list(bots)),
            "post_key": post_key,
            "now": now,
        }
        with self._db.transaction() as conn:
            return int(conn.execute(_OPEN, params).scalar_one())

    def get(self, vote_id: int) -> VoteRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": vote_id}).first()
        return _VOTE.first(r)

    def by_ts(self, room: str, ts: str) -> VoteRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_BY_TS, {"room": room, "ts": ts}).first()
        return _VOTE.first(r)

    def open_in(self, room: str) -> list[VoteRow]:
        """The room's open votes whose question is out, the newest first."""
        with self._db.read() as conn:
            return [_VOTE.read(r) for r in hot_all(conn, _OPEN_IN, {"room": room})]  # every room turn

    def asked_by(self, instance: str) -> list[VoteRow]:
        """Open votes this instance asked: its clock keeps them."""
        with self._db.transaction() as conn:
            return _VOTE.all(conn.execute(_ASKED_BY, {"me": instance}).all())

    def posted(self, vote_id: int, ts: str, now: float) -> bool:
        """The question is out (its message ``ts``); True for the one call that adopted it."""
        with self._db.transaction() as conn:
            return int(conn.execute(_POSTED, {"id": vote_id, "ts": ts, "now": now}).rowcount) == 1

    def unpostable(self, vote_id: int, now: float) -> bool:
        with self._db.transaction() as conn:
            return int(conn.execute(_UNPOSTABLE, {"id": vote_id, "now": now}).rowcount) == 1

    def claim_reminder(self, vote_id: int, now: float) -> bool:
        with self._db.transaction() as conn:
            return int(conn.execute(_REMIND, {"id": vote_id, "now": now}).rowcount) == 1

    def close(self, vote_id: int, result: str, now: float) -> bool:
        """True for the one call that closed it (the result is its to post)."""
        with self._db.transaction() as conn:
            params = {"id": vote_id, "result": result, "now": now}
            return int(conn.execute(_CLOSE, params).rowcount) == 1

    def cast(self, vote_id: int, *, voter: str, kind: str, choice: str, now: float) -> None:
        """A voter's ballot; a second one replaces the first."""
        params = {"vote_id": vote_id, "voter": voter, "kind": kind, "choice": choice, "now": now}
        with self._db.transaction() as conn:
            conn.execute(_BALLOT, params)

    def ballots(self, vote_id: int) -> list[BallotRow]:
        with self._db.transaction() as conn:
            return _BALLOT_ROW.all(conn.execute(_BALLOTS, {"id": vote_id}).all())
