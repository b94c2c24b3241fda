"""The assistant pane (docs/agent-surface.md): Slack's ``assistant_thread_started`` and
``assistant_thread_context_changed`` events for one instance.

When a person opens the instance's pane, the thread gets a title (the teammate's name and
role) and up to 4 suggested prompts from its ``SOUL.md`` front matter (``prompts``), read
fresh each time. The channel the person is viewing is recorded (``assistant_threads``)
and the next turn in that DM is told (``[Viewing #<channel>]``). A message in the pane is
a DM message like any other (the IM, in the pane's thread): a DM turn.

The events come with the socket's envelopes (``Intake.screen`` hands them to ``take``,
which the instance's edge gave the intake) and are handled in the background: best
effort, never holding an ack. A refused call (no ``assistant:write``) is the
surface's one log line (``status.Refusals``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.agents import load_teammate
from nanoslack.logs import get_logger
from nanoslack.slack.status import Refusals, slack_error
from nanoslack.store import Store

log = get_logger(__name__)

STARTED = "assistant_thread_started"
CONTEXT_CHANGED = "assistant_thread_context_changed"
EVENTS = frozenset({STARTED, CONTEXT_CHANGED})


class AssistantPane:
    def __init__(
        self,
        instance: str,
        client: AsyncWebClient,
        store: Store,
        *,
        teammates_dir: Path,
        refusals: Refusals,
    ) -> None:
        self._instance = instance
        self._client = client
        self._store = store
        self._teammates_dir = teammates_dir
        self._refusals = refusals
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, event: Mapping[str, Any]) -> None:
        """Handle one pane event in the background."""
        task = asyncio.get_running_loop().create_task(self.handle(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(self, event: Mapping[str, Any]) -> None:
        thread = event.get("assistant_thread")
        if not isinstance(thread, Mapping):
            return
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        if not isinstance(channel, str) or not isinstance(thread_ts, str):
            return
        context = thread.get("context")
        viewing = context.get("channel_id") if isinstance(context, Mapping) else None
        viewing = viewing if isinstance(viewing, str) and viewing else None
        try:
            self._store.assistant_threads.record(
                instance=self._instance,
                channel=channel,
                thread_ts=thread_ts,
                user_id=str(thread.get("user_id") or "") or None,
                context_channel=viewing,
                context_name=await self._name(viewing) if viewing else None,
            )
            if event.get("type") == STARTED:
                await self._welcome(channel, thread_ts)
        except Exception as exc:  # the pane is a courtesy: the DM works without it
            log.info(
                "assistant pane event failed",
                instance=self._instance,
                kind=event.get("type"),
                error=slack_error(exc) or type(exc).__name__,
            )

    async def _welcome(self, channel: str, thread_ts: str) -> None:
        if self._refusals.is_off("pane"):
            return
        mate = load_teammate(self._teammates_dir, self._instance)
        title = f"{mate.name} · {mate.role}" if mate.role else mate.name
        try:
            await self._client.assistant_threads_setTitle(
                channel_id=channel, thread_ts=thread_ts, title=title
            )
            if mate.prompts:
                await self._client.assistant_threads_setSuggestedPrompts(
                    channel_id=channel,
                    thread_ts=thread_ts,
                    prompts=[{"title": p, "message": p} for p in mate.prompts],
                )
        except Exception as exc:
            if not self._refusals.refused("pane", exc):
                raise

    async def _name(self, channel: str) -> str | None:
        try:
            resp = await self._client.conversations_info(channel=channel)
        except Exception:
            return None  # not a member, or not allowed: the id is shown instead
        info = resp.get("channel") or {}
        name = info.get("name") if isinstance(info, dict) else None
        return name if isinstance(name, str) and name else None
