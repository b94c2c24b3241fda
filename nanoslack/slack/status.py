"""The status line of a DM turn (``assistant.threads.setStatus``) and what Slack refused
of its agent surface (docs/agent-surface.md), for one instance.

Below both users: the turn's signals (``surface``) show the status, the reply streams
(``streams``) clear it when a reply falls back to a plain post, and both turn a part of
the surface off when Slack refuses it (``Refusals``).
"""

from __future__ import annotations

import asyncio
from typing import Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.logs import get_logger

log = get_logger(__name__)

REFUSALS = frozenset({"missing_scope", "not_allowed_token_type", "feature_not_enabled", "unknown_method"})
# An app Slack does not take as an agent is also told ``not_allowed`` by the session methods.
SESSION_REFUSALS = REFUSALS | {"not_allowed"}
Part = Literal["status", "stream", "pane", "session"]
# What the instance does instead, named in the log line.
FALLBACKS: dict[Part, str] = {
    "status": "working reaction",
    "stream": "plain post",
    "pane": "no title or suggested prompts",
    "session": "status line",
}


class Refusals:
    """The parts of the surface Slack refused for this instance (for the process's life)."""

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self._off: dict[Part, str] = {}
        self._logged: set[tuple[Part, str]] = set()

    def is_off(self, part: Part) -> bool:
        return part in self._off

    def refused(self, part: Part, exc: BaseException) -> bool:
        """True when ``exc`` is Slack refusing ``part``: it is off from now on (logged once)."""
        error = slack_error(exc)
        if error not in (SESSION_REFUSALS if part == "session" else REFUSALS):
            return False
        self._off[part] = error
        if (part, error) not in self._logged:
            self._logged.add((part, error))
            log.warning(
                "agent surface refused",
                instance=self._instance,
                part=part,
                reason=error,
                fallback=FALLBACKS[part],
            )
        return True


def slack_error(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or "")
    return ""


class StatusLine:
    """One instance's status line in DM threads."""

    def __init__(self, client: AsyncWebClient, instance: str, refusals: Refusals) -> None:
        self.instance = instance
        self.refusals = refusals
        self._client = client

    async def set(self, channel: str, thread_ts: str, status: str) -> bool:
        """Send one status; False when Slack refused the status line (now off)."""
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=channel, thread_ts=thread_ts, status=status
            )
        except Exception as exc:
            if self.refusals.refused("status", exc):
                return False
            log.debug("status not sent", instance=self.instance, error=slack_error(exc) or type(exc).__name__)
        return True

    def clear(self, channel: str, thread_ts: str) -> None:
        """Clear a thread's status in the background (a reply that was not streamed after all)."""
        if self.refusals.is_off("status"):
            return
        keep(asyncio.get_running_loop().create_task(self.set(channel, thread_ts, "")))


_background: set[asyncio.Task[bool] | asyncio.Task[None]] = set()


def keep(task: asyncio.Task[bool] | asyncio.Task[None]) -> None:
    """Hold a background task until it is done (the loop keeps only weak references)."""
    _background.add(task)
    task.add_done_callback(_background.discard)
