"""Sends what the pipeline put in the outbox (declines, approval requests, updates).

The outbox row is written in the same transaction as the decision behind it, so
a post is never forgotten, and ``dedupe_key`` makes it one row however often the
decision is replayed. The key also travels in the message metadata, so the
replies layer (§5) can recognise a post whose ``mark_sent`` a crash interrupted.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.store import Store

log = structlog.get_logger("nanoslack.poster")

METADATA_EVENT = "nanoslack_post"
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
    }
)
MAX_ATTEMPTS = 5


class Poster:
    def __init__(
        self, instance: str, client: AsyncWebClient, store: Store, *, poll_interval: float = 2.0
    ) -> None:
        self.instance = instance
        self._client = client
        self._store = store
        self._poll = poll_interval
        self._wake = asyncio.Event()
        self._dm_channels: dict[str, str] = {}

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Drain the outbox whenever woken, and every ``poll_interval`` for rows
        written by other processes (``nanoslack senders approve``)."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._poll)
            except TimeoutError:
                pass
            self._wake.clear()
            await self.drain()

    async def drain(self) -> int:
        sent = 0
        for row in self._store.outbox.queued(self.instance):
            if await self._send(row):
                sent += 1
        return sent

    async def _send(self, row: Any) -> bool:
        try:
            channel, ts = await self._post(row)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "unknown_error")
            final = error in FINAL_ERRORS or row.attempts + 1 >= MAX_ATTEMPTS
            self._store.outbox.mark_failed(row.id, error, final=final)
            log.warning("post failed", instance=self.instance, key=row.dedupe_key, error=error, final=final)
            return False
        except Exception as exc:
            final = row.attempts + 1 >= MAX_ATTEMPTS
            self._store.outbox.mark_failed(row.id, type(exc).__name__, final=final)
            log.warning("post failed", instance=self.instance, key=row.dedupe_key, error=type(exc).__name__)
            return False
        self._store.outbox.mark_sent(row.id, channel, ts)
        log.info("posted", instance=self.instance, key=row.dedupe_key, channel=channel, ts=ts, kind=row.kind)
        return True

    async def _post(self, row: Any) -> tuple[str, str]:
        channel = row.channel or await self._dm_channel(row.dm_user)
        blocks = json.loads(row.blocks) if row.blocks else None
        if row.kind == "update":
            resp = await self._client.chat_update(
                channel=channel, ts=row.update_ts, text=row.text, blocks=blocks
            )
            return channel, str(resp.get("ts") or row.update_ts)
        metadata = (
            json.loads(row.metadata_json)
            if row.metadata_json
            else {
                "event_type": METADATA_EVENT,
                "event_payload": {"key": row.dedupe_key},
            }
        )
        resp = await self._client.chat_postMessage(
            channel=channel, text=row.text, thread_ts=row.thread_ts, blocks=blocks, metadata=metadata
        )
        return str(resp.get("channel") or channel), str(resp.get("ts"))

    async def _dm_channel(self, user: str | None) -> str:
        if not user:
            raise ValueError("outbox row has neither channel nor dm_user")
        if user not in self._dm_channels:
            resp = await self._client.conversations_open(users=user)
            self._dm_channels[user] = str((resp.get("channel") or {}).get("id"))
        return self._dm_channels[user]
