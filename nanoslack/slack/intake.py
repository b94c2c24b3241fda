"""What the edge makes of an envelope before the core sees it.

For the envelope pump (``pump.EnvelopePump``): ``screen`` (an ``event_callback``
parsed and self filtered: the message to record, or None with the reason logged),
``accepted`` (the recorded messages that go to the core; a repeat is ignored) and
``interactive`` (any other envelope with a payload: an owner's click on one of the
core's questions becomes an ``Answer`` for the core, ``blocks.answers_of``, a person's
click on a vote's button a ``FeatureClick``, ``blocks.vote_clicks_of``; the rest is ignored).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from nanoslack.asks import Answer
from nanoslack.inbound import Drop, FeatureClick, Identity, Inbound
from nanoslack.logs import get_logger
from nanoslack.slack import pane
from nanoslack.slack.blocks import answers_of, vote_clicks_of
from nanoslack.slack.parse import is_self, parse_event

log = get_logger(__name__)

OnAnswer = Callable[[Answer], Awaitable[None]]
OnVote = Callable[[FeatureClick], Awaitable[None]]


class Intake:
    def __init__(self, identity: Identity, *, on_answer: OnAnswer, on_vote: OnVote | None = None) -> None:
        self.identity = identity
        self._on_answer = on_answer
        self._on_vote = on_vote

    async def interactive(self, body: Mapping[str, Any]) -> bool:
        """An envelope's payload that is no event: True when it is to be acked, False
        when our side could not take it (no ack: Slack's retry brings it back)."""
        kind = body.get("type")
        try:
            if kind == "block_actions":
                for answer in answers_of(body):
                    await self._on_answer(answer)
                if self._on_vote is not None:
                    for click in vote_clicks_of(body):
                        await self._on_vote(click)
            else:
                log.info(
                    "envelope ignored", instance=self.identity.instance, type=kind, reason="unsupported type"
                )
        except Exception as exc:
            log.error(
                "envelope failed", instance=self.identity.instance, error=f"{type(exc).__name__}: {exc}"
            )
            return False
        return True

    def screen(self, body: Mapping[str, Any]) -> Inbound | None:
        """Parse and self filter an ``event_callback``: the message to record, or None
        when the envelope is to be acked without one (logged with its reason)."""
        ident = self.identity
        event = body.get("event")
        if isinstance(event, Mapping) and event.get("type") in pane.EVENTS:
            self._to_pane(event)
            return None
        parsed = parse_event(body, instance=ident.instance, team_id=ident.team_id)
        if isinstance(parsed, Drop):
            log.info(
                "event dropped", instance=ident.instance, reason=parsed.reason, event_id=body.get("event_id")
            )
            return None
        if is_self(parsed, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id):
            log.debug("event dropped", instance=ident.instance, reason="own message", ts=parsed.ts)
            return None
        return parsed

    def _to_pane(self, event: Mapping[str, Any]) -> None:
        """The assistant pane's events go to the instance's pane (acked: nothing to record)."""
        hook = pane.hook_for(self.identity)
        if hook is None:
            log.info("event dropped", instance=self.identity.instance, reason="assistant pane not served")
            return
        hook(event)

    def accepted(
        self, msgs: Sequence[Inbound], fresh: Sequence[bool], *, retried: bool = False
    ) -> list[tuple[Inbound, bool]]:
        """``msgs`` are durable: the new ones go to the core; a repeat is ignored. After a
        write that had to be tried again (``retried``) a repeat may be the first attempt's
        own, committed although the store's answer was lost: the core gets it to check
        (the pair's flag)."""
        out: list[tuple[Inbound, bool]] = []
        for msg, is_new in zip(msgs, fresh, strict=True):
            if is_new or retried:
                out.append((msg, not is_new))
            else:
                log.debug(
                    "duplicate delivery ignored",
                    instance=self.identity.instance,
                    channel=msg.channel,
                    ts=msg.ts,
                )
        return out
