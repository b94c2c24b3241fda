"""The first stage after the socket: parse, self filter, durable inbox, then ack.

Installed as a bolt global middleware that never calls ``next()``: every envelope
is acked here (bolt would leave unmatched events unacked and Slack would retry
them), and the ack goes out only after the event is in the inbox, because bolt's
Socket Mode adapter sends it when ``async_dispatch`` returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from nanoslack.budgets import ALLOW_ACTION_ID, STOP_ACTION_ID
from nanoslack.control import RESUME_ACTION_ID
from nanoslack.gate import APPROVE_ACTION_ID, DENY_ACTION_ID
from nanoslack.inbound import Drop, Identity, Inbound
from nanoslack.logs import get_logger
from nanoslack.slack.parse import is_self, parse_event
from nanoslack.slack.socket import RETRY_STATUS

log = get_logger(__name__)

Accept = Callable[[Inbound], Awaitable[bool]]
Submit = Callable[[Inbound], None]
OnClick = Callable[[str, bool, str], Awaitable[None]]  # (approval id, allow, clicking user)
OnResume = Callable[[str, str], Awaitable[None]]  # (room, clicking user)


class Intake(AsyncMiddleware):
    def __init__(
        self,
        identity: Identity,
        *,
        accept: Accept,
        submit: Submit,
        on_click: OnClick | None = None,
        on_activity: Callable[[], None] | None = None,
        on_resume: OnResume | None = None,
        on_budget: OnClick | None = None,
    ) -> None:
        self.identity = identity
        self._accept = accept
        self._submit = submit
        self._on_click = on_click
        self._on_activity = on_activity
        self._on_resume = on_resume
        self._on_budget = on_budget  # (button value, allow, clicking user)

    @property
    def name(self) -> str:
        return "nanoslack.Intake"

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        if self._on_activity is not None:
            self._on_activity()
        body = req.body
        kind = body.get("type") if isinstance(body, dict) else None
        try:
            if kind == "event_callback":
                if not await self._record(body):
                    # The inbox could not take it: no ack, so Slack retries later.
                    return BoltResponse(status=RETRY_STATUS, body="")
            elif kind == "block_actions":
                await self._click(body)
            else:
                log.info(
                    "envelope ignored", instance=self.identity.instance, type=kind, reason="unsupported type"
                )
        except Exception as exc:
            log.error(
                "envelope failed", instance=self.identity.instance, error=f"{type(exc).__name__}: {exc}"
            )
            return BoltResponse(status=RETRY_STATUS, body="")
        return await req.context.ack()

    async def _record(self, body: dict[str, Any]) -> bool:
        parsed = self.screen(body)
        if parsed is None:
            return True
        try:
            fresh = await self._accept(parsed)
        except Exception as exc:
            log.error(
                "inbox write failed", instance=self.identity.instance, ts=parsed.ts, error=type(exc).__name__
            )
            return False
        self.accepted(parsed, fresh)
        return True

    def touch(self) -> None:
        if self._on_activity is not None:
            self._on_activity()

    def screen(self, body: Mapping[str, Any]) -> Inbound | None:
        """Parse and self filter an ``event_callback``: the message to record, or None
        when the envelope is to be acked without one (logged with its reason)."""
        ident = self.identity
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

    def accepted(self, msg: Inbound, fresh: bool) -> None:
        """``msg`` is durable: a new one goes to the worker, a repeat is ignored."""
        if fresh:
            self._submit(msg)
        else:
            log.debug(
                "duplicate delivery ignored", instance=self.identity.instance, channel=msg.channel, ts=msg.ts
            )

    async def _click(self, body: dict[str, Any]) -> None:
        user = (body.get("user") or {}).get("id")
        for action in body.get("actions") or []:
            action_id = action.get("action_id") if isinstance(action, dict) else None
            if action_id == RESUME_ACTION_ID and self._on_resume is not None:
                value = action.get("value")
                if isinstance(value, str) and isinstance(user, str):
                    await self._on_resume(value, user)
                continue
            if action_id in (ALLOW_ACTION_ID, STOP_ACTION_ID) and self._on_budget is not None:
                value = action.get("value")
                if isinstance(value, str) and isinstance(user, str):
                    await self._on_budget(value, action_id == ALLOW_ACTION_ID, user)
                continue
            if action_id not in (APPROVE_ACTION_ID, DENY_ACTION_ID) or self._on_click is None:
                continue
            value = action.get("value")
            if not isinstance(value, str) or not isinstance(user, str):
                log.info("approval click ignored", instance=self.identity.instance, reason="malformed action")
                continue
            await self._on_click(value, action_id == APPROVE_ACTION_ID, user)
