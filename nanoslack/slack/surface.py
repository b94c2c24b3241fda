"""Slack's agent surface for one instance (docs/agent-surface.md): the status line and the
agent session a turn shows in a DM, and what Slack refused of it.

While a turn runs in a DM its waking message's thread shows ``is thinking…``, then
``is using <tool>…`` while a tool runs, sent again every ``refresh`` seconds (Slack clears
a status 2 minutes after it was sent), cleared when the turn ends, unless its reply is to
be streamed into that thread (the stream's first words clear it, without a gap). The
thread's agent session (``sessions``) is ``processing`` while the turn runs (Slack shows
its Stop button), ``suspended`` while a tool waits for an owner, ``active`` at the end.
Rooms keep the working reaction (``reaction.WorkingReaction``).

Never in the turn's way: the calls run in one background task per turn, in order. A
Slack that refuses a part of the surface (``missing_scope``, ``not_allowed_token_type``,
``feature_not_enabled``, ``unknown_method`` on an older Slack) turns that part off for
the instance: DMs go back to the working reaction, replies to plain posts; one log line
per instance, part and reason (``agent surface refused``, ``status.Refusals``). Other errors (a rate limit,
a dropped connection) are a debug line and the next send tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from nanoslack.agents.drafts import Draft
from nanoslack.logs import get_logger
from nanoslack.slack.reaction import WorkingReaction
from nanoslack.slack.sessions import AgentSessions, SessionStatus, title_of
from nanoslack.slack.status import StatusLine, keep
from nanoslack.slack.streams import LiveDraft, ReplyStreams
from nanoslack.turns.signals import Outcome, TurnSignal, Waking

log = get_logger(__name__)

THINKING = "is thinking…"


def using(tool: str) -> str:
    return f"is using {tool}…"


class _NoSignal:
    def using(self, tool: str) -> None:
        pass

    def thinking(self) -> None:
        pass

    def end(self, outcome: Outcome) -> None:
        pass

    def owner_waits(self, waiting: bool) -> None:
        pass

    def drafts(self) -> Draft | None:
        return None


class _ReactionSignal:
    """A room's turn (or a DM's, with the status refused): the working reaction."""

    def __init__(self, reaction: WorkingReaction, waking: Waking) -> None:
        self._reaction = reaction
        self._waking = waking
        reaction.working(waking.channel, waking.ts)

    def using(self, tool: str) -> None:
        pass

    def thinking(self) -> None:
        pass

    def end(self, outcome: Outcome) -> None:
        self._reaction.done(self._waking.channel, self._waking.ts)

    def owner_waits(self, waiting: bool) -> None:
        pass

    def drafts(self) -> Draft | None:
        return None


class SurfaceSignals:
    """The scheduler's ``TurnSignals``: the status line in DMs, the reaction in rooms."""

    def __init__(
        self,
        status: StatusLine,
        *,
        reaction: WorkingReaction | None,
        replies: ReplyStreams,
        refresh: float,
        sessions: AgentSessions | None = None,
    ) -> None:
        self.status = status
        # The DM thread's agent session (off when Slack refused sessions: the status line alone).
        self.sessions = sessions
        self.refusals = status.refusals
        self.reaction = reaction
        self.refresh = refresh
        # Where a DM turn's reply streams while it is written (NANOSLACK_STREAM): its
        # first words clear the status.
        self.replies = replies

    @property
    def streams(self) -> bool:
        return self.replies.enabled

    def begin(self, waking: Waking) -> TurnSignal:
        if waking.dm and not self.refusals.is_off("status"):
            return _StatusSignal(self, waking)
        return self.fallback(waking)

    def settle(self, channel: str, thread_ts: str) -> None:
        sessions = self.sessions
        if sessions is not None and sessions.on:
            keep(asyncio.get_running_loop().create_task(self._settle(sessions, channel, thread_ts)))

    @staticmethod
    async def _settle(sessions: AgentSessions, channel: str, thread_ts: str) -> None:
        await sessions.set(channel, thread_ts, "active")

    def fallback(self, waking: Waking) -> TurnSignal:
        return _ReactionSignal(self.reaction, waking) if self.reaction is not None else _NoSignal()


class _StatusSignal:
    def __init__(self, signals: SurfaceSignals, waking: Waking) -> None:
        self._signals = signals
        self._waking = waking
        self._status = THINKING
        self._waiting = False  # a tool waits for an owner's Allow: the session is suspended
        self._session: SessionStatus | None = None  # the session status last sent
        self._outcome: Outcome | None = None
        self._changed = asyncio.Event()
        self._fallback: TurnSignal | None = None
        self._live: LiveDraft | None = None
        self._drafting = True  # until the draft is found not to stream
        self._task = asyncio.get_running_loop().create_task(self._run())
        keep(self._task)

    def drafts(self) -> Draft | None:
        signals = self._signals
        if not signals.streams or not self._waking.turn:
            return None
        return self._draft

    def _draft(self, text: str) -> None:
        """The turn's first post so far: streamed into the thread (started on its first words)."""
        if self._live is None and self._drafting and self._outcome is None:
            waking = self._waking
            self._live = self._signals.replies.live(waking.channel, waking.turn)
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
            if outcome == "stopped":
                self._live.stop()  # what it showed stays, as Slack stopped it
            else:
                self._live.end(outcome == "posted")

    def owner_waits(self, waiting: bool) -> None:
        self._waiting = waiting
        self._changed.set()

    def _show(self, status: str) -> None:
        self._status = status
        self._changed.set()

    async def _run(self) -> None:
        signals, waking = self._signals, self._waking
        sent: str | None = None
        sent_at = 0.0
        while self._outcome is None:
            # Cleared before looking: a change made while a send is under way is seen next.
            self._changed.clear()
            session: SessionStatus = "suspended" if self._waiting else "processing"
            if session != self._session and await self._set_session(session):
                continue
            status = self._status
            if sent is None or status != sent or time.monotonic() - sent_at >= signals.refresh:
                if not await signals.status.set(waking.channel, waking.thread_ts, status):
                    await self._fall_back()
                    return
                sent, sent_at = status, time.monotonic()
                continue
            wait = max(0.0, signals.refresh - (time.monotonic() - sent_at))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=wait)
        await self._set_session("active")
        if self._outcome != "posted" or not signals.streams or signals.refusals.is_off("stream"):
            await signals.status.set(waking.channel, waking.thread_ts, "")

    async def _set_session(self, status: SessionStatus) -> bool:
        """Move the thread's session (made, and titled, by the turn's first status); False
        when there is none to move (sessions refused: the status line alone)."""
        sessions, waking = self._signals.sessions, self._waking
        if sessions is None or not sessions.on or (self._session is None and status == "active"):
            return False
        title = title_of(waking.title) if self._session is None else ""
        self._session = status
        return await sessions.set(waking.channel, waking.thread_ts, status, title=title)

    async def _fall_back(self) -> None:
        """The status line was refused: this turn shows the reaction instead, to its end."""
        fallback = self._signals.fallback(self._waking)
        while self._outcome is None:
            self._changed.clear()
            await self._changed.wait()
        await self._set_session("active")
        fallback.end(self._outcome)
