"""Slack's agent surface for one instance (docs/agent-surface.md): the status line a turn
shows in a DM, and what Slack refused of it.

While a turn runs in a DM its waking message's thread shows ``is thinking…``, then
``is using <tool>…`` while a tool runs, sent again every ``refresh`` seconds (Slack clears
a status 2 minutes after it was sent), cleared when the turn ends, unless its reply is to
be streamed into that thread (the stream's first words clear it, without a gap). Rooms
keep the working reaction (``presence.SlackPresence``).

Never in the turn's way: the calls run in one background task per turn, in order. A
Slack that refuses a part of the surface (``missing_scope``, ``not_allowed_token_type``,
``feature_not_enabled``, ``unknown_method`` on an older Slack) turns that part off for
the instance: DMs go back to the working reaction, replies to plain posts; one log line
per instance, part and reason (``agent surface refused``). Other errors (a rate limit,
a dropped connection) are a debug line and the next send tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.agents.drafts import Draft
from nanoslack.logs import get_logger
from nanoslack.slack.presence import SlackPresence
from nanoslack.turns.signals import Outcome, TurnSignal, Waking

if TYPE_CHECKING:
    from nanoslack.slack.streams import LiveDraft, ReplyStreams

log = get_logger(__name__)

THINKING = "is thinking…"
REFUSALS = frozenset({"missing_scope", "not_allowed_token_type", "feature_not_enabled", "unknown_method"})
Part = Literal["status", "stream", "pane"]
# What the instance does instead, named in the log line.
FALLBACKS: dict[Part, str] = {
    "status": "working reaction",
    "stream": "plain post",
    "pane": "no title or suggested prompts",
}


def using(tool: str) -> str:
    return f"is using {tool}…"


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
        if error not in REFUSALS:
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


class _NoSignal:
    def using(self, tool: str) -> None:
        pass

    def thinking(self) -> None:
        pass

    def end(self, outcome: Outcome) -> None:
        pass

    def drafts(self) -> Draft | None:
        return None


class _ReactionSignal:
    """A room's turn (or a DM's, with the status refused): the working reaction."""

    def __init__(self, reaction: SlackPresence, waking: Waking) -> None:
        self._reaction = reaction
        self._waking = waking
        reaction.working(waking.channel, waking.ts)

    def using(self, tool: str) -> None:
        pass

    def thinking(self) -> None:
        pass

    def end(self, outcome: Outcome) -> None:
        self._reaction.done(self._waking.channel, self._waking.ts)

    def drafts(self) -> Draft | None:
        return None


class SurfacePresence:
    """The scheduler's ``Presence``: the status line in DMs, the reaction in rooms."""

    def __init__(
        self,
        client: AsyncWebClient,
        instance: str,
        *,
        reaction: SlackPresence | None,
        refusals: Refusals,
        refresh: float,
        streams: bool,
    ) -> None:
        self.client = client
        self.instance = instance
        self.reaction = reaction
        self.refusals = refusals
        self.refresh = refresh
        # Replies in DMs are streamed (NANOSLACK_STREAM): their first words clear the status.
        self.streams = streams
        # Where a DM turn's reply streams while it is written (set by the instance's edge).
        self.replies: ReplyStreams | None = None

    def begin(self, waking: Waking) -> TurnSignal:
        if waking.dm and not self.refusals.is_off("status"):
            return _StatusSignal(self, waking)
        return self.fallback(waking)

    def fallback(self, waking: Waking) -> TurnSignal:
        return _ReactionSignal(self.reaction, waking) if self.reaction is not None else _NoSignal()

    async def set_status(self, channel: str, thread_ts: str, status: str) -> bool:
        """Send one status; False when Slack refused the status line (now off)."""
        try:
            await self.client.assistant_threads_setStatus(
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
        task = asyncio.get_running_loop().create_task(self.set_status(channel, thread_ts, ""))
        _keep(task)


_background: set[asyncio.Task[bool] | asyncio.Task[None]] = set()


def _keep(task: asyncio.Task[bool] | asyncio.Task[None]) -> None:
    _background.add(task)
    task.add_done_callback(_background.discard)


class _StatusSignal:
    def __init__(self, presence: SurfacePresence, waking: Waking) -> None:
        self._presence = presence
        self._waking = waking
        self._status = THINKING
        self._outcome: Outcome | None = None
        self._changed = asyncio.Event()
        self._fallback: TurnSignal | None = None
        self._live: LiveDraft | None = None
        self._drafting = True  # until the draft is found not to stream
        self._task = asyncio.get_running_loop().create_task(self._run())
        _keep(self._task)

    def drafts(self) -> Draft | None:
        presence = self._presence
        if not presence.streams or presence.replies is None or not self._waking.turn:
            return None
        return self._draft

    def _draft(self, text: str) -> None:
        """The turn's first post so far: streamed into the thread (started on its first words)."""
        if self._live is None and self._drafting and self._outcome is None:
            replies, waking = self._presence.replies, self._waking
            self._live = replies.live(waking.channel, waking.turn) if replies is not None else None
            self._drafting = self._live is not None
        if self._live is not None:
            self._live.grow(text)

    def using(self, tool: str) -> None:
        self._show(using(tool))

    def thinking(self) -> None:
        self._show(THINKING)
        if self._live is not None:
            self._live.tool_ended()  # back to thinking: the tool's call ended

    def end(self, outcome: Outcome) -> None:
        self._outcome = outcome
        self._changed.set()
        if self._live is not None:
            self._live.end(outcome == "posted")

    def _show(self, status: str) -> None:
        self._status = status
        self._changed.set()

    async def _run(self) -> None:
        presence, waking = self._presence, self._waking
        sent: str | None = None
        sent_at = 0.0
        while self._outcome is None:
            # Cleared before looking: a change made while a send is under way is seen next.
            self._changed.clear()
            status = self._status
            if sent is None or status != sent or time.monotonic() - sent_at >= presence.refresh:
                if not await presence.set_status(waking.channel, waking.thread_ts, status):
                    await self._fall_back()
                    return
                sent, sent_at = status, time.monotonic()
                continue
            wait = max(0.0, presence.refresh - (time.monotonic() - sent_at))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=wait)
        if self._outcome != "posted" or not presence.streams or presence.refusals.is_off("stream"):
            await presence.set_status(waking.channel, waking.thread_ts, "")

    async def _fall_back(self) -> None:
        """The status line was refused: this turn shows the reaction instead, to its end."""
        fallback = self._presence.fallback(self._waking)
        while self._outcome is None:
            self._changed.clear()
            await self._changed.wait()
        fallback.end(self._outcome)
