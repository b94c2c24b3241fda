"""Rounds of ``round`` rooms (docs/team-rooms.md): ``rounds`` and ``round_members``.

Each decision several instances (or processes) race to is one guarded statement whose
row count says who won: the first pipeline to see a question creates its round, the
first poll to find it answered closes it.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all, hot_first
from nanoslack.store.rows import Row
from nanoslack.store.tables import MemberRow as MemberRow
from nanoslack.store.tables import RoundRow as RoundRow

_ROUND = Row(RoundRow)
_MEMBER = Row(MemberRow)
_OPEN_NEW = text(
    "INSERT INTO rounds (room, thread_key, question_ts, question, named, chief, status, created_at)"
    " SELECT :room, :thread_key, :question_ts, :question, :named, :chief,"
    " CASE WHEN EXISTS (SELECT 1 FROM rounds WHERE room = :room AND status IN ('waiting', 'open', 'closing'))"
    " THEN 'waiting' ELSE 'open' END, :now"
    " ON CONFLICT (room, question_ts) DO NOTHING"
)
_BY_QUESTION = text(f"SELECT {_ROUND.sql} FROM rounds WHERE room = :room AND question_ts = :ts")
_GET = text(f"SELECT {_ROUND.sql} FROM rounds WHERE id = :id")
_OPEN = text(f"SELECT {_ROUND.sql} FROM rounds WHERE status IN ('open', 'closing') ORDER BY id")
_WAITING = text("SELECT room, question_ts FROM rounds WHERE status = 'waiting'")
_JOIN = text(
    _MEMBER.insert(skip=("turn_id", "finished_at"), values={"status": "'answering'", "joined_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
_MEMBERS = text(f"SELECT {_MEMBER.sql} FROM round_members WHERE round_id = :round_id ORDER BY joined_at")
_FINISH_MEMBER = text(
    _MEMBER.update(
        {"status": ":status", "turn_id": ":turn_id", "finished_at": ":now"}, also="status = 'answering'"
    )
)
_MOVE = text(
    _ROUND.update(
        {"status": ":to", "closed_at": "CASE WHEN :to IN ('closed', 'stopped') THEN :now ELSE closed_at END"},
        also="status = :from_status",
    )
)
_NEXT = text(
    "UPDATE rounds SET status = 'open', created_at = :now WHERE id = ("
    " SELECT min(id) FROM rounds WHERE room = :room AND status = 'waiting')"
    " AND NOT EXISTS (SELECT 1 FROM rounds WHERE room = :room AND status IN ('open', 'closing'))"
)
_CLOSING = text(_ROUND.update({"close_ts": ":ts"}))
_BY_CLOSE = text(f"SELECT {_ROUND.sql} FROM rounds WHERE room = :room AND close_ts = :ts")
_WAITING_ROOMS = text(
    "SELECT DISTINCT room FROM rounds w WHERE status = 'waiting' AND NOT EXISTS ("
    " SELECT 1 FROM rounds o WHERE o.room = w.room AND o.status IN ('open', 'closing'))"
)
_STOP = text(
    _ROUND.update(
        {"status": "'stopped'", "closed_at": ":now"}, where=("room",), also="status IN ('open', 'closing')"
    )
    + " RETURNING id"
)


class Rounds:
    def __init__(self, db: Database) -> None:
        self._db = db

    def ask(
        self, *, room: str, thread_key: str, question_ts: str, question: str, named: bool, chief: str | None
    ) -> RoundRow:
        """The round of this question: created by the first instance to see it, ``waiting``
        while another round of the room is under way."""
        params = {
            "room": room,
            "thread_key": thread_key,
            "question_ts": question_ts,
            "question": question,
            "named": named,
            "chief": chief,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            conn.execute(_OPEN_NEW, params)
            return _ROUND.read(conn.execute(_BY_QUESTION, {"room": room, "ts": question_ts}).one())

    # The reads below run on every turn and every scheduler wake, in rooms of every kind:
    # on the driver's fast path (``hot_first``), as the other per-turn statements are.
    def of_question(self, room: str, question_ts: str) -> RoundRow | None:
        with self._db.read() as conn:
            r = hot_first(conn, _BY_QUESTION, {"room": room, "ts": question_ts})
        return _ROUND.first(r)

    def get(self, round_id: int) -> RoundRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"id": round_id}).first()
        return _ROUND.first(r)

    def under_way(self) -> list[RoundRow]:
        """Rounds open or closing, in every room."""
        with self._db.read() as conn:
            return _ROUND.all(hot_all(conn, _OPEN, {}))

    def waiting(self) -> frozenset[tuple[str, str]]:
        """(room, question ts) of every question waiting for its room's round to close."""
        with self._db.read() as conn:
            return frozenset((str(r[0]), str(r[1])) for r in hot_all(conn, _WAITING, {}))

    def join(self, round_id: int, instance: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(_JOIN, {"round_id": round_id, "instance": instance, "now": time.time()})

    def members(self, round_id: int) -> list[MemberRow]:
        with self._db.transaction() as conn:
            rows = conn.execute(_MEMBERS, {"round_id": round_id}).all()
        return _MEMBER.all(rows)

    def finish_member(self, round_id: int, instance: str, *, status: str, turn_id: int) -> bool:
        params = {
            "round_id": round_id,
            "instance": instance,
            "status": status,
            "turn_id": turn_id,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            return int(conn.execute(_FINISH_MEMBER, params).rowcount) == 1

    def move(self, round_id: int, from_status: str, to: str) -> bool:
        """Guarded: True for the one caller whose move landed."""
        params = {"id": round_id, "from_status": from_status, "to": to, "now": time.time()}
        with self._db.transaction() as conn:
            return int(conn.execute(_MOVE, params).rowcount) == 1

    def open_next(self, room: str) -> bool:
        """The room's oldest waiting question starts its round, if none is under way."""
        with self._db.transaction() as conn:
            return int(conn.execute(_NEXT, {"room": room, "now": time.time()}).rowcount) == 1

    def set_close(self, round_id: int, close_ts: str) -> None:
        with self._db.transaction() as conn:
            conn.execute(_CLOSING, {"id": round_id, "ts": close_ts})

    def of_close(self, room: str, close_ts: str) -> RoundRow | None:
        with self._db.transaction() as conn:
            r = hot_first(conn, _BY_CLOSE, {"room": room, "ts": close_ts})
        return _ROUND.first(r)

    def rooms_to_open(self) -> list[str]:
        """Rooms with a waiting question and no round under way (one was stopped, say)."""
        with self._db.read() as conn:
            return [str(r[0]) for r in hot_all(conn, _WAITING_ROOMS, {})]

    def stop(self, room: str) -> list[int]:
        """An owner halted the room: its round under way ends here (no close)."""
        with self._db.transaction() as conn:
            return [int(r[0]) for r in conn.execute(_STOP, {"room": room, "now": time.time()}).all()]
