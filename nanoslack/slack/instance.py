"""One instance on the wire: its bolt app, Socket Mode handler, envelope pump, poster and watchdog.

Everything the instance decides lives in its core (``nanoslack.core.InstanceCore``):
the pump hands the core recorded messages, the intake hands it owners' clicks, and the
poster sends what the core queued in the outbox. This module only talks to Slack.

The socket side (bolt app, Socket Mode client, pump, watchdog) lives on the fleet's
socket loop (``socket.SocketThread``) when there is one; the core and the poster on
the fleet's own loop. What crosses: the inbox write (synchronous, before the ack),
the recorded messages (handed over in order) and an owner's click.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.asks import Answer
from nanoslack.config import InstanceSettings
from nanoslack.core import STOP_GRACE_S, Directory, InstanceCore, cancel
from nanoslack.inbound import Identity, Inbound
from nanoslack.logs import get_logger
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.shutdown import Shutdown
from nanoslack.slack.client import make_post_client, make_web_client
from nanoslack.slack.intake import Intake
from nanoslack.slack.names import SlackNames
from nanoslack.slack.pacing import ChannelPacer
from nanoslack.slack.poster import Poster
from nanoslack.slack.presence import SlackPresence
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
from nanoslack.turns.scheduler import Presence, TurnsClosed

log = get_logger(__name__)

# The poster's last drain at a stop may take this long (or what is left of the grace).
DRAIN_S = 5.0
# Builds the instance's core once Slack said who the instance is (``FleetCore.instance``).
BuildCore = Callable[[Identity, Directory, Presence | None], InstanceCore]
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


class SlackInstance:
    def __init__(
        self, settings: InstanceSettings, options: EdgeOptions, client: AsyncWebClient, core: InstanceCore
    ) -> None:
        self.name = settings.name
        self.core = core
        self.identity = core.identity
        self.client = client
        self._settings = settings
        self._options = options
        self._sockets = options.sockets
        tally = self.tally = options.tally(self.name)
        # One HTTP session for every post of the instance; closed by ``stop``.
        self._post_session = aiohttp.ClientSession()
        post_client = make_post_client(
            settings.bot_token.reveal(), options.api_url, on_error=tally.api_error, session=self._post_session
        )
        pacer = ChannelPacer(rate=options.post_rate)
        self._poster = Poster(
            self.name, post_client, options.store, held_rooms=core.halts.rooms, pacer=pacer, tally=tally
        )
        options.store.outbox.subscribe(self.name, self._poster.wake)
        self._tasks: list[asyncio.Task[None]] = []
        self._socket_tasks: list[asyncio.Task[None]] = []
        # Recorded messages handed to the core's loop / put in its queue: written by one
        # thread each, so their difference is what is in flight between the two loops.
        self._handed = 0
        self._landed = 0

    @classmethod
    async def connect(
        cls, settings: InstanceSettings, options: EdgeOptions, build_core: BuildCore
    ) -> SlackInstance:
        """Ask Slack who this instance is (``auth.test``; raises when it refuses), build
        its core, then the instance. Connecting the socket is ``start``."""
        on_error = options.tally(settings.name).api_error
        client = make_web_client(settings.bot_token.reveal(), options.api_url, on_error=on_error)
        auth_test = await client.auth_test()
        names = SlackNames(client, options.store, options.siblings)
        reaction = options.working_reaction
        presence = SlackPresence(client, reaction, settings.name) if reaction else None
        core = build_core(_identity(settings.name, auth_test), names, presence)
        instance = cls(settings, options, client, core)
        try:
            await instance._on_socket_loop(instance._build_socket(auth_test, asyncio.get_running_loop()))
        except BaseException:
            await instance._post_session.close()  # nobody will stop an instance never returned
            raise
        return instance

    async def _build_socket(
        self, auth_test: AsyncSlackResponse, core_loop: asyncio.AbstractEventLoop
    ) -> None:
        """On the socket loop: slack-sdk's client binds its tasks and HTTP session to
        the loop it is created on."""
        settings, options, core, tally = self._settings, self._options, self.core, self.tally
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

        intake = Intake(self.identity, on_answer=on_answer, on_activity=self._touch, on_vote=on_vote)
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
        submit = self.core.submit
        for msg, recheck in items:
            submit(msg, recheck=recheck)
        self._landed += len(items)

    def _backlog(self) -> int:
        """What the core has not processed yet, counting what is still on its way there."""
        return self.core.backlog() + self._handed - self._landed

    async def _on_socket_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._sockets is None:
            return await coro
        return await self._sockets.run(coro)

    @property
    def reconnects(self) -> int:
        return self.watchdog.reconnects

    def _touch(self) -> None:
        self.watchdog.touch()

    async def start(self) -> None:
        """Resume what a previous run left open, then connect."""
        await self.core.start()
        self._tasks = [asyncio.create_task(self._poster.run(), name=f"{self.name}-poster")]
        self._poster.wake()
        await self._on_socket_loop(self._connect_socket())
        log.info("instance connected", instance=self.name, bot_user_id=self.identity.bot_user_id)

    async def _connect_socket(self) -> None:
        self._socket_tasks = [asyncio.create_task(self.watchdog.run(), name=f"{self.name}-watchdog")]
        await self.handler.connect_async()  # type: ignore[no-untyped-call]

    async def _close_socket(self) -> None:
        with contextlib.suppress(Exception):
            await self.handler.close_async()  # type: ignore[no-untyped-call]
        for task in self._socket_tasks:
            await cancel(task)

    async def stop(self, shutdown: Shutdown | None = None) -> TurnsClosed:
        """Stop reading envelopes (the socket closes: what Slack still has for us waits
        there), let the core finish within the stop's grace, then send what the turns
        recorded. A hurried stop sends nothing more: the outbox keeps it for the next start."""
        shutdown = shutdown or Shutdown(grace=STOP_GRACE_S)
        with contextlib.suppress(Exception):
            await self._on_socket_loop(self._close_socket())
        closed = await self.core.stop(shutdown)
        with contextlib.suppress(Exception):
            await shutdown.run(self._poster.drain(), shutdown.remaining(at_least=DRAIN_S))
        for task in self._tasks:
            await cancel(task)
        await self._post_session.close()
        return closed

    async def is_connected(self) -> bool:
        try:
            return bool(await self.handler.client.is_connected())
        except Exception:
            return False


def _identity(instance: str, auth_test: AsyncSlackResponse) -> Identity:
    return Identity(
        instance=instance,
        team_id=_opt(auth_test.get("team_id")),
        bot_user_id=str(auth_test.get("user_id")),
        bot_id=_opt(auth_test.get("bot_id")),
        name=_opt(auth_test.get("user")),
    )


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
