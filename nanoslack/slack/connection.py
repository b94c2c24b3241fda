"""One instance's Socket Mode connection: our client (``adapter.SocketModeClient``) and
the envelope pump it feeds (``pump.EnvelopePump``), on the fleet's loop beside the core.

The pump writes to the inbox before it acks (``Core.record``, synchronous), hands the
recorded messages to the core in order (``Core.submit``) and an owner's click or ballot
to the core (``answer``, ``ballot``): the calls ``Core`` names, nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nanoslack.asks import Answer
from nanoslack.config import InstanceSettings
from nanoslack.inbound import FeatureClick, Identity, Inbound
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.slack.adapter import SocketModeClient, SocketOptions
from nanoslack.slack.client import make_web_client
from nanoslack.slack.intake import Intake
from nanoslack.slack.pump import EnvelopePump
from nanoslack.store import Store
from nanoslack.worker import FleetBacklog

# A recorded message, and whether the core is to check it first (``Core.submit``).
Delivered = tuple[Inbound, bool]


class Core(Protocol):
    """What the connection calls on the instance's core (``nanoslack.core.InstanceCore``)."""

    @property
    def identity(self) -> Identity: ...

    def record(self, msgs: Sequence[Inbound]) -> list[bool]: ...

    def submit(self, msg: Inbound, *, recheck: bool = False) -> None: ...

    def backlog(self) -> int: ...

    async def answer(self, answer: Answer) -> None: ...

    async def ballot(self, click: FeatureClick) -> None: ...


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
    # The fleet's turns wait while a socket has work (``FleetBacklog.watch``).
    backlog: FleetBacklog | None = None

    def tally(self, instance: str) -> Tally:
        return self.metrics.tally(instance) if self.metrics is not None else Tally()


class Connection:
    def __init__(self, settings: InstanceSettings, options: EdgeOptions, core: Core) -> None:
        self.name = settings.name
        self._core = core
        tally = options.tally(self.name)
        # apps.connections.open through slack-sdk's Web API client: Slack's retry etiquette
        # and the error counts of every other call.
        app_token = settings.app_token.reveal()
        opener = make_web_client(app_token, options.api_url, on_error=tally.api_error)

        async def open_url() -> str:
            answer = await opener.apps_connections_open(app_token=app_token)
            return str(answer["url"])

        self.client = SocketModeClient(open_url, instance=self.name, options=options.socket)
        self._backlog = options.backlog
        self._unwatch: Callable[[], None] | None = None
        intake = Intake(core.identity, on_answer=core.answer, on_vote=core.ballot)
        self._pump = EnvelopePump(
            self.client,
            intake,
            record=core.record,
            deliver=self._land,
            backlog=core.backlog,
            instance=self.name,
            tally=tally,
        )

    async def connect(self) -> None:
        await self.client.connect(self._pump.on_frames)
        if self._backlog is not None and self._unwatch is None:
            self._unwatch = self._backlog.watch(self.client.has_work)

    async def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        await self.client.close()

    def is_connected(self) -> bool:
        return self.client.connected

    @property
    def reconnects(self) -> int:
        return self.client.reconnects

    @property
    def watchdog_reconnects(self) -> int:
        return self.client.watchdog_reconnects

    def _land(self, items: Sequence[Delivered]) -> None:
        """The recorded messages, in the order they were recorded."""
        submit = self._core.submit
        for msg, recheck in items:
            submit(msg, recheck=recheck)
