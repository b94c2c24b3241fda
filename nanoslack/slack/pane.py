"""The assistant pane and the agent's Messages tab (docs/agent-surface.md): Slack's
``assistant_thread_started`` and ``assistant_thread_context_changed`` events (an app made
with ``assistant_view``), ``app_home_opened`` with ``tab: messages`` and
``app_context_changed`` (an ``agent_view`` app), for one instance. Both kinds are served.

When a person opens the instance's pane, the thread gets a title (the teammate's name and
role) and up to 4 suggested prompts from its ``SOUL.md`` front matter (``prompts``), read
fresh each time. The channel the person is viewing is recorded (``assistant_threads``)
and the next turn in that DM is told (``[Viewing #<channel>]``). A message in the pane is
a DM message like any other (the IM, in the pane's thread): a DM turn.

An ``agent_view`` app's DM has no pane thread: when a person opens its Messages tab the
prompts are set on the DM itself (``setSuggestedPrompts`` without ``thread_ts``: Slack says
an agent app's call with one silently fails), and ``app_context_changed`` (which names no
person) is recorded for the DM whose Messages tab was opened last. ``app_home_opened``
with ``tab: home`` goes to the Home (``home``).

The events come with the socket's envelopes (``Intake.screen`` hands them to ``take``,
which the instance's edge gave the intake) and are handled in the background: best
effort, never holding an ack. A refused call (no ``assistant:write``) is the
surface's one log line (``status.Refusals``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.agents import load_teammate
from nanoslack.config.agent import SlackView
from nanoslack.logs import get_logger
from nanoslack.slack.status import Refusals, slack_error
from nanoslack.store import Store

log = get_logger(__name__)

STARTED = "assistant_thread_started"
CONTEXT_CHANGED = "assistant_thread_context_changed"
HOME_OPENED = "app_home_opened"
APP_CONTEXT_CHANGED = "app_context_changed"
EVENTS = frozenset({STARTED, CONTEXT_CHANGED, HOME_OPENED, APP_CONTEXT_CHANGED})
# The Home tab's ``app_home_opened``: for the instance's Home (``nanoslack.slack.home``).
HomeOpened = Callable[[Mapping[str, Any]], None]


class AssistantPane:
    def __init__(
        self,
        instance: str,
        client: AsyncWebClient,
        store: Store,
        *,
        teammates_dir: Path,
        refusals: Refusals,
        view: SlackView = "agent",
        home: HomeOpened | None = None,
    ) -> None:
        self._instance = instance
        self._view = view
        self._home = home
        self._client = client
        self._store = store
        self._teammates_dir = teammates_dir
        self._refusals = refusals
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, event: Mapping[str, Any]) -> None:
        """Handle one pane event in the background."""
        if event.get("type") == HOME_OPENED and event.get("tab") != "messages":
            if self._home is not None:
                self._home(event)
            return
        task = asyncio.get_running_loop().create_task(self.handle(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        try:
            if kind == HOME_OPENED:
                await self._messages_tab(event)
            elif kind == APP_CONTEXT_CHANGED:
                await self._app_context(event)
            else:
                await self._assistant_thread(event)
        except Exception as exc:  # the pane is a courtesy: the DM works without it
            log.info(
                "assistant pane event failed",
                instance=self._instance,
                kind=kind,
                error=slack_error(exc) or type(exc).__name__,
            )

    async def _messages_tab(self, event: Mapping[str, Any]) -> None:
        """A person opened the agent's Messages tab (its DM): the prompts, on the DM."""
        channel, user = event.get("channel"), event.get("user")
        if not isinstance(channel, str) or not channel:
            return
        self._store.assistant_threads.opened(
            instance=self._instance, channel=channel, user_id=user if isinstance(user, str) else None
        )
        if self._view == "agent":  # an assistant_view app's prompts come with its pane's thread
            await self._prompts(channel, None)

    async def _app_context(self, event: Mapping[str, Any]) -> None:
        """What the person beside the agent views now (``context.entities``, most relevant
        first; ``{}``: nothing)."""
        channel = self._store.assistant_threads.last_opened(self._instance)
        if channel is None:
            log.info("event dropped", instance=self._instance, reason="context of no opened DM")
            return
        viewing = _entity_channel(event.get("context"))
        self._store.assistant_threads.record(
            instance=self._instance,
            channel=channel,
            thread_ts="",
            user_id=None,
            context_channel=viewing,
            context_name=await self._name(viewing) if viewing else None,
        )

    async def _assistant_thread(self, event: Mapping[str, Any]) -> None:
        thread = event.get("assistant_thread")
        if not isinstance(thread, Mapping):
            return
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        if not isinstance(channel, str) or not isinstance(thread_ts, str):
            return
        context = thread.get("context")
        viewing = context.get("channel_id") if isinstance(context, Mapping) else None
        viewing = viewing if isinstance(viewing, str) and viewing else None
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

    async def _welcome(self, channel: str, thread_ts: str) -> None:
        if self._refusals.is_off("pane"):
            return
        mate = load_teammate(self._teammates_dir, self._instance)
        title = f"{mate.name} · {mate.role}" if mate.role else mate.name
        try:
            await self._client.assistant_threads_setTitle(
                channel_id=channel, thread_ts=thread_ts, title=title
            )
        except Exception as exc:
            if not self._refusals.refused("pane", exc):
                raise
            return
        await self._prompts(channel, thread_ts)

    async def _prompts(self, channel: str, thread_ts: str | None) -> None:
        """The teammate's suggested prompts (read fresh), on a pane's thread or an agent's DM."""
        if self._refusals.is_off("pane"):
            return
        mate = load_teammate(self._teammates_dir, self._instance)
        if not mate.prompts:
            return
        where = {"thread_ts": thread_ts} if thread_ts is not None else {}
        try:
            await self._client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, prompts=[{"title": p, "message": p} for p in mate.prompts], **where
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


def _entity_channel(context: object) -> str | None:
    """The first channel among ``app_context_changed``'s entities (most relevant first)."""
    if not isinstance(context, Mapping):
        return None
    for entity in context.get("entities") or []:
        if isinstance(entity, Mapping) and entity.get("type") == "slack#/types/channel_id":
            value = entity.get("value")
            if isinstance(value, str) and value:
                return value
    return None
