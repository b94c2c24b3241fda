"""A room's tasks and its board (docs/team-rooms.md): ``tasks``, ``boards``.

A task is (room, request, owner): the ``working`` report that answers a request opens it,
later reports on the same request update it, a closing one closes it. The board is one
message per room; its row remembers which instance posted it, its ts once it is out and
what it last said. Times are passed in (``now``), so what is due is decided by one clock.
"""

from __future__ import annotations

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.fastpath import hot_all
from nanoslack.store.rows import Row
from nanoslack.store.tables import CLOSED_STATUSES as CLOSED_STATUSES
from nanoslack.store.tables import OPEN_STATUSES as OPEN_STATUSES
from nanoslack.store.tables import BoardRow as BoardRow
from nanoslack.store.tables import TaskRow as TaskRow

STATUSES = (*OPEN_STATUSES, *CLOSED_STATUSES)


_TASK = Row(TaskRow, empty=("text",))
_BOARD = Row(BoardRow, empty=("text",))
_TASK_OF_T = Row(TaskRow, prefix="t.", empty=("text",))  # in a join, as ``t``
# A report: the task's row made to say what the report says. A report starts a new
# silence, so the ping and the staleness of the last one are forgotten.
_REPORT = text(
    _TASK.insert(
        skip=("id", "pinged_at", "stale_at"),
        values={
            "progress_done": ":done",
            "progress_total": ":total",
            "created_at": ":now",
            "updated_at": ":now",
        },
    )
    + " ON CONFLICT (room, request_ts, instance) DO UPDATE SET status = excluded.status,"
    " progress_done = coalesce(excluded.progress_done, tasks.progress_done),"
    " progress_total = coalesce(excluded.progress_total, tasks.progress_total),"
    " step = coalesce(excluded.step, tasks.step),"
    " text = CASE WHEN excluded.text = '' THEN tasks.text ELSE excluded.text END,"
    " updated_at = excluded.updated_at, pinged_at = NULL, stale_at = NULL, closed_at = excluded.closed_at"
)
_GET = text(
    f"SELECT {_TASK.sql} FROM tasks WHERE room = :room AND request_ts = :request_ts AND instance = :me"
)
# The tasks the board lists: open and not gone quiet for good.
_OPEN_IN = text(
    f"SELECT {_TASK.sql} FROM tasks WHERE room = :room AND status IN ('working', 'input_required')"
    " AND stale_at IS NULL ORDER BY created_at, id"
)
_MINE_IN_THREAD = text(
    f"SELECT {_TASK.sql} FROM tasks WHERE room = :room AND thread_ts = :thread_ts AND instance = :me"
    " AND status IN ('working', 'input_required') ORDER BY updated_at DESC, id DESC"
)
# Open tasks, in the rooms whose board this instance keeps, silent since before ``before``.
_QUIET = text(
    f"SELECT {_TASK_OF_T.sql} FROM tasks t"
    " JOIN boards b ON b.room = t.room"
    " WHERE b.instance = :me AND t.status IN ('working', 'input_required') AND t.stale_at IS NULL"
    " AND t.updated_at < :before ORDER BY t.updated_at"
)
_PINGED = text(_TASK.update({"pinged_at": ":now"}, also="pinged_at IS NULL AND updated_at = :at"))
_STALE = text(_TASK.update({"stale_at": ":now"}, also="stale_at IS NULL AND updated_at = :at"))

_NEW_BOARD = text(
    _BOARD.insert(skip=("ts",), values={"text": "''", "version": "0", "updated_at": ":now"})
    + " ON CONFLICT DO NOTHING"
)
# Taken first in every transaction that rewrites a board: on PostgreSQL the row lock
# makes two processes' edits of one board follow each other, each seeing the other's
# tasks (SQLite's BEGIN IMMEDIATE serialises them anyway). The row comes from the UPDATE
# itself: a plain SELECT after it could see a board another process committed in between,
# one this transaction holds no lock on (READ COMMITTED), and edit it out of turn.
_LOCK_BOARD = text(_BOARD.update({"version": "version + 1"}) + f" RETURNING {_BOARD.sql}")
_GET_BOARD = text(f"SELECT {_BOARD.sql} FROM boards WHERE room = :room")
_SAID = text(_BOARD.update({"text": ":text", "updated_at": ":now"}))
_BOARD_TS = text(_BOARD.update(["ts"], also="ts IS NULL"))
_BOARDS_OF = text(f"SELECT {_BOARD.sql} FROM boards WHERE instance = :me ORDER BY room")


class Tasks:
    def __init__(self, db: Database) -> None:
        self._db = db

    def report(
        self,
        *,
        room: str,
        thread_ts: str,
        request_ts: str,
        instance: str,
        status: str,
        text: str,
        now: float,
        progress_done: int | None = None,
        progress_total: int | None = None,
        step: str | None = None,
    ) -> TaskRow:
        """The task as the report leaves it (opened, updated or closed)."""
        if status not in STATUSES:
            raise ValueError(f"task status must be one of {', '.join(STATUSES)}, got {status!r}")
        params = {
            "room": room,
            "thread_ts": thread_ts,
            "request_ts": request_ts,
            "instance": instance,
            "status": status,
            "done": progress_done,
            "total": progress_total,
            "step": step,
            "text": text,
            "now": now,
            "closed_at": now if status in CLOSED_STATUSES else None,
        }
        with self._db.transaction() as conn:
            conn.execute(_REPORT, params)
            r = conn.execute(_GET, {"room": room, "request_ts": request_ts, "me": instance}).first()
        assert r is not None
        return _TASK.read(r)

    def get(self, room: str, request_ts: str, instance: str) -> TaskRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET, {"room": room, "request_ts": request_ts, "me": instance}).first()
        return _TASK.first(r)

    def open_in(self, room: str) -> list[TaskRow]:
        """What the board lists: the room's open tasks that still count, oldest first."""
        with self._db.read() as conn:
            return [_TASK.read(r) for r in hot_all(conn, _OPEN_IN, {"room": room})]  # every room turn

    def mine_in_thread(self, room: str, thread_ts: str, instance: str) -> list[TaskRow]:
        """This instance's open tasks in one thread, the most recently reported first."""
        params = {"room": room, "thread_ts": thread_ts, "me": instance}
        with self._db.transaction() as conn:
            return _TASK.all(conn.execute(_MINE_IN_THREAD, params).all())

    def quiet(self, keeper: str, before: float) -> list[TaskRow]:
        """Open tasks silent since before ``before`` in the rooms whose board ``keeper`` keeps."""
        with self._db.transaction() as conn:
            return _TASK_OF_T.all(conn.execute(_QUIET, {"me": keeper, "before": before}).all())

    def claim_ping(self, task: TaskRow, now: float) -> bool:
        """The one ping of this silence is ours to post (False: already pinged, or the
        task was reported on meanwhile)."""
        with self._db.transaction() as conn:
            params = {"id": task.id, "now": now, "at": task.updated_at}
            return int(conn.execute(_PINGED, params).rowcount) == 1

    def claim_stale(self, task: TaskRow, now: float) -> bool:
        with self._db.transaction() as conn:
            params = {"id": task.id, "now": now, "at": task.updated_at}
            return int(conn.execute(_STALE, params).rowcount) == 1


class Boards:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, room: str, *, instance: str, post_key: str, now: float) -> bool:
        """True when this call made the room's board (its post is the caller's to queue)."""
        params = {"room": room, "instance": instance, "post_key": post_key, "now": now}
        with self._db.transaction() as conn:
            return int(conn.execute(_NEW_BOARD, params).rowcount) == 1

    def lock(self, room: str) -> BoardRow | None:
        """Inside a transaction: the room's board, held until it commits."""
        with self._db.transaction() as conn:
            r = conn.execute(_LOCK_BOARD, {"room": room}).first()
        return _BOARD.first(r)

    def get(self, room: str) -> BoardRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET_BOARD, {"room": room}).first()
        return _BOARD.first(r)

    def said(self, room: str, text_: str, now: float) -> None:
        with self._db.transaction() as conn:
            conn.execute(_SAID, {"room": room, "text": text_, "now": now})

    def posted(self, room: str, ts: str) -> bool:
        with self._db.transaction() as conn:
            return int(conn.execute(_BOARD_TS, {"room": room, "ts": ts}).rowcount) == 1

    def kept_by(self, instance: str) -> list[BoardRow]:
        with self._db.transaction() as conn:
            return _BOARD.all(conn.execute(_BOARDS_OF, {"me": instance}).all())
