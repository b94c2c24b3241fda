"""A DM turn's agent session (docs/agent-surface.md, "Sessions and Stop"):
``agents.sessions.setStatus`` on the thread the turn answers.

Slack makes the thread's session on its first status (titled then: a later title is
ignored) and shows a Stop button while it is ``processing``; the turn moves it to
``suspended`` while an owner's Allow is awaited and to ``active`` when it ends. A Slack
that refuses sessions (``unknown_method`` on an older Slack, ``not_allowed``,
``missing_scope``, …) turns them off for the instance until it restarts, with the
surface's one log line (``status.Refusals``, part ``session``): the status line goes on
alone. Other errors are a debug line; the next change tries again.
"""

from __future__ import annotations

from typing import Literal

from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.logs import get_logger
from nanoslack.slack.status import Refusals, slack_error

log = get_logger(__name__)

SessionStatus = Literal["processing", "suspended", "active"]
# Slack takes 200 characters; the fleet's titles are the thread's first message, cut shorter.
TITLE_CHARS = 60


def title_of(text: str) -> str:
    """A session's title: the thread's first message on one line, cut to 60 characters."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class AgentSessions:
    """One instance's agent sessions in DM threads."""

    def __init__(self, client: AsyncWebClient, instance: str, refusals: Refusals) -> None:
        self.instance = instance
        self.refusals = refusals
        self._client = client

    @property
    def on(self) -> bool:
        return not self.refusals.is_off("session")

    async def set(self, channel: str, thread_ts: str, status: SessionStatus, *, title: str = "") -> bool:
        """Send one status; False when Slack refused sessions (now off for the instance)."""
        if not self.on:
            return False
        try:
            resp = await self._client.agents_sessions_setStatus(
                channel_id=channel, thread_ts=thread_ts, status=status, title=title or None
            )
        except Exception as exc:
            if self.refusals.refused("session", exc):
                return False
            log.debug(
                "session status not sent",
                instance=self.instance,
                status=status,
                error=slack_error(exc) or type(exc).__name__,
            )
            return True
        warning = resp.get("warning")
        if warning:
            log.debug("session status warning", instance=self.instance, warning=str(warning))
        return True
