"""Routines as a room feature (``nanoslack.features``): the routine tools each turn is
offered, the clock that claims due times, and the turn source the instance's scheduler
takes the claimed runs from (``RoutineTurns``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nanoslack.features import Clock, RoomFeature, TurnSource
from nanoslack.routines.clock import RoutineClock
from nanoslack.routines.runner import RoutineTurns
from nanoslack.routines.tools import RoutineToolset
from nanoslack.store import Store
from nanoslack.tools.toolbox import ToolFamily


class RoutinesFeature(RoomFeature):
    def __init__(
        self,
        store: Store,
        instance: str,
        owners: tuple[str, ...],
        *,
        turns: RoutineTurns,
        clock: RoutineClock,
    ) -> None:
        self.turns = turns
        self._clock = clock
        self._toolset = RoutineToolset.factory(store, instance, owners)

    def toolsets(self) -> Sequence[ToolFamily]:
        return (self._toolset,)

    def clocks(self) -> Mapping[str, Clock]:
        return {"routine-clock": self._clock}

    def turn_sources(self) -> Sequence[TurnSource]:
        return (self.turns,)
