"""A turn's reply in a DM, streamed (docs/agent-surface.md): ``chat.startStream`` in the
waking message's thread with the recipient's ids, ``chat.appendStream`` for the rest,
``chat.stopStream`` with the reply's metadata. The turn's tool calls open its first
reply as ``task_update`` cards (timeline mode).

Exactly once, as for a plain post (``poster``): the outbox row is marked ``sending``
before Slack is called, and the stream's ts is written to it (``posted_ts``) as soon as
Slack answers the start. A run that dies mid-stream leaves the row in doubt with that ts:
the next run finishes that message (``chat.stopStream`` if it still streams, then
``chat.update`` with the whole text and the metadata) instead of posting another. A
death between Slack's answer to the start and that write leaves a message with no
metadata yet: it is found as the instance's own message in the thread, newer than the
attempt, without a key (only streams lack one while they grow), and finished the same way.

While the model is still writing, the turn's first post streams already (``LiveDraft``,
fed by ``agents.drafts``): the stream starts with its first words and grows, an append at
most every ``APPEND_INTERVAL_S``; its ts is in the store (``reply_drafts``) from the
start's answer on. The poster sending that post then finishes the same message: the rest
appended and ``chat.stopStream`` with the metadata when what Slack shows is the start of
the post, else ``chat.update`` with the whole text. A turn that ends without a post
deletes its draft; a turn a crash left is run again and its reply finishes that message.

Rooms are never streamed: siblings must read a bot's message whole, once. A row is
streamed only when it is a turn's reply in an IM, to a person's Slack message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack import failpoints
from nanoslack.inbound import InboxKey
from nanoslack.logs import get_logger
from nanoslack.replies import STREAM_MAX_CHARS
from nanoslack.slack.feedback import reply_feedback, whole_reply
from nanoslack.slack.status import Refusals, slack_error
from nanoslack.store import OutboxRow, Store
from nanoslack.turns.signals import UNSHOWN_TOOLS

log = get_logger(__name__)

# What one append carries: the text grows in steps a reader can follow.
PIECE_CHARS = 1_000
SEARCH_PAGE = 15
NOT_STREAMING = frozenset({"message_not_in_streaming_state", "message_not_found"})
# A growing draft is appended to at most this often (Slack rate-limits the stream methods).
APPEND_INTERVAL_S = 0.3
# How far our clock may be ahead of Slack's, looking for a draft whose ts was not recorded.
CLOCK_SKEW_S = 600.0


@dataclass(frozen=True, slots=True)
class StreamTarget:
    channel: str
    thread_ts: str
    recipient_user_id: str
    recipient_team_id: str


class ReplyStreams:
    def __init__(
        self,
        instance: str,
        client: AsyncWebClient,
        store: Store,
        *,
        team_id: str | None,
        bot_user_id: str,
        refusals: Refusals,
        enabled: bool = True,
        on_plain_fallback: Callable[[str, str], None] | None = None,
    ) -> None:
        self._instance = instance
        self._client = client
        self._store = store
        self._team_id = team_id
        self._bot_user_id = bot_user_id
        self.refusals = refusals
        self._enabled = enabled
        # A reply that fell back to a plain post: the status of its thread is cleared.
        self._on_plain_fallback = on_plain_fallback
        # Drafts streaming while their turns run, until the poster takes them over.
        self._live: dict[int, LiveDraft] = {}

    @property
    def enabled(self) -> bool:
        """Replies in DMs stream (NANOSLACK_STREAM); off, only a stream a crash left open
        is still finished."""
        return self._enabled

    def target(self, row: OutboxRow) -> StreamTarget | None:
        """Where ``row`` streams to; None when it is posted as a plain message."""
        if row.purpose != "reply" or row.kind != "post" or row.thread_ts or not row.channel:
            return None
        if not row.turn_id:
            return None
        return self.turn_target(row.channel, row.turn_id)

    def turn_target(self, channel: str, turn_id: int) -> StreamTarget | None:
        """Where a turn's reply in ``channel`` streams to: the thread of the person's DM
        message that woke it; None when it is posted plainly."""
        if not self._enabled or self.refusals.is_off("stream") or not self._team_id:
            return None
        turn = self._store.turns.get(turn_id)
        if turn is None or not turn.through_ts:
            return None
        waking = self._store.inbox.message(InboxKey(self._instance, channel, turn.through_ts))
        if waking is None or not waking.is_dm or waking.is_bot or not waking.user:
            return None
        return StreamTarget(channel, waking.thread_ts or waking.ts, waking.user, self._team_id)

    def live(self, channel: str, turn_id: int) -> LiveDraft | None:
        """The turn's first post as it is written, streamed; None where replies do not stream."""
        target = self.turn_target(channel, turn_id)
        if target is None:
            return None
        draft = LiveDraft(self._client, self._store, self._instance, turn_id, target, self)
        self._live[turn_id] = draft
        return draft

    async def send(
        self,
        row: OutboxRow,
        target: StreamTarget,
        metadata: dict[str, Any],
        started: Callable[[str], Awaitable[None]],
    ) -> str | None:
        """Stream the row's text; its ts, or None when Slack refused streams (then the
        row is still ``sending`` with no ts: the caller posts it plainly). The turn's
        first post finishes the draft its turn streamed, when it did."""
        drafted = await self._drafted(row, target)
        if drafted is not None:
            ts, shown, steps_shown = drafted
            await started(ts)
            await self._complete(row, target, ts, shown, metadata, steps_shown)
            assert row.turn_id is not None
            self._store.reply_drafts.drop(self._instance, row.turn_id)
            return ts
        pieces = _pieces(row.text)
        tasks = self._tool_steps(row)
        try:
            resp = await self._client.chat_startStream(
                channel=target.channel,
                thread_ts=target.thread_ts,
                markdown_text=pieces[0],
                recipient_user_id=target.recipient_user_id,
                recipient_team_id=target.recipient_team_id,
                chunks=tasks or None,
                task_display_mode="timeline" if tasks else None,
            )
        except Exception as exc:
            if not self._refused(row, exc):
                raise
            if self._on_plain_fallback is not None:
                self._on_plain_fallback(target.channel, target.thread_ts)
            return None
        ts = str(resp.get("ts"))
        failpoints.hit("stream.started")  # Slack streams it; its ts is not in the store yet
        await started(ts)
        for piece in pieces[1:]:
            await self._client.chat_appendStream(channel=target.channel, ts=ts, markdown_text=piece)
            failpoints.hit("stream.appended")
        await self._client.chat_stopStream(
            channel=target.channel, ts=ts, metadata=metadata, blocks=self._feedback(row, target)
        )
        return ts

    async def _drafted(self, row: OutboxRow, target: StreamTarget) -> tuple[str, str | None, set[str]] | None:
        """The ts of the draft the row's turn streamed, the text Slack shows of it when
        this run streamed it (None: unknown, a previous run's), and the tool cards it shows."""
        if row.turn_id is None or not row.dedupe_key.endswith(":0"):
            return None
        live = self._live.pop(row.turn_id, None)
        if live is not None:
            await live.settled()
            if live.ts:
                return live.ts, live.shown, live.steps_shown
        draft = self._store.reply_drafts.of_turn(self._instance, row.turn_id)
        if draft is None:
            return None
        ts = draft.ts or await self._find_in_thread(
            draft.channel, draft.thread_ts, f"{draft.started_at - CLOCK_SKEW_S:.6f}"
        )
        if not ts:
            self._store.reply_drafts.drop(self._instance, row.turn_id)
            return None
        return ts, None, set()

    async def _complete(
        self,
        row: OutboxRow,
        target: StreamTarget,
        ts: str,
        shown: str | None,
        metadata: dict[str, Any],
        steps_shown: set[str],
    ) -> None:
        """The draft becomes the row's whole text: the rest appended when Slack shows the
        start of it (and the tool cards it does not show yet), else an update."""
        if shown is None or not row.text.startswith(shown):
            await self.finish(row, ts, metadata)
            return
        for piece in _pieces(row.text[len(shown) :]) if len(row.text) > len(shown) else []:
            await self._client.chat_appendStream(channel=target.channel, ts=ts, markdown_text=piece)
            failpoints.hit("stream.appended")
        assert row.turn_id is not None
        steps = self.steps_not_in(row.turn_id, steps_shown)
        await self._client.chat_stopStream(
            channel=target.channel,
            ts=ts,
            metadata=metadata,
            chunks=steps or None,
            blocks=self._feedback(row, target),
        )

    def _feedback(self, row: OutboxRow, target: StreamTarget) -> list[dict[str, Any]] | None:
        """Slack's 👍 / 👎 under the finished message, when it is the end of its turn's reply."""
        return reply_feedback(self._store, row, target.channel)

    def _refused(self, row: OutboxRow, exc: BaseException) -> bool:
        """Slack said no to the stream's start (nothing was posted): the row goes out as a
        plain post. A refusal of the feature turns streams off for the instance; any other
        answer (a bad recipient, say) only this row's. A rate limit or a server error is
        not an answer: the row is tried again later."""
        if self.refusals.refused("stream", exc):
            return True
        error = slack_error(exc)
        status = exc.response.status_code if isinstance(exc, SlackApiError) else 0
        if not error or status != 200 or error == "ratelimited":
            return False
        log.warning("stream refused: posting whole", instance=self._instance, key=row.dedupe_key, error=error)
        return True

    def _tool_steps(self, row: OutboxRow) -> list[dict[str, Any]]:
        """The turn's tool calls as Slack's ``task_update`` cards, on its first reply only."""
        if row.turn_id is None or not row.dedupe_key.endswith(":0"):
            return []
        return self.tool_steps_of(row.turn_id)

    def tool_steps_of(self, turn_id: int) -> list[dict[str, Any]]:
        return [
            {
                "type": "task_update",
                "id": f"step-{step.step}",
                "title": step.name,
                "status": "error" if step.error else "complete",
            }
            for step in self._store.steps.of(turn_id)
            if step.kind == "tool" and step.name not in UNSHOWN_TOOLS
        ]

    def steps_not_in(self, turn_id: int, shown: set[str]) -> list[dict[str, Any]]:
        return [t for t in self.tool_steps_of(turn_id) if t["id"] not in shown]

    async def finish(self, row: OutboxRow, ts: str, metadata: dict[str, Any]) -> None:
        """A stream a previous run left (or a draft the post does not continue): stop it if
        it still streams, then make its text the whole reply, with its metadata and, as a
        whole post has them, its turn's feedback buttons."""
        channel = row.posted_channel or row.channel or ""
        try:
            await self._client.chat_stopStream(channel=channel, ts=ts)
        except Exception as exc:
            if slack_error(exc) not in NOT_STREAMING:
                raise
        content = whole_reply(row.text, reply_feedback(self._store, row, channel))
        await self._client.chat_update(channel=channel, ts=ts, metadata=metadata, **content)

    async def find_started(self, row: OutboxRow, oldest: str) -> str | None:
        """The ts of a stream started for ``row`` whose ts was never recorded: the
        instance's own message in the target thread, newer than the attempt, with no key."""
        target = self.target(row)
        if target is None:
            return None
        return await self._find_in_thread(target.channel, target.thread_ts, oldest)

    async def _find_in_thread(self, channel: str, thread_ts: str, oldest: str) -> str | None:
        resp = await self._client.conversations_replies(
            channel=channel, ts=thread_ts, oldest=oldest, limit=SEARCH_PAGE, include_all_metadata=True
        )
        for message in resp.get("messages") or []:
            if message.get("ts") == thread_ts or message.get("user") != self._bot_user_id:
                continue
            if not message.get("metadata"):
                return str(message.get("ts"))
        return None

    def forget(self, turn_id: int) -> None:
        self._live.pop(turn_id, None)


class LiveDraft:
    """One turn's first post streaming while the model writes it (a task of its own:
    never in the turn's way). ``grow`` takes the text so far; ``end`` says whether the
    turn posts (the poster then takes the stream over) or not (the draft is deleted)."""

    def __init__(
        self,
        client: AsyncWebClient,
        store: Store,
        instance: str,
        turn_id: int,
        target: StreamTarget,
        streams: ReplyStreams,
    ) -> None:
        self._client = client
        self._store = store
        self._instance = instance
        self._streams = streams
        self._turn_id = turn_id
        self._target = target
        self._text = ""
        self.ts = ""
        # What Slack shows of the post; None once it is not the start of the text any more.
        self.shown: str | None = ""
        self._ended: bool | None = None  # None while the turn runs, then: did it post
        self._stopped = False  # ended by Stop: the stream is stopped, the message kept
        # The tool steps the stream shows as ``task_update`` cards, and whether one ended since.
        self.steps_shown: set[str] = set()
        self._steps_due = False
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def grow(self, text: str) -> None:
        self._text = text
        self._changed.set()

    def end(self, posted: bool) -> None:
        self._ended = posted
        self._changed.set()

    def stop(self) -> None:
        """A person clicked Stop (docs/agent-surface.md): the stream ends where it is and
        what it shows stays, nothing more appended."""
        self._stopped = True
        self.end(True)

    def tool_ended(self) -> None:
        """A tool call of the turn ended: a stream under way shows it as a card."""
        self._steps_due = True
        self._changed.set()

    async def settled(self) -> None:
        """The draft's own calls are over (the turn has ended): the poster goes on."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        store, instance = self._store, self._instance
        try:
            left = store.reply_drafts.adopt(instance, self._target.channel, self._turn_id)
            if left is not None:
                # A crash left this reply's draft: the poster finishes that message.
                self.ts, self.shown = left.ts, None
                await self._until_end()
            else:
                await self._stream()
        except Exception as exc:  # a draft is only shown: the poster still posts the reply
            self.shown = None
            log.debug("draft not streamed", instance=instance, error=slack_error(exc) or type(exc).__name__)
            await self._until_end()
        if self._stopped:
            await self._stop_stream()
        elif self._ended is False:
            await self._delete()

    async def _until_end(self) -> None:
        while self._ended is None:
            self._changed.clear()
            await self._changed.wait()

    async def _stream(self) -> None:
        while self._ended is None and not self._text.strip():
            self._changed.clear()
            await self._changed.wait()
        if self._ended is not None:
            return  # nothing written while the turn ran: the poster streams the post whole
        if not await self._start():
            await self._until_end()
            return
        last = time.monotonic()
        while self._ended is None:
            self._changed.clear()
            if self._steps_due:
                await self._append_steps()
            text = self._text
            if self.shown is not None and text.startswith(self.shown) and len(text) > len(self.shown):
                await asyncio.sleep(max(0.0, APPEND_INTERVAL_S - (time.monotonic() - last)))
                await self._append()
                last = time.monotonic()
                continue
            if self.shown is not None and not text.startswith(self.shown):
                self.shown = None  # the model began again: the poster updates the message
            await self._changed.wait()

    async def _start(self) -> bool:
        target, drafts = self._target, self._store.reply_drafts
        text = self._text[:PIECE_CHARS]
        drafts.open(self._instance, self._turn_id, target.channel, target.thread_ts)
        tasks = self._streams.tool_steps_of(self._turn_id)
        try:
            resp = await self._client.chat_startStream(
                channel=target.channel,
                thread_ts=target.thread_ts,
                markdown_text=text,
                recipient_user_id=target.recipient_user_id,
                recipient_team_id=target.recipient_team_id,
                chunks=tasks or None,
                task_display_mode="timeline" if tasks else None,
            )
        except Exception as exc:
            drafts.drop(self._instance, self._turn_id)
            if not self._streams.refusals.refused("stream", exc):
                log.debug("draft not streamed", instance=self._instance, error=slack_error(exc))
            self.shown = None
            return False
        self.ts = str(resp.get("ts"))
        failpoints.hit("draft.started")  # Slack streams it; its ts is not in the store yet
        self.shown = text
        self.steps_shown = {str(t["id"]) for t in tasks}
        drafts.started(self._instance, self._turn_id, self.ts)
        return True

    async def _append_steps(self) -> None:
        self._steps_due = False
        new = self._streams.steps_not_in(self._turn_id, self.steps_shown)
        if not new:
            return
        await self._client.chat_appendStream(channel=self._target.channel, ts=self.ts, chunks=new)
        self.steps_shown.update(str(t["id"]) for t in new)

    async def _append(self) -> None:
        assert self.shown is not None
        room = STREAM_MAX_CHARS - len(self.shown)
        piece = self._text[len(self.shown) :][: min(PIECE_CHARS, max(0, room))]
        if not piece:
            self.shown = None if room <= 0 else self.shown  # past one stream's text: updated whole
            return
        await self._client.chat_appendStream(channel=self._target.channel, ts=self.ts, markdown_text=piece)
        self.shown += piece
        failpoints.hit("draft.appended")

    async def _stop_stream(self) -> None:
        """Stopped: Slack stopped the stream already when the person clicked (an error
        saying it does not stream any more is that); the message stays as it is."""
        self._streams.forget(self._turn_id)
        if not self.ts:
            return
        try:
            await self._client.chat_stopStream(channel=self._target.channel, ts=self.ts)
        except Exception as exc:
            log.debug("draft stop", instance=self._instance, error=slack_error(exc) or type(exc).__name__)

    async def _delete(self) -> None:
        """The turn ended without a post: its draft goes from Slack and from the store."""
        self._streams.forget(self._turn_id)
        if not self.ts:
            return
        with contextlib.suppress(Exception):
            await self._client.chat_delete(channel=self._target.channel, ts=self.ts)
            self._store.reply_drafts.drop(self._instance, self._turn_id)


def _pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, cut after a line
    or a space when one is near; joined they are ``text`` exactly."""
    out: list[str] = []
    while len(text) > size:
        at = max(text.rfind("\n", size // 2, size), text.rfind(" ", size // 2, size))
        at = at + 1 if at > 0 else size
        out.append(text[:at])
        text = text[at:]
    out.append(text)
    return out
