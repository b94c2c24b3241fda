"""Pruning what the fleet no longer needs (docs/architecture.md: the store stays bounded).

Only finished rows older than the retention go, a small batch per transaction so
the hot path (which shares the one connection and SQLite's write lock) waits at
most one batch. What is never pruned:

- an inbox row still ``received`` (a restart resumes it) or ``failed`` (parked for
  an operator), nor the inbox row of a message still ``pending`` or ``held``;
- a ``pending`` or ``held`` message (waiting for a turn or an approval);
- a ``running`` turn, nor the newest finished turn of a thread: its ``through_ts``
  is where the next turn's transcript starts;
- an outbox row still to send, nor the DM of an owner ask still open (its answer
  edits it, however late it comes); a file an outbox row uploads goes with its row;
- hop rows and engaged threads: they are state, not history, and a human message
  clears the former.

A pruned turn takes its steps (``turn_steps``) and people's 👍 / 👎 on its reply
(``feedback``) with it; handoffs go by age, answered owner asks once their DMs are gone.
Rooms' work goes once it is over: closed or stopped rounds (with their members), closed or
stale tasks not reported on since, closed votes (with their ballots) once no outbox row
names them. A round, task or vote still under way
never goes, nor a board (one message per room, edited for as long as the room lives).
An agent's own conversation (``agent_history``) goes by age like the messages it showed;
notes (``memories``) never do, only the drafts of turns that will never be recorded.
A routine's runs go by age, except each routine's newest (its clock goes on from it).
What the assistant pane said a person was viewing goes by age; so do the drafts of
streamed replies that no turn will finish (docs/agent-surface.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import TextClause, text

from nanoslack.store.database import Database

DEFAULT_RETENTION_DAYS = 14
BATCH = 500

_INBOX = text(
    "DELETE FROM inbox WHERE (instance, channel, ts) IN ("
    " SELECT i.instance, i.channel, i.ts FROM inbox i"
    " WHERE i.status IN ('done', 'dropped') AND i.finished_at < :cutoff"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.instance = i.instance AND m.channel = i.channel"
    " AND m.ts = i.ts AND m.status IN ('pending', 'held'))"
    " LIMIT :batch)"
)
_MESSAGES = text(
    "DELETE FROM messages WHERE (instance, channel, ts) IN ("
    " SELECT instance, channel, ts FROM messages"
    " WHERE status IN ('context', 'done', 'refused', 'deleted') AND created_at < :cutoff LIMIT :batch)"
)
# A message's files go with it (their downloads after: ``FileFetcher.prune``).
_MESSAGE_FILES = text(
    "DELETE FROM message_files WHERE (instance, channel, ts) IN ("
    " SELECT f.instance, f.channel, f.ts FROM message_files f WHERE NOT EXISTS (SELECT 1 FROM messages m"
    " WHERE m.instance = f.instance AND m.channel = f.channel AND m.ts = f.ts) LIMIT :batch)"
)
_OUTBOX = text(
    "DELETE FROM outbox WHERE id IN ("
    " SELECT id FROM outbox WHERE status IN ('sent', 'failed', 'cancelled')"
    " AND coalesce(sent_at, created_at) < :cutoff"
    " AND NOT EXISTS (SELECT 1 FROM owner_asks a WHERE a.id = outbox.ask_id AND a.status = 'open')"
    " LIMIT :batch)"
)
_FINISHED_TURN = "('done', 'silent', 'failed', 'budget', 'abandoned')"
# Turns go by id windows: the newest turn of every thread stays, and a plain
# ``LIMIT`` would rescan all those kept rows on every batch.
_TURN_WINDOW = text(
    "SELECT max(id) FROM (SELECT id FROM turns"
    f" WHERE id > :after AND status IN {_FINISHED_TURN} AND finished_at < :cutoff"
    " ORDER BY id LIMIT :batch) w"
)
_TURNS = text(
    "DELETE FROM turns WHERE id IN ("
    " SELECT t.id FROM turns t"
    f" WHERE t.id > :after AND t.id <= :upto AND t.status IN {_FINISHED_TURN} AND t.finished_at < :cutoff"
    " AND EXISTS (SELECT 1 FROM turns n WHERE n.instance = t.instance AND n.channel = t.channel"
    " AND n.thread_key = t.thread_key AND n.id > t.id"
    " AND n.status IN ('done', 'silent', 'failed', 'budget') AND n.through_ts >= t.through_ts))"
)

# What hangs off a turn goes with it: its steps (after the turns above were pruned).
_STEPS = text(
    "DELETE FROM turn_steps WHERE id IN ("
    " SELECT s.id FROM turn_steps s WHERE NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = s.turn_id)"
    " LIMIT :batch)"
)
# People's 👍 / 👎 on a turn's reply (docs/agent-surface.md): only counted next to the turn.
_FEEDBACK = text(
    "DELETE FROM feedback WHERE (instance, turn_id, user_id) IN (SELECT f.instance, f.turn_id, f.user_id"
    " FROM feedback f WHERE NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = f.turn_id) LIMIT :batch)"
)
_HANDOFFS = text(
    "DELETE FROM handoffs WHERE id IN (SELECT id FROM handoffs WHERE created_at < :cutoff LIMIT :batch)"
)
# An answered ask whose DMs are long gone: nothing will render it again.
_ASKS = text(
    "DELETE FROM owner_asks WHERE id IN (SELECT a.id FROM owner_asks a WHERE a.status = 'answered'"
    " AND a.answered_at < :cutoff AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.ask_id = a.id) LIMIT :batch)"
)

_ROUNDS = text(
    "DELETE FROM rounds WHERE id IN (SELECT id FROM rounds WHERE status IN ('closed', 'stopped')"
    " AND coalesce(closed_at, created_at) < :cutoff LIMIT :batch)"
)
_ROUND_MEMBERS = text(
    "DELETE FROM round_members WHERE (round_id, instance) IN (SELECT m.round_id, m.instance"
    " FROM round_members m WHERE NOT EXISTS (SELECT 1 FROM rounds r WHERE r.id = m.round_id) LIMIT :batch)"
)
# A stale task is off the board already; a report on it after this long opens a new one.
_TASKS = text(
    "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE updated_at < :cutoff"
    " AND (closed_at IS NOT NULL OR stale_at IS NOT NULL) LIMIT :batch)"
)
# A vote whose question or result is still in the outbox stays: the poster reads it.
_VOTES = text(
    "DELETE FROM votes WHERE id IN (SELECT v.id FROM votes v WHERE v.status IN ('closed', 'failed')"
    " AND coalesce(v.closed_at, v.created_at) < :cutoff"
    " AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.vote_id = v.id) LIMIT :batch)"
)
_BALLOTS = text(
    "DELETE FROM ballots WHERE (vote_id, voter) IN (SELECT b.vote_id, b.voter FROM ballots b"
    " WHERE NOT EXISTS (SELECT 1 FROM votes v WHERE v.id = b.vote_id) LIMIT :batch)"
)

# An agent's own conversation goes with the thread's messages, by age (docs/memory.md);
# notes are never pruned, only the drafts of turns that were never recorded.
_HISTORY = text(
    "DELETE FROM agent_history WHERE id IN (SELECT id FROM agent_history WHERE created_at < :cutoff"
    " LIMIT :batch)"
)
_NOTE_DRAFTS = text(
    "DELETE FROM memories WHERE id IN (SELECT m.id FROM memories m WHERE m.status = 'draft'"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = m.turn_id AND t.status = 'running') LIMIT :batch)"
)
# A routine's newest row stays: its due time is where the routine's clock goes on from.
_ROUTINE_RUNS = text(
    "DELETE FROM routine_runs WHERE id IN (SELECT r.id FROM routine_runs r WHERE r.status <> 'running'"
    " AND coalesce(r.ended_at, r.due_at) < :cutoff AND EXISTS (SELECT 1 FROM routine_runs n"
    " WHERE n.instance = r.instance AND n.routine = r.routine AND n.due_at > r.due_at) LIMIT :batch)"
)

# The channel a person viewed with the assistant pane open: past the retention it no longer
# says what they look at (the next turn is not told a weeks-old ``[Viewing …]``).
_ASSISTANT_THREADS = text(
    "DELETE FROM assistant_threads WHERE (instance, channel, thread_ts) IN ("
    " SELECT instance, channel, thread_ts FROM assistant_threads WHERE updated_at < :cutoff LIMIT :batch)"
)
# A draft whose turn will never post it (a halted turn's; a crash's no turn adopted).
_REPLY_DRAFTS = text(
    "DELETE FROM reply_drafts WHERE (instance, turn_id) IN (SELECT d.instance, d.turn_id FROM reply_drafts d"
    " WHERE d.started_at < :cutoff"
    " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = d.turn_id AND t.status = 'running') LIMIT :batch)"
)

# A reaction older than the retention window: the turn it was for has long run.
_REACTIONS = text(
    "DELETE FROM reactions WHERE (instance, channel, ts, user_id, emoji) IN ("
    " SELECT instance, channel, ts, user_id, emoji FROM reactions WHERE created_at < :cutoff LIMIT :batch)"
)

# A sent file's bytes (``send_file``) once its outbox row has gone.
_OUTBOX_FILES = text(
    "DELETE FROM outbox_files WHERE outbox_id IN (SELECT f.outbox_id FROM outbox_files f"
    " WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.id = f.outbox_id) LIMIT :batch)"
)

TABLES: dict[str, TextClause] = {
    "inbox": _INBOX,
    "messages": _MESSAGES,
    "message_files": _MESSAGE_FILES,
    "outbox": _OUTBOX,
    "outbox_files": _OUTBOX_FILES,
    "turns": _TURNS,
    "turn_steps": _STEPS,
    "feedback": _FEEDBACK,
    "handoffs": _HANDOFFS,
    "owner_asks": _ASKS,
    "rounds": _ROUNDS,
    "round_members": _ROUND_MEMBERS,
    "tasks": _TASKS,
    "votes": _VOTES,
    "ballots": _BALLOTS,
    "agent_history": _HISTORY,
    "memories": _NOTE_DRAFTS,
    "routine_runs": _ROUTINE_RUNS,
    "assistant_threads": _ASSISTANT_THREADS,
    "reply_drafts": _REPLY_DRAFTS,
    "reactions": _REACTIONS,
}


@dataclass
class Round:
    """One pass over every table: the cutoff and where the turns window is."""

    cutoff: float
    turns_after: int = 0


@dataclass
class PruneReport:
    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    batches: int = 0
    seconds: float = 0.0
    _started: float = field(default_factory=time.monotonic, init=False, repr=False, compare=False)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    def add(self, table: str, deleted: int) -> None:
        self.deleted[table] += deleted
        self.batches += 1
        self.seconds = time.monotonic() - self._started


class Retention:
    def __init__(self, db: Database, *, days: float = DEFAULT_RETENTION_DAYS, batch: int = BATCH) -> None:
        self._db = db
        self.days = days
        self.batch = batch

    def cutoff(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.days * 86400.0

    def start_round(self, now: float | None = None) -> Round:
        return Round(self.cutoff(now))

    def prune_batch(self, table: str, rnd: Round) -> tuple[int, bool]:
        """One transaction: at most ``batch`` rows of ``table``; how many went and
        whether there may be more."""
        params: dict[str, float | int] = {"cutoff": rnd.cutoff, "batch": self.batch}
        with self._db.transaction() as conn:
            if table != "turns":
                n = int(conn.execute(TABLES[table], params).rowcount)
                return n, n == self.batch
            upto = conn.execute(_TURN_WINDOW, {**params, "after": rnd.turns_after}).scalar()
            if upto is None:
                return 0, False
            n = int(conn.execute(_TURNS, {**params, "after": rnd.turns_after, "upto": upto}).rowcount)
            rnd.turns_after = int(upto)
            return n, True

    def batches(self, now: float | None = None) -> Iterator[tuple[str, int]]:
        """Everything due, table after table, one transaction per step: yields the
        table and the rows deleted after each batch, so the fleet's task can give the
        loop a turn between batches and the CLI can simply drain it."""
        rnd = self.start_round(now)
        for table in TABLES:
            more = True
            while more:
                n, more = self.prune_batch(table, rnd)
                yield table, n

    def prune_all(self, now: float | None = None) -> PruneReport:
        """Everything due, in one go (the CLI and tests; the fleet drives ``batches``)."""
        report = PruneReport()
        for table, n in self.batches(now):
            report.add(table, n)
        return report
