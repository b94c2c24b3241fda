"""Routines in the store (docs/routines.md): each routine's state, and one row per due time.

A due time is claimed by inserting its ``routine_runs`` row (unique per instance, routine
and due time): whichever process inserts it runs it, so a restart, a lease takeover or a
second PostgreSQL process never runs a due time twice. Pause and run-now live in
``routines``, so the CLI reaches a fleet in another process.

A routine is the file's (``source = 'file'``, what the fleet read from ``routines.toml``)
or the agent's (``'agent'``, set with ``schedule_routine``). A name both have is the
file's: the agent's row stays, shadowed, and runs again if the file drops the name.
Pause, run-now and the next due time are kept per name (on both rows): they are the
routine that runs under that name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import text

from nanoslack.store.database import Database
from nanoslack.store.rows import Row
from nanoslack.store.tables import ListingRow as ListingRow
from nanoslack.store.tables import RoutineStateRow as RoutineStateRow
from nanoslack.store.tables import RunRow as RunRow

RUNNING = "running"
FINISHED = ("done", "silent", "failed", "skipped", "missed")
FILE = "file"
AGENT = "agent"


_STATE = Row(RoutineStateRow, empty=("schedule", "channel", "prompt"))
_RUN = Row(RunRow, empty=("reason", "tokens"))
# The latest run's status and reason: the same subquery for each.
_LATEST_RUN = (
    "(SELECT x.{} FROM routine_runs x WHERE x.instance = r.instance AND x.routine = r.name"
    " ORDER BY x.due_at DESC, x.id DESC LIMIT 1)"
)
_LISTED = Row(
    ListingRow,
    prefix="r.",
    empty=("schedule", "channel", "prompt"),
    columns={"last_status": _LATEST_RUN.format("status"), "last_reason": _LATEST_RUN.format("reason")},
)

_UPSERT = text(
    _STATE.insert(
        skip=("paused_by", "run_requested_at"),
        values={"active": ":yes", "paused": ":no", "updated_at": ":now"},
    )
    + " ON CONFLICT (instance, name, source) DO UPDATE SET schedule = excluded.schedule,"
    " channel = excluded.channel, prompt = excluded.prompt, next_due = excluded.next_due,"
    " active = excluded.active, updated_at = excluded.updated_at"
)
_DEACTIVATE = text(_STATE.update({"active": ":no", "next_due": "NULL"}))
_DELETE = text("DELETE FROM routines WHERE instance = :instance AND name = :name AND source = :source")
_STATES = text(f"SELECT {_STATE.sql} FROM routines WHERE instance = :instance")
_BY_NAME = ("instance", "name")  # what operators and the clock set is the name's, on every row of it
_NEXT_DUE = text(_STATE.update(["next_due"], where=_BY_NAME))
_PAUSE = text(_STATE.update({"paused": ":paused", "paused_by": ":by", "updated_at": ":now"}, where=_BY_NAME))
_REQUEST = text(_STATE.update({"run_requested_at": ":now", "updated_at": ":now"}, where=_BY_NAME))
_TAKE_REQUEST = text(
    _STATE.update({"run_requested_at": "NULL"}, where=_BY_NAME, also="run_requested_at = :at")
)
_CLAIM = text(
    _RUN.insert(skip=("id", "turn_id"), values={"tokens": "0"})
    + " ON CONFLICT (instance, routine, due_at) DO NOTHING RETURNING id"
)
_LAST_DUES = text("SELECT routine, max(due_at) FROM routine_runs WHERE instance = :instance GROUP BY routine")
_IS_RUNNING = text(
    "SELECT 1 FROM routine_runs WHERE instance = :instance AND routine = :routine"
    " AND status = 'running' LIMIT 1"
)
_FINISH = text(
    _RUN.update(
        {
            "status": ":status",
            "reason": ":reason",
            "turn_id": "coalesce(:turn_id, turn_id)",
            "tokens": ":tokens",
            "ended_at": ":now",
        },
        also="status = 'running'",
    )
)
_SET_TURN = text(_RUN.update(["turn_id"]))
_ABANDON = text(
    _RUN.update(
        {"status": "'failed'", "reason": "'interrupted'", "ended_at": ":now"},
        where=("instance",),
        also="status = 'running'",
    )
)
_TOKENS_SINCE = text(
    "SELECT coalesce(sum(t.tokens), 0) FROM routine_runs r JOIN turns t ON t.id = r.turn_id"
    " WHERE r.instance = :instance AND r.routine = :routine AND r.due_at >= :since"
)
_HISTORY = text(
    f"SELECT {_RUN.sql} FROM routine_runs WHERE instance = :instance AND routine = :routine"
    " ORDER BY due_at DESC, id DESC LIMIT :limit"
)
_RECENT = text(f"SELECT {_RUN.sql} FROM routine_runs ORDER BY id DESC LIMIT :limit")
_GET_RUN = text(f"SELECT {_RUN.sql} FROM routine_runs WHERE id = :id")
_LISTING = text(f"SELECT {_LISTED.sql} FROM routines r ORDER BY r.instance, r.name, r.source DESC")
_COUNT = text("SELECT status, count(*) FROM routine_runs WHERE instance = :instance GROUP BY status")


class Routines:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- what the fleet read -------------------------------------------------------------

    def define(self, instance: str, defined: Sequence[tuple[str, str, str, float | None]]) -> None:
        """The routines of ``instance``'s file as (name, schedule, channel, next due); the
        ones no longer there stay (with their pause) but are no longer active."""
        now = time.time()
        with self._db.transaction() as conn:
            rows = _STATE.all(conn.execute(_STATES, {"instance": instance}).all())
            names = {row.name for row in rows if row.source == FILE}
            for name, schedule, channel, next_due in defined:
                conn.execute(_UPSERT, _upsert(instance, name, FILE, schedule, channel, "", next_due, now))
            for name in names - {d[0] for d in defined}:
                conn.execute(_DEACTIVATE, {"instance": instance, "name": name, "source": FILE, "no": False})

    def rows(self, instance: str) -> list[RoutineStateRow]:
        """Every row of ``instance``: the file's (active or not) and the agent's."""
        with self._db.transaction() as conn:
            return _STATE.all(conn.execute(_STATES, {"instance": instance}).all())

    def states(self, instance: str) -> dict[str, RoutineStateRow]:
        """The routine that runs under each name: the file's when active, else the agent's,
        else the file's inactive row."""
        return effective(self.rows(instance))

    # -- what the agent sets ---------------------------------------------------------------

    def schedule(
        self,
        instance: str,
        name: str,
        *,
        schedule: str,
        channel: str,
        prompt: str,
        next_due: float,
        limit: int,
    ) -> str:
        """The agent's routine ``name`` kept: ``created`` or ``updated``; ``file`` when the
        file has a routine of that name (the file wins), ``full`` when the instance has
        ``limit`` routines of its own already."""
        now = time.time()
        with self._db.transaction() as conn:
            rows = _STATE.all(conn.execute(_STATES, {"instance": instance}).all())
            if any(r.name == name and r.source == FILE and r.active for r in rows):
                return "file"
            mine = {r.name for r in rows if r.source == AGENT}
            if name not in mine and len(mine) >= limit:
                return "full"
            conn.execute(_UPSERT, _upsert(instance, name, AGENT, schedule, channel, prompt, next_due, now))
        return "updated" if name in mine else "created"

    def cancel(self, instance: str, name: str) -> bool:
        """The agent's routine ``name`` removed (its runs stay in the history); False when it
        has none of that name."""
        with self._db.transaction() as conn:
            params = {"instance": instance, "name": name, "source": AGENT}
            return int(conn.execute(_DELETE, params).rowcount) > 0

    def set_next_due(self, instance: str, name: str, next_due: float | None) -> None:
        with self._db.transaction() as conn:
            conn.execute(_NEXT_DUE, {"instance": instance, "name": name, "next_due": next_due})

    # -- what operators set ----------------------------------------------------------------

    def set_paused(self, instance: str, name: str, paused: bool, *, by: str | None = None) -> bool:
        """False when the fleet has never read a routine of that name for the instance."""
        params = {"instance": instance, "name": name, "paused": paused, "by": by, "now": time.time()}
        with self._db.transaction() as conn:
            return int(conn.execute(_PAUSE, params).rowcount) >= 1

    def request_run(self, instance: str, name: str) -> bool:
        """One run now, by whichever process holds the instance (its clock takes the request)."""
        with self._db.transaction() as conn:
            return (
                int(conn.execute(_REQUEST, {"instance": instance, "name": name, "now": time.time()}).rowcount)
                >= 1
            )

    def take_request(self, instance: str, name: str, at: float) -> bool:
        """The request made at ``at`` is this caller's to run (once: a guarded update)."""
        with self._db.transaction() as conn:
            return (
                int(conn.execute(_TAKE_REQUEST, {"instance": instance, "name": name, "at": at}).rowcount) >= 1
            )

    # -- runs ------------------------------------------------------------------------------

    def claim(self, instance: str, routine: str, due_at: float, status: str, reason: str = "") -> int | None:
        """The due time's row, inserted with ``status``; None when another claim has it."""
        now = time.time()
        params = {
            "instance": instance,
            "routine": routine,
            "due_at": due_at,
            "status": status,
            "reason": reason,
            "started_at": now if status == RUNNING else None,
            "ended_at": None if status == RUNNING else now,
        }
        with self._db.transaction() as conn:
            row = conn.execute(_CLAIM, params).first()
        return int(row[0]) if row else None

    def last_dues(self, instance: str) -> dict[str, float]:
        with self._db.transaction() as conn:
            return {str(r[0]): float(r[1]) for r in conn.execute(_LAST_DUES, {"instance": instance}).all()}

    def is_running(self, instance: str, routine: str) -> bool:
        with self._db.transaction() as conn:
            return conn.execute(_IS_RUNNING, {"instance": instance, "routine": routine}).first() is not None

    def set_turn(self, run_id: int, turn_id: int) -> None:
        with self._db.transaction() as conn:
            conn.execute(_SET_TURN, {"id": run_id, "turn_id": turn_id})

    def finish(
        self, run_id: int, status: str, *, reason: str = "", turn_id: int | None = None, tokens: int = 0
    ) -> bool:
        """False when the run was no longer running (finished already)."""
        params = {
            "id": run_id,
            "status": status,
            "reason": reason,
            "turn_id": turn_id,
            "tokens": tokens,
            "now": time.time(),
        }
        with self._db.transaction() as conn:
            return int(conn.execute(_FINISH, params).rowcount) == 1

    def abandon_running(self, instance: str) -> int:
        """At start: runs a previous process left ``running`` are ``failed`` (``interrupted``),
        never run again (their due time is past, and may have half-run)."""
        with self._db.transaction() as conn:
            return int(conn.execute(_ABANDON, {"instance": instance, "now": time.time()}).rowcount)

    def tokens_since(self, instance: str, routine: str, since: float) -> int:
        with self._db.transaction() as conn:
            row = conn.execute(
                _TOKENS_SINCE, {"instance": instance, "routine": routine, "since": since}
            ).first()
        return int(row[0]) if row else 0

    def get_run(self, run_id: int) -> RunRow | None:
        with self._db.transaction() as conn:
            r = conn.execute(_GET_RUN, {"id": run_id}).first()
        return _RUN.first(r)

    def recent(self, limit: int = 50) -> list[RunRow]:
        """The newest runs of every routine (the playground's notes)."""
        with self._db.transaction() as conn:
            return _RUN.all(conn.execute(_RECENT, {"limit": limit}).all())

    def history(self, instance: str, routine: str, limit: int = 50) -> list[RunRow]:
        with self._db.transaction() as conn:
            rows = conn.execute(_HISTORY, {"instance": instance, "routine": routine, "limit": limit}).all()
        return _RUN.all(rows)

    def listing(self) -> list[ListingRow]:
        with self._db.transaction() as conn:
            rows = conn.execute(_LISTING).all()
        return _LISTED.all(rows)

    def counts(self, instance: str) -> dict[str, int]:
        with self._db.transaction() as conn:
            return {str(r[0]): int(r[1]) for r in conn.execute(_COUNT, {"instance": instance}).all()}


def effective(rows: Sequence[RoutineStateRow]) -> dict[str, RoutineStateRow]:
    """Per name, the row that runs: an active file row, else the agent's, else the file's."""
    rank = {(FILE, True): 2, (AGENT, True): 1, (AGENT, False): 1}
    found: dict[str, RoutineStateRow] = {}
    for row in rows:
        held = found.get(row.name)
        if held is None or rank.get((row.source, row.active), 0) > rank.get((held.source, held.active), 0):
            found[row.name] = row
    return found


def shadowed(row: RoutineStateRow, rows: Sequence[RoutineStateRow]) -> bool:
    """An agent's routine whose name the file has: it does not run while the file has it."""
    return row.source == AGENT and any(
        r.instance == row.instance and r.name == row.name and r.source == FILE and r.active for r in rows
    )


def _upsert(
    instance: str,
    name: str,
    source: str,
    schedule: str,
    channel: str,
    prompt: str,
    next_due: float | None,
    now: float,
) -> dict[str, object]:
    return {
        "instance": instance,
        "name": name,
        "source": source,
        "schedule": schedule,
        "channel": channel,
        "prompt": prompt,
        "next_due": next_due,
        "yes": True,
        "no": False,
        "now": now,
    }
