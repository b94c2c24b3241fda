"""``stop_routine(name)``: an owner tells the agent to stop one of its routines (docs/routines.md).

Offered only in a turn an owner (``SLACK_OWNER``) woke: a stranger in a room, or
another bot, must not switch off the agent's standing work. The pause is the same
row ``nanoslack routines pause`` writes; ``routines resume`` undoes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from nanoslack.agents import ToolResult, Turn
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.store import MessageRow, Store
from nanoslack.tools.host import TurnEffects
from nanoslack.tools.toolbox import ToolFamily

STOP_ROUTINE = "stop_routine"
DESCRIPTION = (
    "Pause one of your own routines (scheduled runs) by name, when your owner asks you to stop it. "
    "It stays paused until an operator resumes it."
)


class StopRoutine(Arguments):
    name: str = Field(description="The routine's name, e.g. daily-plan.")


@dataclass(frozen=True)
class RoutineToolset:
    store: Store
    instance: str
    owner_woke: bool
    by: str

    @staticmethod
    def factory(store: Store, instance: str, owners: tuple[str, ...]) -> ToolFamily:
        owner_ids = {f"slack:{o}" for o in owners}

        def build(
            _turn_id: int, _turn: Turn, msgs: Sequence[MessageRow], _effects: TurnEffects
        ) -> list[Tool[Any]]:
            waker = msgs[-1].sender_id if msgs else ""
            return RoutineToolset(store, instance, waker in owner_ids, waker).tools()

        return build

    def tools(self) -> list[Tool[Any]]:
        return [Tool(STOP_ROUTINE, DESCRIPTION, StopRoutine, self._stop, offered=self.owner_woke)]

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
