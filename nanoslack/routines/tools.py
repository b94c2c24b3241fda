"""The routine tools (docs/routines.md).

``stop_routine(name)``: an owner tells the agent to stop one of its routines. Offered only
in a turn an owner (``SLACK_OWNER``) woke: a stranger in a room, or another bot, must not
switch off the agent's standing work. The pause is the same row ``nanoslack routines
pause`` writes; ``routines resume`` undoes it.

``schedule_routine(name, every | cron, prompt, channel)`` and ``cancel_routine(name)``: the
agent sets (or changes) and removes routines of its own ("Routines an agent sets"). They
work only in a turn that may write the agent's ``self`` notes (docs/memory.md's write
rule: its owners, the chain's lead, its own routine); in any other turn a call is refused
as its result, with a ``routine refused`` log line: a routine is a lasting instruction,
and another bot or a stranger must not plant one. Kept in the store
(``routines``, ``source = 'agent'``), so the process that holds the instance, this one or
another, runs it like a file's: at most ``AGENT_LIMIT`` an instance, at most once every 5
minutes; a name the file has is the file's. Like ``stop_routine`` a call writes at once:
a turn re-run after a crash sets the same routine again (an update), never a second one.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from nanoslack.agents import ToolResult, Turn
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.logs import get_logger
from nanoslack.routines import spec
from nanoslack.store import MessageRow, Store
from nanoslack.store.routines import FILE
from nanoslack.tools.host import TurnEffects
from nanoslack.tools.toolbox import ToolFamily

log = get_logger(__name__)

STOP_ROUTINE = "stop_routine"
SCHEDULE_ROUTINE = "schedule_routine"
CANCEL_ROUTINE = "cancel_routine"
DESCRIPTION = (
    "Pause one of your own routines (scheduled runs) by name, when your owner asks you to stop it. "
    "It stays paused until an operator resumes it."
)
SCHEDULE_DESCRIPTION = (
    "Set up a routine of your own: a turn you take on a schedule, when your owner asks (e.g. 'check "
    "this every morning'). Give every (30m, 2h, 1d; at least 5m) or cron (five fields, e.g. "
    "'0 9 * * 1-5'), and the prompt that will wake you. What you post then starts a new thread in "
    "channel (default: this conversation). The same name again changes it. At most "
    f"{spec.AGENT_LIMIT} routines."
)
CANCEL_DESCRIPTION = "Remove a routine you set with schedule_routine, by name."
WRITE_RULE = (
    "only your owners can ask you to set up or cancel a routine (a routine is a standing "
    "instruction; another agent or a stranger cannot give you one)"
)

# Whether a turn may write the agent's ``self`` notes (``nanoslack.tools.memory``'s rule),
# from the turn and the messages that woke it.
MayWriteSelf = Callable[[Turn, Sequence[MessageRow]], bool]
# Whether the instance's bot is in a conversation (None: Slack cannot tell).
MemberOf = Callable[[str], Awaitable[bool | None]]


class StopRoutine(Arguments):
    name: str = Field(description="The routine's name, e.g. daily-plan.")


class ScheduleRoutine(Arguments):
    name: str = Field(description="A short name: lowercase letters, digits, - or _ (e.g. morning-check).")
    prompt: str = Field(description="What the run is to do, as the message that will wake you.")
    every: str = Field("", description="How often: <n>m, <n>h or <n>d (at least 5m). Give every or cron.")
    cron: str = Field("", description="Or a cron schedule: five fields, minute hour day month weekday.")
    channel: str = Field(
        "",
        description='Where its posts go: a conversation id, "owner" (your owners\' DMs), or empty for here.',
    )


class CancelRoutine(Arguments):
    name: str = Field(description="The routine's name.")


@dataclass(frozen=True)
class AgentRoutines:
    """What ``schedule_routine`` needs beyond the turn: the rule, the clock, Slack."""

    may_write_self: MayWriteSelf | None = None
    member_of: MemberOf | None = None
    tz: dt.tzinfo = dt.UTC
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class RoutineToolset:
    store: Store
    instance: str
    owner_woke: bool
    by: str
    may_set: bool = False  # the turn may write self notes: schedule_routine, cancel_routine
    here: str = ""  # the turn's conversation ("": the owners' DMs), the default channel
    agent: AgentRoutines = AgentRoutines()

    @staticmethod
    def factory(
        store: Store, instance: str, owners: tuple[str, ...], agent: AgentRoutines | None = None
    ) -> ToolFamily:
        owner_ids = {f"slack:{o}" for o in owners}
        agent = agent or AgentRoutines()

        def build(
            _turn_id: int, turn: Turn, msgs: Sequence[MessageRow], _effects: TurnEffects
        ) -> list[Tool[Any]]:
            waker = msgs[-1].sender_id if msgs else ""
            owner_woke = waker in owner_ids
            if agent.may_write_self is not None:
                may_set = agent.may_write_self(turn, msgs)
            else:  # no rule given: the owner's turn, as for stop_routine
                may_set = owner_woke
            by = waker or (turn.origin.conversation if turn.origin is not None else turn.sender_id)
            return RoutineToolset(store, instance, owner_woke, by, may_set, turn.channel, agent).tools()

        return build

    def tools(self) -> list[Tool[Any]]:
        return [
            Tool(STOP_ROUTINE, DESCRIPTION, StopRoutine, self._stop, offered=self.owner_woke),
            # Offered in every turn, like ``remember``: the refusal is the result whatever the
            # back end, and a thread's tools stay the same whoever wakes it (the prompt cache).
            Tool(SCHEDULE_ROUTINE, SCHEDULE_DESCRIPTION, ScheduleRoutine, self._schedule),
            Tool(CANCEL_ROUTINE, CANCEL_DESCRIPTION, CancelRoutine, self._cancel),
        ]

    async def _stop(self, args: StopRoutine) -> ToolResult:
        if not self.owner_woke:
            return ToolResult("not stopped: only your owners can ask you to stop a routine", is_error=True)
        routine = args.name.strip()
        states = self.store.routines.states(self.instance)
        if routine not in states or not states[routine].active:
            known = ", ".join(sorted(n for n, s in states.items() if s.active)) or "none"
            return ToolResult(f"no routine named {routine!r}; your routines are: {known}", is_error=True)
        self.store.routines.set_paused(self.instance, routine, True, by=self.by)
        return ToolResult(f"routine {routine} paused: it runs again only when an operator resumes it")

    # -- routines the agent sets -----------------------------------------------------------------

    def _refused(self, tool: str, name: str, why: str) -> ToolResult:
        log.info("routine refused", instance=self.instance, tool=tool, routine=name, by=self.by, reason=why)
        verb = "not scheduled" if tool == SCHEDULE_ROUTINE else "not cancelled"
        return ToolResult(f"{verb}: {why}", is_error=True)

    async def _schedule(self, args: ScheduleRoutine) -> ToolResult:
        name = args.name.strip()
        if not self.may_set:
            return self._refused(SCHEDULE_ROUTINE, name, WRITE_RULE)
        if not spec.NAME_RE.fullmatch(name):
            return self._refused(SCHEDULE_ROUTINE, name, "name it with lowercase letters, digits, - or _")
        prompt = args.prompt.strip()
        if not prompt:
            return self._refused(SCHEDULE_ROUTINE, name, "give the prompt that will wake you")
        now = self.agent.clock()
        schedule = spec.agent_schedule(args.every, args.cron, tz=self.agent.tz, now=now)
        if isinstance(schedule, str):
            return self._refused(SCHEDULE_ROUTINE, name, schedule)
        channel, why = await self._channel(args.channel.strip())
        if why:
            return self._refused(SCHEDULE_ROUTINE, name, why)
        next_due = schedule.next_after(now)
        kept = self.store.routines.schedule(
            self.instance,
            name,
            schedule=schedule.describe(),
            channel=channel,
            prompt=prompt,
            next_due=next_due,
            limit=spec.AGENT_LIMIT,
        )
        if kept == "file":
            why = f"your operator's routines file has a routine named {name}; it wins: choose another name"
            return self._refused(SCHEDULE_ROUTINE, name, why)
        if kept == "full":
            mine = ", ".join(self._mine()) or "none"
            why = f"you have {spec.AGENT_LIMIT} routines already ({mine}): cancel one first"
            return self._refused(SCHEDULE_ROUTINE, name, why)
        where = "your owners' DMs" if channel == spec.OWNER else channel
        log.info(
            "routine scheduled",
            instance=self.instance,
            routine=name,
            schedule=schedule.describe(),
            channel=channel,
            by=self.by,
            kept=kept,
        )
        return ToolResult(
            f"routine {name} {kept}: {schedule.describe()}, posting in {where}; next run "
            f"{_when(next_due)}. cancel_routine removes it."
        )

    async def _channel(self, asked: str) -> tuple[str, str]:
        """The routine's channel and "", or "" and why not: the conversation asked for when
        the bot is in it; by default this turn's (the owners' DMs when the turn has none)."""
        if not asked or asked == self.here:
            return self.here or spec.OWNER, ""
        if asked == spec.OWNER:
            return asked, ""
        if not spec.CHANNEL_RE.fullmatch(asked):
            return (
                "",
                f"unknown channel {asked!r}: give a conversation id (C…, G…, D…), "
                '"owner", or nothing for here',
            )
        if self.agent.member_of is not None and await self.agent.member_of(asked) is False:
            return "", f"you are not a member of {asked} (or it does not exist): ask to be invited there"
        return asked, ""

    async def _cancel(self, args: CancelRoutine) -> ToolResult:
        name = args.name.strip()
        if not self.may_set:
            return self._refused(CANCEL_ROUTINE, name, WRITE_RULE)
        if self.store.routines.cancel(self.instance, name):
            log.info("routine cancelled", instance=self.instance, routine=name, by=self.by)
            return ToolResult(f"routine {name} cancelled: it runs no more")
        states = self.store.routines.states(self.instance)
        if name in states and states[name].source == FILE and states[name].active:
            why = (
                f"{name} is in your operator's routines file: only they can remove it "
                "(stop_routine pauses it)"
            )
            return self._refused(CANCEL_ROUTINE, name, why)
        mine = ", ".join(self._mine()) or "none"
        return self._refused(CANCEL_ROUTINE, name, f"you have no routine named {name!r}; yours are: {mine}")

    def _mine(self) -> list[str]:
        return sorted(r.name for r in self.store.routines.rows(self.instance) if r.source != FILE)


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
