"""What the edge makes of an envelope before the core sees it.

For the envelope pump (``pump.EnvelopePump``): ``screen`` (an ``event_callback``
parsed and self filtered: the message to record, or None with the reason logged; the
assistant pane's events go to the instance's pane, ``pane.AssistantPane.take``) and
``interactive`` (any other envelope with a payload: an owner's click on one of the
core's questions becomes an ``Answer`` for the core, ``blocks.answers_of``, a person's
click on a vote's button a ``FeatureClick``, ``blocks.vote_clicks_of``, both for the
core's ``Clicks``; the rest is ignored). A person's Stop on an agent session
(``agent_session_stopped``) goes to the core's ``Clicks`` too (``SessionStop``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from nanoslack.asks import Answer
from nanoslack.inbound import Drop, FeatureClick, FeedbackClick, Identity, Inbound, SessionStop
from nanoslack.logs import get_logger
from nanoslack.slack.blocks import answers_of, feedback_clicks_of, vote_clicks_of
from nanoslack.slack.pane import EVENTS as PANE_EVENTS
from nanoslack.slack.parse import SESSION_STOPPED, is_self, parse_event, parse_session_stop

log = get_logger(__name__)

# The assistant pane's events, for the instance's pane (``pane.AssistantPane.take``).
PaneEvents = Callable[[Mapping[str, Any]], None]


class Clicks(Protocol):
    """Where people's clicks go (the instance's core: ``nanoslack.clicks.ClickRouter``)."""

    async def answer(self, answer: Answer) -> None: ...

    async def ballot(self, click: FeatureClick) -> None: ...

    def stop(self, stop: SessionStop) -> None:
        """A person clicked Stop on one of the instance's agent sessions."""
        ...

    def feedback(self, click: FeedbackClick) -> None:
        """A person's 👍 / 👎 on one of the instance's replies."""
        ...


class Intake:
    def __init__(self, identity: Identity, *, clicks: Clicks, pane: PaneEvents | None = None) -> None:
        self.identity = identity
        self._clicks = clicks
        self._pane = pane

    async def interactive(self, body: Mapping[str, Any]) -> bool:
        """An envelope's payload that is no event: True when it is to be acked, False
        when our side could not take it (no ack: Slack's retry brings it back)."""
        kind = body.get("type")
        try:
            if kind == "block_actions":
                for answer in answers_of(body):
                    await self._clicks.answer(answer)
                for click in vote_clicks_of(body):
                    await self._clicks.ballot(click)
                for feedback in feedback_clicks_of(body):
                    self._clicks.feedback(feedback)
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
        if isinstance(event, Mapping) and event.get("type") in PANE_EVENTS:
            self._to_pane(event)
            return None
        if isinstance(event, Mapping) and event.get("type") == SESSION_STOPPED:
            self._stop(event)
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

    def _stop(self, event: Mapping[str, Any]) -> None:
        """A Stop click goes to the core at once (acked: nothing to record; a turn stopped
        is recorded by the core before anything else happens)."""
        stop = parse_session_stop(event)
        if isinstance(stop, Drop):
            log.info("event dropped", instance=self.identity.instance, reason=stop.reason)
            return
        self._clicks.stop(stop)

    def _to_pane(self, event: Mapping[str, Any]) -> None:
        """The assistant pane's events go to the instance's pane (acked: nothing to record)."""
        if self._pane is None:
            log.info("event dropped", instance=self.identity.instance, reason="assistant pane not served")
            return
        self._pane(event)
