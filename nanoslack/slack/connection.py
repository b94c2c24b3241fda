"""One instance's Socket Mode connection: its bolt app, the handler, the envelope pump and
the watchdog.

They live on the fleet's socket loop (``socket.SocketThread``) when there is one, else on the
fleet's own loop beside the core. What crosses to the core's loop: the inbox write
(synchronous, before the ack), the recorded messages (handed over in order) and an owner's
click or ballot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.asks import Answer
from nanoslack.config import InstanceSettings
from nanoslack.core import InstanceCore
from nanoslack.inbound import Inbound
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.shutdown import cancel
from nanoslack.slack.client import make_web_client
from nanoslack.slack.intake import Intake
from nanoslack.slack.socket import (
    EnvelopePump,
    SocketOptions,
    SocketThread,
    SocketWatchdog,
    install_envelope_handler,
    seed_bolt_authorization,
)
from nanoslack.store import Store
from nanoslack.team import VoteClick

T = TypeVar("T")
# A recorded message, and whether the core is to check it first (``InstanceCore.submit``).
Delivered = tuple[Inbound, bool]


@dataclass(frozen=True)
class EdgeOptions:
    """What every instance's edge shares."""

    api_url: str
    store: Store
    siblings: Callable[[], dict[str, str]]
    socket: SocketOptions = SocketOptions()
    post_rate: float = 1.0  # NANOSLACK_POST_RATE
    working_reaction: str = "eyes"  # NANOSLACK_WORKING_REACTION ("": none)
    metrics: FleetMetrics | None = None
    # The fleet's socket loop; None: the sockets share the caller's loop.
    sockets: SocketThread | None = None

    def tally(self, instance: str) -> Tally:
        return self.metrics.tally(instance) if self.metrics is not None else Tally()


class Connection:
    def __init__(self, settings: InstanceSettings, options: EdgeOptions, core: InstanceCore) -> None:
        self.name = settings.name
        self._settings = settings
        self._options = options
        self._core = core
        self._tally = options.tally(self.name)
        self._sockets = options.sockets
        self._tasks: list[asyncio.Task[None]] = []
        # Recorded messages handed to the core's loop / put in its queue: written by one
        # thread each, so their difference is what is in flight between the two loops.
        self._handed = 0
        self._landed = 0

    async def build(self, auth_test: AsyncSlackResponse) -> None:
        await self._on_socket_loop(self._build(auth_test, asyncio.get_running_loop()))

    async def connect(self) -> None:
        await self._on_socket_loop(self._connect())

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._on_socket_loop(self._close())

    async def is_connected(self) -> bool:
        try:
            return bool(await self.handler.client.is_connected())
        except Exception:
            return False

    @property
    def reconnects(self) -> int:
        return self.watchdog.reconnects

    async def _build(self, auth_test: AsyncSlackResponse, core_loop: asyncio.AbstractEventLoop) -> None:
        """On the socket loop: slack-sdk's client binds its tasks and HTTP session to
        the loop it is created on."""
        settings, options, core, tally = self._settings, self._options, self._core, self._tally
        app = AsyncApp(
            # bolt's own client (it carries the bot token; passing it again makes bolt warn)
            client=make_web_client(settings.bot_token.reveal(), options.api_url, on_error=tally.api_error),
            raise_error_for_unhandled_request=False,  # our intake acks every envelope itself
        )
        same_loop = self._sockets is None

        async def on_core_loop(coro: Coroutine[Any, Any, None]) -> None:
            if same_loop:
                await coro
            else:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, core_loop))

        async def on_answer(answer: Answer) -> None:
            await on_core_loop(core.answer(answer))

        async def on_vote(click: VoteClick) -> None:
            await on_core_loop(core.ballot(click))

        def deliver(items: list[Delivered]) -> None:
            self._handed += len(items)
            if same_loop:
                self._land(items)
            else:
                core_loop.call_soon_threadsafe(self._land, items)

        intake = Intake(core.identity, on_answer=on_answer, on_activity=self._touch, on_vote=on_vote)
        app.use(intake)
        self.handler = AsyncSocketModeHandler(
            app, app_token=settings.app_token.reveal(), ping_interval=options.socket.ping_interval
        )
        install_envelope_handler(self.handler.client, app, self.name, tally)
        # Message events skip bolt: recorded and acked in batches, with backpressure.
        EnvelopePump(
            self.handler.client,
            intake,
            record=core.record,
            deliver=deliver,
            backlog=self._backlog,
            instance=self.name,
            tally=tally,
        ).install()
        self._app = app
        self.watchdog = SocketWatchdog(self.handler.client, options.socket, self.name)
        seed_bolt_authorization(app, auth_test)

    def _land(self, items: Sequence[Delivered]) -> None:
        """On the core's loop: the recorded messages, in the order they were recorded."""
        submit = self._core.submit
        for msg, recheck in items:
            submit(msg, recheck=recheck)
        self._landed += len(items)

    def _backlog(self) -> int:
        """What the core has not processed yet, counting what is still on its way there."""
        return self._core.backlog() + self._handed - self._landed

    async def _on_socket_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._sockets is None:
            return await coro
        return await self._sockets.run(coro)

    def _touch(self) -> None:
        self.watchdog.touch()

    async def _connect(self) -> None:
        self._tasks = [asyncio.create_task(self.watchdog.run(), name=f"{self.name}-watchdog")]
        await self.handler.connect_async()  # type: ignore[no-untyped-call]

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.handler.close_async()  # type: ignore[no-untyped-call]
        for task in self._tasks:
            await cancel(task)
