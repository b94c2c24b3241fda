"""When a routine's due time comes, in the process that holds the instance (docs/routines.md).

Each instance's clock runs with its core, so only the lease holder fires. Nothing it
decides lives only in memory: every due time is a ``routine_runs`` row, claimed by its
unique insert, and the next due time is computed from the newest row, so a restart, a
standby taking the lease over or a second PostgreSQL process goes on where the store
says, and no due time runs twice.

A due time either ends at once (``skipped``: paused, still running, room halted, budget;
``missed``: it passed while nobody held the instance) or is claimed ``running`` and
queued for the instance's turn scheduler (``RunQueue``), which runs it as a turn when no
person's turn waits. The file is read again when it changes (its mtime and size).

The agent's own routines (``schedule_routine``) live in the store, not the file: each
tick reads the instance's rows (the same read that says what is paused), so a routine
the agent set or cancelled, in this process or another, runs from the next tick on.
A name the file has is the file's: the agent's routine of that name is shadowed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nanoslack.halts import Halts
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.routines.spec import Routine, RoutineFile
from nanoslack.store import RoutineStateRow, Store
from nanoslack.store.routines import AGENT, RUNNING, effective
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

TICK_S = 0.5
# At most this many ``missed`` rows for one routine's gap: a week down with every = "2s"
# must not write 300,000 rows at start (the count of the rest is logged).
MAX_MISSED_ROWS = 1_000
BUDGET_DM = (
    "⏸️ My routine “{name}” stopped for today: its token budget is spent ({why}). "
    "It runs again tomorrow (UTC)."
)


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """A claimed due time, waiting for its turn."""

    run_id: int
    routine: Routine
    due_at: float


class RunQueue:
    """The instance's claimed runs, oldest first, as the turn scheduler takes them."""

    def __init__(self) -> None:
        self._runs: deque[QueuedRun] = deque()

    def put(self, run: QueuedRun) -> None:
        self._runs.append(run)

    def put_front(self, run: QueuedRun) -> None:
        self._runs.appendleft(run)

    def take(self) -> QueuedRun | None:
        return self._runs.popleft() if self._runs else None

    def drop_all(self) -> list[QueuedRun]:
        runs = list(self._runs)
        self._runs.clear()
        return runs

    def __len__(self) -> int:
        return len(self._runs)


# Loads the instance's routines file (parsing, and the checks that need Slack).
FileLoader = Callable[[], Awaitable[RoutineFile]]
# An agent's routine as its store row says (None: a row whose schedule no longer reads).
FromRow = Callable[[RoutineStateRow], Routine | None]


class RoutineClock:
    def __init__(
        self,
        store: Store,
        instance: str,
        *,
        path: Path,
        load: FileLoader,
        queue: RunQueue,
        halts: Halts,
        owners: Sequence[str] = (),
        used_today: Callable[[], int] | None = None,
        daily_cap: int | None = None,
        wake: Callable[[], None] = lambda: None,
        fence: Callable[[], bool] | None = None,
        tally: Tally | None = None,
        tick: float = TICK_S,
        clock: Callable[[], float] = time.time,
        from_row: FromRow | None = None,
    ) -> None:
        self._store = store
        self._from_row = from_row
        self.instance = instance
        self._path = path
        self._load = load
        self.queue = queue
        self._halts = halts
        self._owners = tuple(owners)
        self._used_today = used_today
        self._daily_cap = daily_cap
        self._wake = wake
        self._fence = fence
        self._tally = tally or Tally()
        self._tick = tick
        self._clock = clock
        self._stamp: tuple[float, int] | None = None
        self.routines: dict[str, Routine] = {}  # the file's
        self.agents: dict[str, Routine] = {}  # the agent's, shadowed ones left out
        self._next: dict[str, float] = {}
        self._started = False
        self._read_once = False
        self._agents_read = False

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        failing = ""  # the error of the ticks failing now: logged once, not every tick
        while True:
            try:
                await self.tick(self._clock())
            except Exception as exc:  # the store hiccuped: the next tick finds the same rows
                error = f"{type(exc).__name__}: {exc}"
                if error != failing:
                    log.warning("routine clock failed", instance=self.instance, error=error)
                failing = error
            else:
                if failing:
                    log.info("routine clock recovered", instance=self.instance)
                failing = ""
            await asyncio.sleep(self._tick)

    def start(self) -> None:
        """Once, before the first tick: runs a previous process left under way are over."""
        if self._started:
            return
        self._started = True
        abandoned = self._store.routines.abandon_running(self.instance)
        if abandoned:
            log.info("routine runs interrupted by a previous run", instance=self.instance, count=abandoned)

    async def tick(self, now: float) -> None:
        if self._fence is not None and not self._fence():
            return  # the lease is going: the next holder fires
        self.start()
        await self._reload_if_changed(now)
        rows = self._store.routines.rows(self.instance)
        self._sync_agents(rows, now)
        if not self.routines and not self.agents:
            return
        states = effective(rows)
        for name, routine in {**self.agents, **self.routines}.items():
            state = states.get(name)
            if state is not None and state.run_requested_at is not None:
                if self._store.routines.take_request(self.instance, name, state.run_requested_at):
                    log.info("routine run requested", instance=self.instance, routine=name)
                    self._fire(routine, state.run_requested_at, paused=False)
            due = self._next.get(name)
            if due is not None and due <= now:
                self._come_due(routine, due, now, paused=bool(state and state.paused))

    # -- the file ----------------------------------------------------------------------------

    async def _reload_if_changed(self, now: float) -> None:
        try:
            st = os.stat(self._path)
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp and self._read_once:
            return
        self._stamp = stamp
        self._read_once = True
        await self.reload(now)

    async def reload(self, now: float) -> None:
        loaded = await self._load()
        for p in loaded.problems:
            log.error(
                "routines malformed",
                instance=self.instance,
                file=p.file,
                line=p.line,
                routine=p.routine,
                what=p.what,
            )
        self.routines = {r.name: r for r in loaded.routines}
        last = self._store.routines.last_dues(self.instance)
        # The agent's routines keep their next due times (one the file now has is the file's).
        self._next = {n: t for n, t in self._next.items() if n in self.agents and n not in self.routines}
        for name, routine in self.routines.items():
            # A routine never run starts now; one with rows goes on after its newest due time
            # (what passed since is found missed at the first tick).
            self._next[name] = routine.schedule.next_after(last.get(name, now))
        self._store.routines.define(
            self.instance,
            [(r.name, r.schedule.describe(), r.channel, self._next[r.name]) for r in self.routines.values()],
        )
        if loaded.routines or loaded.problems:
            log.info(
                "routines loaded",
                instance=self.instance,
                file=str(self._path),
                routines=len(loaded.routines),
                problems=len(loaded.problems),
            )

    # -- the agent's routines ------------------------------------------------------------------

    def _sync_agents(self, rows: Sequence[RoutineStateRow], now: float) -> None:
        """The agent's routines as the store has them now; a new or changed one is due from
        its next time after its newest row (or now), like a file routine read anew."""
        if self._from_row is None:
            return
        wanted: dict[str, Routine] = {}
        stored: dict[str, float | None] = {}
        for row in rows:
            if row.source == AGENT and row.name not in self.routines:
                routine = self._from_row(row)
                if routine is not None:
                    wanted[row.name], stored[row.name] = routine, row.next_due
        if wanted == self.agents and self._agents_read:
            return
        # At the clock's first read (a start, a lease taken over) a routine goes on after its
        # newest row, so what passed meanwhile is found missed; one set or changed while the
        # clock runs starts at the first due time ``schedule_routine`` gave it (unless that
        # is an interval old: then now), so a routine cancelled and set again misses nothing.
        last = self._store.routines.last_dues(self.instance) if not self._agents_read else {}
        self._agents_read = True
        for name in self.agents.keys() - wanted.keys():
            if name not in self.routines:
                self._next.pop(name, None)
        for name, routine in wanted.items():
            if self.agents.get(name) == routine and name in self._next:
                continue
            first = stored[name]
            if name in last or first is None or first <= now - routine.schedule.interval_at(first):
                first = routine.schedule.next_after(last.get(name, now))
            self._next[name] = first
        self.agents = wanted
        log.info("agent routines read", instance=self.instance, routines=len(wanted))

    # -- due times -----------------------------------------------------------------------------

    def _come_due(self, routine: Routine, first: float, now: float, *, paused: bool) -> None:
        """Every due time from ``first`` up to ``now``: the older ones were missed, the
        newest runs when it is less than one interval old (else it was missed too)."""
        dues = [first]
        skipped_count = 0
        nxt = routine.schedule.next_after(first)
        while nxt <= now:
            dues.append(nxt)
            if len(dues) > MAX_MISSED_ROWS + 1:
                dues.pop(0)
                skipped_count += 1
            nxt = routine.schedule.next_after(nxt)
        newest = dues[-1]
        for due in dues[:-1]:
            self._end(routine, due, "missed")
        if now - newest < routine.schedule.interval_at(newest):
            self._fire(routine, newest, paused=paused)
        else:
            self._end(routine, newest, "missed")
        if len(dues) > 1 or skipped_count:
            log.info(
                "routine due times missed",
                instance=self.instance,
                routine=routine.name,
                count=len(dues) - 1 + skipped_count,
                unrecorded=skipped_count,
            )
        self._next[routine.name] = nxt
        self._store.routines.set_next_due(self.instance, routine.name, nxt)

    def _fire(self, routine: Routine, due: float, *, paused: bool) -> None:
        name = routine.name
        if paused:
            self._end(routine, due, "skipped", "paused")
        elif self._store.routines.is_running(self.instance, name):
            self._end(routine, due, "skipped", "still running")
        elif not routine.to_owners and self._halts.is_halted(routine.channel):
            self._end(routine, due, "skipped", "room halted")
        elif (why := self._budget_spent(routine)) is not None:
            self._end(routine, due, "skipped", "budget")
            self._tell_budget(routine, why)
        else:
            run_id = self._store.routines.claim(self.instance, name, due, RUNNING)
            if run_id is None:
                return  # another process claimed it
            log.info("routine due", instance=self.instance, routine=name, run=run_id, due_at=due)
            self.queue.put(QueuedRun(run_id, routine, due))
            self._wake()

    def _end(self, routine: Routine, due: float, status: str, reason: str = "") -> None:
        if self._store.routines.claim(self.instance, routine.name, due, status, reason) is None:
            return
        self._tally.routine_run(routine.name, status)
        if status != "missed":
            log.info(
                "routine skipped", instance=self.instance, routine=routine.name, due_at=due, reason=reason
            )

    def _budget_spent(self, routine: Routine) -> str | None:
        if (
            self._daily_cap is not None
            and self._used_today is not None
            and self._used_today() >= self._daily_cap
        ):
            return "the instance's daily token cap"
        if routine.daily_tokens is not None:
            used = self._store.routines.tokens_since(self.instance, routine.name, day_start())
            if used >= routine.daily_tokens:
                return f"{used} of its {routine.daily_tokens} daily tokens"
        return None

    def _tell_budget(self, routine: Routine, why: str) -> None:
        """At most one DM a day per routine to each owner: the outbox key is the claim."""
        day = utc_day()
        with self._store.transaction():
            for owner in self._owners:
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"routine-budget:{self.instance}:{routine.name}:{day}:{owner}",
                    purpose="notice",
                    dm_user=owner,
                    text=BUDGET_DM.format(name=routine.name, why=why),
                )


def day_start(now: float | None = None) -> float:
    at = dt.datetime.fromtimestamp(time.time() if now is None else now, dt.UTC)
    return at.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
