"""A turn at work, as Slack shows it: the instance's reaction on the waking message
(``NANOSLACK_WORKING_REACTION``, default ``eyes``), added when the turn starts and taken
back when it ends (DESIGN §11 "Seen working").

Best effort and never in the turn's way: each call runs in the background, in order per
message, and a refusal (a missing ``reactions:write`` scope, a deleted message) is a
debug line. Our own ``reaction_added`` echo is dropped by the self filter like any of
our own events.
"""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.logs import get_logger

log = get_logger(__name__)


class SlackPresence:
    def __init__(self, client: AsyncWebClient, reaction: str, instance: str) -> None:
        self._client = client
        self._reaction = reaction
        self._instance = instance
        # The last call per message: the removal waits for the addition it undoes.
        self._pending: dict[tuple[str, str], asyncio.Task[None]] = {}

    def working(self, channel: str, ts: str) -> None:
        self._after_previous(channel, ts, add=True)

    def done(self, channel: str, ts: str) -> None:
        self._after_previous(channel, ts, add=False)

    def _after_previous(self, channel: str, ts: str, *, add: bool) -> None:
        key = (channel, ts)
        previous = self._pending.get(key)
        task = asyncio.get_running_loop().create_task(self._call(previous, channel, ts, add))
        self._pending[key] = task
        task.add_done_callback(
            lambda t: self._pending.pop(key, None) if self._pending.get(key) is t else None
        )

    async def _call(self, previous: asyncio.Task[None] | None, channel: str, ts: str, add: bool) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        method = self._client.reactions_add if add else self._client.reactions_remove
        try:
            await method(channel=channel, timestamp=ts, name=self._reaction)
        except Exception as exc:  # a reaction is a courtesy; the turn goes on without it
            log.debug("working reaction failed", instance=self._instance, add=add, error=type(exc).__name__)
