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

Rooms are never streamed: siblings must read a bot's message whole, once. A row is
streamed only when it is a turn's reply in an IM, to a person's Slack message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack import failpoints
from nanoslack.inbound import InboxKey
from nanoslack.logs import get_logger
from nanoslack.slack.surface import Refusals, slack_error
from nanoslack.store import OutboxRow, Store
from nanoslack.turns.signals import UNSHOWN_TOOLS

log = get_logger(__name__)

# What one append carries: the text grows in steps a reader can follow.
PIECE_CHARS = 1_000
SEARCH_PAGE = 15
NOT_STREAMING = frozenset({"message_not_in_streaming_state", "message_not_found"})


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

    def target(self, row: OutboxRow) -> StreamTarget | None:
        """Where ``row`` streams to; None when it is posted as a plain message."""
        if not self._enabled or self.refusals.is_off("stream") or not self._team_id:
            return None
        if (
            row.purpose != "reply"
            or row.kind != "post"
            or row.thread_ts
            or not row.channel
            or not row.turn_id
        ):
            return None
        turn = self._store.turns.get(row.turn_id)
        if turn is None or not turn.through_ts:
            return None
        waking = self._store.inbox.message(InboxKey(self._instance, row.channel, turn.through_ts))
        if waking is None or not waking.is_dm or waking.is_bot or not waking.user:
            return None
        return StreamTarget(row.channel, waking.thread_ts or waking.ts, waking.user, self._team_id)

    async def send(
        self,
        row: OutboxRow,
        target: StreamTarget,
        metadata: dict[str, Any],
        started: Callable[[str], Awaitable[None]],
    ) -> str | None:
        """Stream the row's text; its ts, or None when Slack refused streams (then the
        row is still ``sending`` with no ts: the caller posts it plainly)."""
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
        await started(ts)
        for piece in pieces[1:]:
            await self._client.chat_appendStream(channel=target.channel, ts=ts, markdown_text=piece)
            failpoints.hit("stream.appended")
        await self._client.chat_stopStream(channel=target.channel, ts=ts, metadata=metadata)
        return ts

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
        return [
            {
                "type": "task_update",
                "id": f"step-{step.step}",
                "title": step.name,
                "status": "error" if step.error else "complete",
            }
            for step in self._store.steps.of(row.turn_id)
            if step.kind == "tool" and step.name not in UNSHOWN_TOOLS
        ]

    async def finish(self, row: OutboxRow, ts: str, metadata: dict[str, Any]) -> None:
        """A stream a previous run left: stop it if it still streams, then make its text
        the whole reply and give it its metadata."""
        channel = row.posted_channel or row.channel or ""
        try:
            await self._client.chat_stopStream(channel=channel, ts=ts)
        except Exception as exc:
            if slack_error(exc) not in NOT_STREAMING:
                raise
        await self._client.chat_update(channel=channel, ts=ts, text=row.text, metadata=metadata)

    async def find_started(self, row: OutboxRow, oldest: str) -> str | None:
        """The ts of a stream started for ``row`` whose ts was never recorded: the
        instance's own message in the target thread, newer than the attempt, with no key."""
        target = self.target(row)
        if target is None:
            return None
        resp = await self._client.conversations_replies(
            channel=target.channel,
            ts=target.thread_ts,
            oldest=oldest,
            limit=SEARCH_PAGE,
            include_all_metadata=True,
        )
        for message in resp.get("messages") or []:
            if message.get("ts") == target.thread_ts or message.get("user") != self._bot_user_id:
                continue
            if not message.get("metadata"):
                return str(message.get("ts"))
        return None


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
