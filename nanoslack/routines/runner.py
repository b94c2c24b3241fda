"""The routines' turn source (``nanoslack.features.TurnSource``): a claimed due time as a turn.

The scheduler (``nanoslack.turns.scheduler``) takes a run from the queue when no
person's or handoff's turn of the instance waits and no other such turn runs; a run
(``RoutineRun``) runs its gate, gives its prompt, and ends its row (with the turn's
outcome, in the turn's transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nanoslack.agents import TurnOrigin
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.routines.clock import QueuedRun, RunQueue, day_start
from nanoslack.routines.gate import run_gate
from nanoslack.store import Store

log = get_logger(__name__)

KIND = "routine"  # a run's prompt is tagged [Routine "<name>"]; its history is "routine:<name>"
GUIDE = (
    "This is a scheduled run of your routine, not a message from someone: do what it asks. "
    "What you post with send_message starts a new thread; staying silent is fine when there is "
    "nothing to report."
)


class RoutineTurns:
    def __init__(
        self,
        store: Store,
        instance: str,
        queue: RunQueue,
        *,
        owners: Sequence[str] = (),
        tally: Tally | None = None,
    ) -> None:
        self._store = store
        self.instance = instance
        self.queue = queue
        self.owners = tuple(owners)
        self._tally = tally or Tally()

    def take(self) -> RoutineRun | None:
        run = self.queue.take()
        return RoutineRun(self, run) if run is not None else None

    def waiting(self) -> int:
        return len(self.queue)

    async def gate(self, run: QueuedRun) -> str | None:
        """The gate's output (``""`` without a gate); None when the gate ended the run."""
        routine = run.routine
        if not routine.gate:
            return ""
        result = await run_gate(routine.gate, routine.folder, instance=self.instance, routine=routine.name)
        if result.verdict == "wake":
            return result.output
        if result.verdict == "skip":
            self.end(run, "skipped", "gate")
            log.info("routine skipped", instance=self.instance, routine=routine.name, reason="gate")
        else:
            self.end(run, "failed", result.reason)
            log.warning(
                "routine gate failed", instance=self.instance, routine=routine.name, reason=result.reason
            )
        return None

    def started(self, run: QueuedRun, turn_id: int) -> None:
        self._store.routines.set_turn(run.run_id, turn_id)

    def end(
        self, run: QueuedRun, status: str, reason: str = "", *, turn_id: int | None = None, tokens: int = 0
    ) -> None:
        if self._store.routines.finish(run.run_id, status, reason=reason, turn_id=turn_id, tokens=tokens):
            self._tally.routine_run(run.routine.name, status)
            log.info(
                "routine run ended",
                instance=self.instance,
                routine=run.routine.name,
                run=run.run_id,
                status=status,
                reason=reason,
                turn=turn_id,
            )

    def tokens_left(self, run: QueuedRun, since: float) -> int | None:
        cap = run.routine.daily_tokens
        if cap is None:
            return None
        return cap - self._store.routines.tokens_since(self.instance, run.routine.name, since)


@dataclass(frozen=True, slots=True)
class RoutineRun:
    """One claimed due time, as the scheduler runs it (``nanoslack.features.SourcedTurn``)."""

    turns: RoutineTurns
    run: QueuedRun

    @property
    def origin(self) -> TurnOrigin:
        return TurnOrigin(KIND, self.run.routine.name, GUIDE)

    @property
    def room(self) -> str:
        routine = self.run.routine
        return "" if routine.to_owners else routine.channel

    @property
    def max_steps(self) -> int | None:
        return self.run.routine.max_steps

    def tokens_left(self) -> int | None:
        return self.turns.tokens_left(self.run, day_start())

    async def prepare(self) -> str | None:
        """The routine's prompt, with its gate's output; None when the gate ended the run."""
        gate_output = await self.turns.gate(self.run)
        if gate_output is None:
            return None
        text = self.run.routine.prompt
        return f"{text}\n[Gate output]\n{gate_output}" if gate_output else text

    def put_back(self) -> None:
        self.turns.queue.put_front(self.run)

    def started(self, turn_id: int) -> None:
        self.turns.started(self.run, turn_id)

    def ended(self, status: str, reason: str = "", tokens: int = 0, turn_id: int | None = None) -> None:
        self.turns.end(self.run, status, reason, turn_id=turn_id, tokens=tokens)
