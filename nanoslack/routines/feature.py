"""Routines as a room feature (``nanoslack.features``, docs/routines.md): the routine tools
each turn is offered, the clock that claims due times, and the turn source the instance's
scheduler takes the claimed runs from (``RoutineTurns``). The feature builds its parts
from what the composition root hands it: the root names no part of routines."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from nanoslack.features import Clock, RoomFeature, TurnSource
from nanoslack.halts import Halts
from nanoslack.inbound import Identity
from nanoslack.metrics import Tally
from nanoslack.routines import spec
from nanoslack.routines.clock import TICK_S, RoutineClock, RunQueue
from nanoslack.routines.runner import RoutineTurns
from nanoslack.routines.tools import AgentRoutines, MayWriteSelf, RoutineToolset
from nanoslack.store import RoutineStateRow, Store
from nanoslack.tools.toolbox import ToolFamily

# Whether a bot user is a member of a conversation, as Slack says (None: it cannot tell).
IsMember = Callable[[str, str], Awaitable[bool | None]]


class RoutinesFeature(RoomFeature):
    def __init__(
        self,
        store: Store,
        identity: Identity,
        *,
        teammates_dir: Path,
        owners: tuple[str, ...],
        halts: Halts,
        wake: Callable[[], None],
        tz: dt.tzinfo = dt.UTC,
        max_steps: int | None = None,
        is_member: IsMember | None = None,
        used_today: Callable[[], int] | None = None,
        daily_cap: int | None = None,
        fence: Callable[[], bool] | None = None,
        tally: Tally | None = None,
        tick: float = TICK_S,
        clock: Callable[[], float] = time.time,
        may_write_self: MayWriteSelf | None = None,
    ) -> None:
        name = identity.instance
        self._identity = identity
        self._path = spec.routines_path(teammates_dir, name)
        self._owners = owners
        self._tz = tz
        self._max_steps = max_steps
        self._is_member = is_member
        self.turns = RoutineTurns(store, name, RunQueue(), owners=owners, tally=tally)
        self.clock = RoutineClock(
            store,
            name,
            path=self._path,
            load=self._load,
            queue=self.turns.queue,
            halts=halts,
            owners=owners,
            used_today=used_today,
            daily_cap=daily_cap,
            wake=wake,
            fence=fence,
            tally=tally,
            tick=tick,
            clock=clock,
            from_row=self._agent_routine,
        )
        agent = AgentRoutines(may_write_self=may_write_self, member_of=self._member_of, tz=tz, clock=clock)
        self._toolset = RoutineToolset.factory(store, name, owners, agent)
        self._schedules: dict[str, spec.Schedule | None] = {}

    def toolsets(self) -> Sequence[ToolFamily]:
        return (self._toolset,)

    def clocks(self) -> Mapping[str, Clock]:
        return {"routine-clock": self.clock}

    def turn_sources(self) -> Sequence[TurnSource]:
        return (self.turns,)

    async def _load(self) -> spec.RoutineFile:
        """The instance's routines file, with the routines whose conversation the bot is not
        in turned into problems (asking Slack, when the edge can)."""
        loaded = spec.load(self._path, self._identity.instance, tz=self._tz, max_steps=self._max_steps)
        return await spec.check_channels(loaded, self._member_of, owners=self._owners)

    def _agent_routine(self, row: RoutineStateRow) -> spec.Routine | None:
        """An agent's routine as its row keeps it (``schedule_routine`` checked it), run like
        a file's: no gate, the instance's step bound."""
        if row.schedule not in self._schedules:  # read once: the clock asks every tick
            self._schedules[row.schedule] = spec.schedule_from_text(row.schedule, self._tz)
        schedule = self._schedules[row.schedule]
        if schedule is None:
            return None
        return spec.Routine(
            instance=row.instance,
            name=row.name,
            schedule=schedule,
            channel=row.channel,
            prompt=row.prompt,
            folder=self._path.parent,
        )

    async def _member_of(self, channel: str) -> bool | None:
        if self._is_member is None:
            return None
        return await self._is_member(channel, self._identity.bot_user_id)
