"""Clicks on the core's buttons, routed to what asked (docs/architecture.md).

An owner's click answers one of the instance's questions (``nanoslack.asks``): an
approval goes to the gate, a halt's Resume to room control, a budget's Allow to the
budgets, a guarded tool's Allow to the tool approver, a routine's Run now / Pause / Resume
on the owner's Home to the routines' store rows (as ``nanoslack routines run|pause|resume``
does, docs/routines.md); anyone's click on a vote's button goes to the room features that
take clicks (``Feature.click``, the team's votes); anyone's Stop on one of the instance's
agent sessions stops the turn answering there, anyone's 👍 / 👎 on a reply is recorded
(docs/agent-surface.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from nanoslack.asks import APPROVAL, BUDGET, HALT, ROUTINE, TOOL, Answer, NotAnOwner, OwnerAsks, by_id
from nanoslack.budgets import Budgets
from nanoslack.inbound import FeatureClick, FeedbackClick, SessionStop
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.pipeline import Pipeline
from nanoslack.store import Store
from nanoslack.tools.approvals import OwnerToolApprover

log = get_logger(__name__)

# Takes a person's click on a vote's button: True when it counted.
OnVote = Callable[[FeatureClick], bool]


class Stopper(Protocol):
    """The instance's turns (``TurnScheduler.stop_thread``)."""

    def stop_thread(self, channel: str, thread_ts: str, *, by_user: str) -> int | None: ...


class ClickRouter:
    def __init__(
        self,
        instance: str,
        *,
        asks: OwnerAsks,
        pipeline: Pipeline,
        budgets: Budgets,
        tool_approvals: OwnerToolApprover,
        votes: Sequence[OnVote],
        wake: Callable[[], None],
        turns: Stopper | None = None,
        store: Store | None = None,
        tally: Tally | None = None,
    ) -> None:
        self.instance = instance
        self._store = store
        self._asks = asks
        self._pipeline = pipeline
        self._budgets = budgets
        self._tool_approvals = tool_approvals
        self._votes = tuple(votes)
        # Something an answer released may run now: the instance's turns look again.
        self._wake = wake
        self._turns = turns
        self._tally = tally

    async def answer(self, answer: Answer) -> None:
        """An owner's click on one of this instance's questions."""
        kind = answer.kind
        if kind is None:
            return
        try:
            self._asks.authorize(answer.by_user)
        except NotAnOwner:
            log.info(
                f"{kind.label} click refused",
                instance=self.instance,
                user=answer.by_user,
                reason="not an owner",
            )
            return
        if kind is APPROVAL:
            self._decide_approval(answer)
        elif kind is HALT:
            if self._pipeline.resume(answer.ref, by_user=answer.by_user):
                self._wake()
        elif kind is BUDGET and self._budgets.answer(
            answer.ref, allow=answer.choice == "budget_allow", by_user=answer.by_user
        ):
            self._wake()
        elif kind is TOOL:
            self._tool_approvals.answer(answer)
        elif kind is ROUTINE:
            self._routine(answer)

    async def ballot(self, click: FeatureClick) -> None:
        """A person's click on one of a vote's buttons (any human in the room may answer;
        a second click replaces the first)."""
        for take in self._votes:
            if take(click):
                log.info("vote click", instance=self.instance, vote=click.item, user=click.by_user)

    def stop(self, stop: SessionStop) -> None:
        """Anyone who sees the session's Stop button may click it (Slack shows it to the
        people in the conversation): the turn answering in that thread is stopped. With no
        turn there it does nothing (logged)."""
        turn = None
        if self._turns is not None:
            turn = self._turns.stop_thread(stop.channel, stop.thread_ts, by_user=stop.by_user)
        if turn is None:
            log.info(
                "stop ignored",
                instance=self.instance,
                channel=stop.channel,
                thread=stop.thread_ts,
                user=stop.by_user,
                reason="no turn running there",
            )
            return
        log.info("stop clicked", instance=self.instance, turn=turn, channel=stop.channel, user=stop.by_user)

    def _routine(self, answer: Answer) -> None:
        """Run now, pause or resume one of the instance's routines (the store's rows, as the
        CLI sets them: the clock holding the instance takes them)."""
        store, name = self._store, answer.ref
        state = store.routines.states(self.instance).get(name) if store is not None else None
        if store is None or state is None or not state.active:
            log.info("routine click refused", instance=self.instance, routine=name, reason="no such routine")
            return
        if answer.choice == "routine_run":
            store.routines.request_run(self.instance, name)
        else:
            paused = answer.choice == "routine_pause"
            store.routines.set_paused(
                self.instance, name, paused, by=by_id(answer.by_user) if paused else None
            )
        log.info(
            "routine click", instance=self.instance, routine=name, choice=answer.choice, by=answer.by_user
        )

    def feedback(self, click: FeedbackClick) -> None:
        """Anyone's 👍 / 👎 on one of the instance's replies: recorded (their last click
        counts) and counted; a value naming no turn of this instance is refused."""
        if self._store is None:
            return
        if not self._store.feedback.record(self.instance, click.turn_id, click.by_user, click.value):
            log.info(
                "feedback refused",
                instance=self.instance,
                turn=click.turn_id,
                user=click.by_user,
                reason="not a turn of this instance",
            )
            return
        if self._tally is not None:
            self._tally.feedback[click.value] += 1
        log.info(
            "feedback recorded",
            instance=self.instance,
            turn=click.turn_id,
            user=click.by_user,
            value=click.value,
        )

    def _decide_approval(self, answer: Answer) -> None:
        try:
            decision = self._pipeline.decide_approval(
                int(answer.ref), allow=answer.choice == "approve", by_user=answer.by_user
            )
        except (PermissionError, ValueError, LookupError) as exc:
            log.info("approval click refused", instance=self.instance, user=answer.by_user, reason=str(exc))
            return
        if decision.released:
            self._wake()
        log.info(
            "approval decided",
            instance=self.instance,
            approval=answer.ref,
            allow=answer.choice == "approve",
            by=answer.by_user,
            released=len(decision.released),
        )
