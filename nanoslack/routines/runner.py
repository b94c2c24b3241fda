"""What the turn scheduler needs to run a routine's claimed due time as a turn.

The scheduler (``nanoslack.turns.scheduler``) takes a run from the queue when no
person's or handoff's turn of the instance waits and no other routine turn runs; this
runs its gate, and ends its row (with the turn's outcome, in the turn's transaction).
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.routines.clock import QueuedRun, RoutineEnded, RunQueue
from nanoslack.routines.gate import run_gate
from nanoslack.store import Store

log = get_logger(__name__)


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

    def take(self) -> QueuedRun | None:
        return self.queue.take()

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

    def ended(self, run: QueuedRun, turn_id: int) -> RoutineEnded:
        def end(status: str, reason: str, tokens: int) -> None:
            self.end(run, status, reason, turn_id=turn_id, tokens=tokens)

        return end

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
