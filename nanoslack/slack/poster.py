"""Sends what the core put in the outbox: replies, notices, the owners' questions, updates,
reactions and files (``upload.py``).

The outbox row is written in the same transaction as the decision behind it, so
a post is never forgotten, and ``dedupe_key`` makes it one row however often the
decision is replayed. A row is marked ``sending`` before Slack is called and
carries its key in the message metadata, so after a crash between Slack's answer
and ``mark_sent`` the next run finds the post instead of posting it twice.

What Slack sees is decided here, from what the row is (``purpose``): an owner ask's
DM is rendered as Block Kit buttons (``blocks``), a DM reply ends with its turn's 👍 / 👎
(``feedback``), and every post's metadata says what it is (a reply names its turn; a
notice is marked so that no bot answers it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack import failpoints
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.slack.blocks import ask_blocks, vote_blocks
from nanoslack.slack.feedback import reply_feedback, whole_reply
from nanoslack.slack.pacing import ChannelPacer
from nanoslack.slack.parse import NOTICE_EVENT_TYPE
from nanoslack.slack.retry import Backoff, classify
from nanoslack.slack.streams import ReplyStreams, StreamTarget
from nanoslack.slack.upload import Uploads
from nanoslack.store import OutboxRow, Store, store_unavailable
from nanoslack.store.outage import StoreOutage, until_stored

log = get_logger(__name__)

# The metadata event type of each kind of post (``outbox.purpose``).
EVENT_TYPES = {
    "reply": "nanoslack_turn",
    "notice": NOTICE_EVENT_TYPE,
    "ask": "nanoslack_ask",
    "post": "nanoslack_post",
    # A vote's question is the fleet's word to the room (no bot answers it as a message:
    # the room's bots are woken to ballot), like a notice.
    "vote": NOTICE_EVENT_TYPE,
}
# Every post carries its outbox key in its metadata: that is how a restart tells
# "posted, but the process died before recording it" from "never posted".
KEY_FIELD = "nanoslack_key"
# Looking for a post a crash left in doubt: one call of this many messages, newer than
# the attempt. Since 2025 Slack gives a commercially distributed non-Marketplace app one
# conversations.history/replies call a minute, of at most 15 messages (docs/operations.md).
SEARCH_PAGE = 15
# Further pages only when more than a page is newer than the attempt (a busy channel).
MAX_SEARCH_PAGES = 20
# How far our clock may be ahead of Slack's, when no Slack ts is known to go by.
CLOCK_SKEW_S = 600.0
# Errors that will not change on a retry: give up on the row at once.
FINAL_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "user_not_found",
        "cannot_dm_bot",
        "invalid_blocks",
        "msg_too_long",
        "no_text",
        "invalid_auth",
        "account_inactive",
        "message_not_found",
        "cant_update_message",
        "missing_scope",
        "invalid_name",
        "too_many_reactions",
        "file_not_queued",
    }
)
MAX_ATTEMPTS = 5
# Slack's own failures (``retry.SLACK_FAILURES``: internal_error, service_unavailable, …)
# pass: a row they refuse is not given up after MAX_ATTEMPTS but tried again, the poster
# backing off between tries, until it has waited this long since it was queued. Five quick
# tries inside one of Slack's blips would lose a reply that a minute later goes out.
POST_PATIENCE_S = 600.0
# Queued rows read at a time.
QUEUED_PAGE = 50


class Poster:
    def __init__(
        self,
        instance: str,
        client: AsyncWebClient,
        store: Store,
        *,
        held_rooms: Callable[[], frozenset[str]] = frozenset,
        poll_interval: float = 2.0,
        pacer: ChannelPacer | None = None,
        tally: Tally | None = None,
        streams: ReplyStreams | None = None,
        backoff: Callable[[], Backoff] = Backoff,
        on_delivered: Callable[[str], None] | None = None,
    ) -> None:
        self.instance = instance
        # Wakes a teammate a routine handed off to, once the run's post is sent (its
        # handoff delivered into that post's thread; docs/routines.md).
        self._on_delivered = on_delivered or (lambda _name: None)
        # While Slack fails (its own failures), no row is sent before ``_resume_at``.
        self._new_backoff = backoff
        self._backoff: Backoff | None = None
        self._resume_at = 0.0
        # Replies in DMs go out as streams (docs/agent-surface.md); None: every post is plain.
        self._streams = streams
        self._tally = tally or Tally()
        # Rooms whose replies wait (halted: room control's own notices still go out).
        self._held_rooms = held_rooms
        self._pacer = pacer or ChannelPacer()
        self._client = client
        self._store = store
        # A turn's ``send_file`` rows (``kind = file``): Slack's external upload.
        self._uploads = Uploads(instance, client, store)
        self._poll = poll_interval
        self._wake = asyncio.Event()
        self._dm_channels: dict[str, str] = {}
        # One drain at a time: a second one (the final drain of a clean stop) would
        # take the row the first is still sending for one left by a crash, find it
        # not posted yet, and post it again.
        self._draining = asyncio.Lock()
        self._outage = StoreOutage("outbox", instance=instance)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Drain the outbox whenever woken, and every ``poll_interval`` for rows
        written by other processes (``nanoslack senders approve``)."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._next_look())
            except TimeoutError:
                pass
            self._wake.clear()
            if not await self._outage.attempt(self.drain):
                # What was queued stays queued, what was being sent stays in doubt: the
                # next drain, as soon as the store answers, takes them up.
                self._wake.set()

    def _next_look(self) -> float:
        """The poll interval, or sooner when a backoff from Slack's failures ends first."""
        backing_off = self._resume_at - time.monotonic()
        return min(self._poll, backing_off) if backing_off > 0 else self._poll

    async def drain(self) -> int:
        async with self._draining:
            return await self._drain()

    async def _drain(self) -> int:
        for row in self._store.outbox.in_doubt(self.instance):
            await self._recover(row)
        sent = 0
        held = self._held_rooms()
        while True:
            page = self._store.outbox.queued(self.instance, limit=QUEUED_PAGE)
            sent_before = sent
            for row in page:
                if time.monotonic() < self._resume_at:
                    return sent  # Slack is failing: the next drain after the backoff
                if row.purpose == "reply" and row.channel in held:
                    continue  # an agent's reply to a halted room waits for the resume
                if await self._send(row):
                    sent += 1
            # A full page that went out may have more behind it (a backlog after an
            # outage): go on now rather than at the next poll.
            if len(page) < QUEUED_PAGE or sent == sent_before:
                return sent

    def _gives_up(self, row: OutboxRow, exc: SlackApiError, error: str) -> bool:
        """Whether a row Slack refused is failed for good. Slack's own failures pass: the
        poster backs off and tries again until ``POST_PATIENCE_S`` after the row was queued;
        anything else is given up at once when it is final, else after ``MAX_ATTEMPTS``."""
        if error in FINAL_ERRORS:
            return True
        failure = classify(exc)
        if not failure.passes:
            return row.attempts + 1 >= MAX_ATTEMPTS
        if time.time() - row.created_at > POST_PATIENCE_S:
            return True
        self._backoff = self._backoff or self._new_backoff()
        self._resume_at = time.monotonic() + self._backoff.delay(failure.retry_after)
        return False

    async def _send(self, row: OutboxRow) -> bool:
        if row.kind == "update" and not row.update_ts:
            update_ts = self._updated_ts(row)
            if update_ts is None:
                return False  # the post it updates is not out yet: next drain
            row = dataclasses.replace(row, update_ts=update_ts)
        try:
            channel = row.channel or await self._dm_channel(row.dm_user)
            if row.kind in ("post", "file"):
                await asyncio.sleep(self._pacer.reserve(channel))
            if not self._store.outbox.mark_sending(row.id, channel):
                return False  # cancelled or taken meanwhile
            target = self._streams.target(row) if self._streams is not None else None
            streamed = await self._stream(row, target) if target is not None else None
            if streamed is False:
                return False  # the stream started and broke off: in doubt, the next drain finishes it
            posted_channel, ts = (channel, streamed) if streamed else await self._post(row, channel)
        except SlackApiError as exc:
            if exc.response.status_code >= 500:
                # A server error is no proof that nothing was posted: in doubt, like
                # a dropped connection (the next drain looks before resending).
                log.warning("post in doubt", instance=self.instance, key=row.dedupe_key, error="server error")
                self._tally.post("in_doubt")
                return False
            # Slack answered: nothing was posted, so trying again is safe.
            error = str(exc.response.get("error") or "unknown_error")
            final = self._gives_up(row, exc, error)
            with self._store.transaction():
                self._store.outbox.mark_failed(row.id, error, final=final)
                dropped = self._store.handoffs.abandon_waiting(row.dedupe_key) if final else []
            log.warning("post failed", instance=self.instance, key=row.dedupe_key, error=error, final=final)
            for to in dropped:
                log.warning(
                    "handoff not delivered",
                    instance=self.instance,
                    to=to,
                    key=row.dedupe_key,
                    reason=f"the routine's post it waited for failed ({error})",
                )
            self._tally.post("failed")
            return False
        except Exception as exc:
            if store_unavailable(exc) is not None:
                raise  # Slack was not called: the row is still queued (run waits for the store)
            # No answer (timeout, dropped connection): the post may have landed.
            # The row stays in doubt; the next drain looks for it before resending.
            log.warning("post in doubt", instance=self.instance, key=row.dedupe_key, error=type(exc).__name__)
            self._tally.post("in_doubt")
            return False
        failpoints.hit("outbox.posted")
        self._backoff = None
        # Slack has the post and we know its ts: keep it until the store takes it, or the
        # row would be in doubt and cost a lookup.
        await until_stored(lambda: self._sent(row, posted_channel, ts), self._outage)
        self._tally.post("sent")
        log.info(
            "posted", instance=self.instance, key=row.dedupe_key, channel=posted_channel, ts=ts, kind=row.kind
        )
        return True

    async def _stream(self, row: OutboxRow, target: StreamTarget) -> str | Literal[False] | None:
        """The streamed message's ts; None when Slack refused the stream before it began
        (the row is posted plainly); False when it broke off once started."""
        assert self._streams is not None
        started: list[str] = []

        async def record(ts: str) -> None:
            started.append(ts)
            await until_stored(lambda: self._store.outbox.mark_streaming(row.id, ts), self._outage)

        try:
            return await self._streams.send(row, target, _metadata(row), record)
        except Exception as exc:
            if not started:
                raise  # nothing in Slack yet: as a failed plain post
            if store_unavailable(exc) is not None:
                raise
            log.warning(
                "stream in doubt", instance=self.instance, key=row.dedupe_key, error=type(exc).__name__
            )
            self._tally.post("in_doubt")
            return False

    def _sent(self, row: OutboxRow, channel: str, ts: str) -> None:
        """Recorded as sent; a turn's top-level post in a room (a routine's) engages the
        instance in the thread it starts, so replies to it are answered, and delivers the
        handoffs its run made into that thread (docs/routines.md), in the same transaction:
        exactly once, a post recovered after a crash included."""
        delivered: list[str] = []
        with self._store.transaction():
            self._store.outbox.mark_sent(row.id, channel, ts)
            if row.purpose == "reply" and row.kind == "post" and not row.thread_ts and not row.dm_user:
                self._store.groups.engage_own_post(channel, self.instance, ts)
                store = self._store
                delivered = store.handoffs.deliver_waiting(row.dedupe_key, ts, store.messages)
        for to in dict.fromkeys(delivered):
            log.info("handoff delivered", instance=self.instance, to=to, thread_ts=ts)
            self._on_delivered(to)

    def _updated_ts(self, row: OutboxRow) -> str | None:
        """The ts of the post an update was written for before Slack had answered it
        (an owner clicked while their DM was still being posted)."""
        original = self._store.outbox.get_by_key(row.update_of) if row.update_of else None
        if original is None or original.status in ("failed", "cancelled"):
            self._store.outbox.mark_failed(row.id, "nothing to update", final=True)
            return None
        if original.status != "sent" or not original.posted_ts:
            return None
        return str(original.posted_ts)

    async def _recover(self, row: OutboxRow) -> None:
        """A row left in ``sending``: adopt the post if it reached Slack, else requeue it."""
        if row.kind != "post" or not row.posted_channel:
            self._store.outbox.requeue(row.id)  # chat.update is idempotent: just redo it
            return
        try:
            if await self._finish_stream(row):
                return
            found = await self._find_posted(row, row.posted_channel)
        except Exception as exc:
            if store_unavailable(exc) is not None:
                raise
            log.warning(
                "post recovery failed", instance=self.instance, key=row.dedupe_key, error=type(exc).__name__
            )
            return
        if found is None:
            self._store.outbox.requeue(row.id)
            self._tally.post("resent")
            log.info("post recovered: not found, resending", instance=self.instance, key=row.dedupe_key)
        else:
            self._sent(row, row.posted_channel, found)
            self._tally.post("recovered")
            log.info("post recovered: already posted", instance=self.instance, key=row.dedupe_key, ts=found)

    async def _finish_stream(self, row: OutboxRow) -> bool:
        """A stream a previous run started for the row: finished (True), not a new post."""
        if self._streams is None or row.purpose != "reply":
            return False
        ts = row.posted_ts or await self._streams.find_started(
            row, self._oldest(row, str(row.posted_channel))
        )
        if not ts:
            return False
        await self._streams.finish(row, ts, _metadata(row))
        self._sent(row, str(row.posted_channel), ts)
        self._tally.post("recovered")
        log.info("post recovered: stream finished", instance=self.instance, key=row.dedupe_key, ts=ts)
        return True

    async def _find_posted(self, row: OutboxRow, channel: str) -> str | None:
        """The ts of the message carrying this row's key, if the post reached Slack.

        Only messages newer than the attempt are read (``oldest``, see ``_oldest``): the
        post, if it landed, is among the first of them, so one call of ``SEARCH_PAGE``
        messages finds it however long the thread (``conversations.replies`` answers
        the thread's first message, then the replies newer than ``oldest``, oldest
        first; ``conversations.history`` the channel's newest first). Further pages
        are read only when Slack says more are newer than the attempt."""
        oldest = self._oldest(row, channel)
        cursor: str | None = None
        for _ in range(MAX_SEARCH_PAGES):
            if row.thread_ts:
                resp = await self._client.conversations_replies(
                    channel=channel,
                    ts=row.thread_ts,
                    include_all_metadata=True,
                    limit=SEARCH_PAGE,
                    oldest=oldest,
                    cursor=cursor,
                )
            else:
                resp = await self._client.conversations_history(
                    channel=channel,
                    include_all_metadata=True,
                    limit=SEARCH_PAGE,
                    cursor=cursor,
                    oldest=oldest,
                )
            for message in resp.get("messages") or []:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if payload.get(KEY_FIELD) == row.dedupe_key:
                    return str(message.get("ts"))
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return None

    def _oldest(self, row: OutboxRow, channel: str) -> str:
        """A time on Slack's clock that the post, if it landed, is newer than.

        The newest message this instance had recorded in the channel when it called
        Slack (``attempted_at``, written before the call) is one: Slack stamped it
        before our post, and it is Slack's own clock, so no skew between the clocks
        matters. The attempt time less ``CLOCK_SKEW_S`` is the other, for a channel
        with nothing recorded lately; the later of the two is the tighter."""
        attempted = row.attempted_at if row.attempted_at is not None else row.created_at
        by_clock = attempted - CLOCK_SKEW_S
        floor = self._store.inbox.newest_ts(self.instance, channel, received_by=attempted)
        if floor is not None and float(floor) > by_clock:
            return floor
        return f"{by_clock:.6f}"

    async def _post(self, row: OutboxRow, channel: str) -> tuple[str, str]:
        if row.kind == "reaction":
            return channel, await self._react(row, channel)
        if row.kind == "file":
            return channel, await self._uploads.send(row, channel, self._file_thread(row, channel))
        content = _content(row, self._blocks(row), reply_feedback(self._store, row, channel))
        if row.kind == "update":
            ts = row.update_ts or ""  # filled in by _send before it gets here
            resp = await self._client.chat_update(channel=channel, ts=ts, **content)
            return channel, str(resp.get("ts") or ts)
        resp = await self._client.chat_postMessage(
            channel=channel, thread_ts=row.thread_ts, metadata=_metadata(row), **content
        )
        return str(resp.get("channel") or channel), str(resp.get("ts"))

    def _file_thread(self, row: OutboxRow, channel: str) -> str | None:
        """Where a ``send_file`` goes: the turn's thread; in a DM whose replies stream, the
        thread of the person's message, where the turn's words are (docs/agent-surface.md)."""
        if row.thread_ts or self._streams is None or not row.turn_id:
            return row.thread_ts
        target = self._streams.turn_target(channel, row.turn_id)
        return target.thread_ts if target is not None else None

    async def _react(self, row: OutboxRow, channel: str) -> str:
        """A turn's ``react`` (docs/agents.md): the reaction on the message it answered. Done
        again after a crash, Slack answers ``already_reacted``: it is there, so it is sent."""
        ts = row.update_ts or ""
        try:
            await self._client.reactions_add(channel=channel, timestamp=ts, name=row.text)
        except SlackApiError as exc:
            if exc.response.get("error") != "already_reacted":
                raise
        return ts

    def _blocks(self, row: OutboxRow) -> list[dict[str, Any]] | None:
        """An owner ask's buttons (or, once answered, its verdict), a vote's (or, once
        closed, its result), as it stands now."""
        if row.ask_id is not None:
            ask = self._store.asks.get(row.ask_id)
            return ask_blocks(ask) if ask is not None else None
        if row.vote_id is not None:
            vote = self._store.votes.get(row.vote_id)
            return vote_blocks(vote) if vote is not None else None
        return row.blocks_list  # a row queued before the poster rendered asks

    async def _dm_channel(self, user: str | None) -> str:
        if not user:
            raise ValueError("outbox row has neither channel nor dm_user")
        if user not in self._dm_channels:
            resp = await self._client.conversations_open(users=user)
            self._dm_channels[user] = str((resp.get("channel") or {}).get("id"))
        return self._dm_channels[user]


def _content(
    row: OutboxRow, blocks: list[dict[str, Any]] | None, feedback: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """An agent's reply is standard Markdown, sent as ``markdown_text`` so Slack renders it
    (docs/architecture.md), or, in a DM, as a ``markdown`` block followed by its turn's
    feedback buttons (``feedback``; docs/agent-surface.md). The fleet's own words (notices,
    an owner's question, a vote) are Slack mrkdwn in ``text``, their buttons Block Kit."""
    if row.purpose == "reply" and blocks is None:
        return whole_reply(row.text, feedback)
    return {"text": row.text, "blocks": blocks}


def _metadata(row: OutboxRow) -> dict[str, Any]:
    payload: dict[str, Any] = {KEY_FIELD: row.dedupe_key}
    if row.turn_id is not None:
        payload["turn"] = row.turn_id
    return {"event_type": EVENT_TYPES.get(row.purpose, EVENT_TYPES["post"]), "event_payload": payload}
