"""How a turn ends, in the store (DESIGN §5, §8): one transaction per outcome.

A reply: the turn row, its messages marked ``done`` and one outbox row per post
(``purpose = 'reply'``) commit together, so a crash leaves either the whole reply or
a turn still ``running`` that the next start runs again. A room halted while the
agent answered records only the turn row (``halted``; the messages stay pending). A
failed turn consumes its messages (they would fail again on every poll). A turn
refused for the daily token cap tells the thread once a day and asks the owners.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from nanoslack import failpoints
from nanoslack.agents import Turn
from nanoslack.budgets import InstanceBudget
from nanoslack.control import ACK_FILTERED, Halts, is_acknowledgement
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.replies import MAX_POSTS, prepare_posts
from nanoslack.store import MessageRow, Store
from nanoslack.store.turns import utc_day

log = get_logger(__name__)

BUDGET_TEXT = "I've used up today's token budget, so I'll stay quiet until tomorrow."


class TurnRecorder:
    def __init__(
        self,
        *,
        instance: str,
        store: Store,
        halts: Halts,
        siblings: Callable[[], Mapping[str, str]],
        budget: InstanceBudget | None = None,
        tally: Tally | None = None,
    ) -> None:
        self.instance = instance
        self._tally = tally or Tally()
        self._store = store
        self._halts = halts
        self._siblings = siblings
        self._budget = budget

    def reply(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], posts: Sequence[str], tokens: int
    ) -> None:
        posts = self._without_acknowledgements(turn_id, posts)
        if len(posts) > MAX_POSTS:
            log.info("turn posts capped", instance=self.instance, turn=turn_id, asked=len(posts))
        texts = prepare_posts(posts, self._siblings())
        status = self._commit_reply(turn_id, turn, msgs, texts, tokens)
        if status is None:
            return
        self._tally.turn(status, tokens)
        if status == "halted":
            log.info("turn halted", instance=self.instance, turn=turn_id, channel=turn.channel)
            return
        failpoints.hit("turn.recorded")
        log.info(
            "turn finished" if texts else "turn silent",
            instance=self.instance,
            turn=turn_id,
            posts=len(texts),
            tokens=tokens,
        )

    def _commit_reply(
        self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], texts: Sequence[str], tokens: int
    ) -> str | None:
        """The turn's status as committed; None when the turn was no longer running."""
        with self._store.transaction():
            if self._halts.is_halted(turn.channel):
                # Halted while the agent was answering: nothing is posted, the
                # messages stay pending for the turn that runs after the resume.
                self._store.turns.finish(turn_id, "halted", tokens=tokens)
                return "halted"
            status = "done" if texts else "silent"
            if not self._store.turns.finish(turn_id, status, posts=len(texts), tokens=tokens):
                return None
            self._close(msgs)
            for i, text in enumerate(texts):
                self._store.outbox.enqueue(
                    instance=self.instance,
                    dedupe_key=f"turn:{self.instance}:{turn_id}:{i}",
                    purpose="reply",
                    turn_id=turn_id,
                    channel=turn.channel,
                    thread_ts=turn.thread_ts or None,
                    text=text,
                )
        return status

    def halted(self, turn_id: int) -> None:
        self._store.turns.finish(turn_id, "halted")
        self._tally.turn("halted")
        log.info("turn halted", instance=self.instance, turn=turn_id, reason="room halted")

    def failure(self, turn_id: int, msgs: Sequence[MessageRow], error: str) -> None:
        # The messages are consumed: a back end that fails on them would fail again
        # on every poll. The turn row keeps the error for `nanoslack turns`.
        with self._store.transaction():
            self._store.turns.finish(turn_id, "failed", error=error)
            self._close(msgs)
        self._tally.turn("failed")
        log.warning("turn failed", instance=self.instance, turn=turn_id, error=error)

    def budget_spent(self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow], error: str) -> None:
        thread = turn.thread_ts or turn.channel
        with self._store.transaction():
            self._store.turns.finish(turn_id, "budget", error=error)
            self._close(msgs)
            # Told once per thread and day, not once per message.
            self._store.outbox.enqueue(
                instance=self.instance,
                dedupe_key=f"budget:{self.instance}:{turn.channel}:{thread}:{utc_day()}",
                purpose="notice",
                channel=turn.channel,
                thread_ts=turn.thread_ts or None,
                text=BUDGET_TEXT,
            )
        self._tally.turn("budget")
        log.warning("turn refused: daily token budget spent", instance=self.instance, turn=turn_id)
        if self._budget is not None:
            self._budget.spent()  # the owners may allow one more day's worth

    def _without_acknowledgements(self, turn_id: int, posts: Sequence[str]) -> list[str]:
        """A post that only says "Acknowledged." or ``*(silent)*`` is silence."""
        kept = [post for post in posts if not is_acknowledgement(post)]
        if len(kept) < len(posts):
            log.info(ACK_FILTERED, instance=self.instance, turn=turn_id, dropped=len(posts) - len(kept))
        return kept

    def _close(self, msgs: Sequence[MessageRow]) -> None:
        self._store.messages.set_statuses([m.key for m in msgs], "done", from_status="pending")
