"""A turn at work, as Slack shows it: the instance's reaction on the waking message
(``NANOSLACK_WORKING_REACTION``, default ``eyes``), added once the turn has run for
``WORKING_AFTER_S`` and taken back when it ends (docs/agents.md).

Why not at once: a quick turn's answer is its own sign, and a reaction put on and taken off
costs two Web API calls and two events to every bot in the room. At 100 mentions/s that
was 2,000 extra envelopes a second and took the reply latency from 0.1 s to 4 s (the
bench's figure); a turn that ends before the reaction is due makes no call at all.

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

WORKING_AFTER_S = 1.0


class WorkingReaction:
    def __init__(
        self, client: AsyncWebClient, reaction: str, instance: str, *, after: float = WORKING_AFTER_S
    ) -> None:
        self._client = client
        self._reaction = reaction
        self._instance = instance
        self._after = after
        # The last call per message: the removal waits for the addition it undoes.
        self._pending: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Additions not due yet: a turn that ends first cancels its own, and nothing is called.
        self._due: dict[tuple[str, str], asyncio.Task[None]] = {}

    def working(self, channel: str, ts: str) -> None:
        key = (channel, ts)
        self._due[key] = self._after_previous(key, add=True, delay=self._after)

    def done(self, channel: str, ts: str) -> None:
        key = (channel, ts)
        due = self._due.pop(key, None)
        if due is not None and not due.done():
            due.cancel()  # still waiting for its moment: there is nothing to take back
            return
        self._after_previous(key, add=False)

    def _after_previous(self, key: tuple[str, str], *, add: bool, delay: float = 0.0) -> asyncio.Task[None]:
        previous = self._pending.get(key)
        task = asyncio.get_running_loop().create_task(self._call(previous, key, add, delay))
        self._pending[key] = task
        task.add_done_callback(
            lambda t: self._pending.pop(key, None) if self._pending.get(key) is t else None
        )
        return task

    async def _call(
        self, previous: asyncio.Task[None] | None, key: tuple[str, str], add: bool, delay: float
    ) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        if delay:
            await asyncio.sleep(delay)
            self._due.pop(key, None)  # from here on the addition is made: done() takes it back
        channel, ts = key
        method = self._client.reactions_add if add else self._client.reactions_remove
        try:
            await method(channel=channel, timestamp=ts, name=self._reaction)
        except Exception as exc:  # a reaction is a courtesy; the turn goes on without it
            log.debug("working reaction failed", instance=self._instance, add=add, error=type(exc).__name__)
