"""One instance's Socket Mode connection: our client (``adapter.SocketModeClient``) and
the envelope pump it feeds (``pump.EnvelopePump``), on the fleet's loop beside the core.

The pump hands each batch of events to the instance's inbox in one call (``Inbox.take``:
recorded before the acks, queued for the core) and people's clicks to the core's click
router (``intake.Clicks``); the assistant pane's events go to the instance's pane. Those
three objects are given to the connection: it looks nothing up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nanoslack.config import InstanceSettings
from nanoslack.inbound import Identity
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.slack.adapter import SocketModeClient, SocketOptions
from nanoslack.slack.client import make_web_client
from nanoslack.slack.files import FileFetcher
from nanoslack.slack.intake import Clicks, Intake, PaneEvents
from nanoslack.slack.pump import EnvelopePump, Inbox
from nanoslack.store import Store


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
    # The fleet's file downloads (docs/agents.md "Files"); None: none.
    files: FileFetcher | None = None

    def tally(self, instance: str) -> Tally:
        return self.metrics.tally(instance) if self.metrics is not None else Tally()


class Connection:
    def __init__(
        self,
        settings: InstanceSettings,
        options: EdgeOptions,
        identity: Identity,
        *,
        inbox: Inbox,
        clicks: Clicks,
        pane: PaneEvents | None = None,
    ) -> None:
        self.name = settings.name
        tally = options.tally(self.name)
        # apps.connections.open through slack-sdk's Web API client: Slack's retry etiquette
        # and the error counts of every other call.
        app_token = settings.app_token.reveal()
        opener = make_web_client(app_token, options.api_url, on_error=tally.api_error)

        async def open_url() -> str:
            answer = await opener.apps_connections_open(app_token=app_token)
            return str(answer["url"])

        self.client = SocketModeClient(open_url, instance=self.name, options=options.socket)
        intake = Intake(identity, clicks=clicks, pane=pane)
        self._pump = EnvelopePump(self.client, intake, inbox, instance=self.name, tally=tally)

    async def connect(self) -> None:
        await self.client.connect(self._pump.on_frames)

    async def close(self) -> None:
        await self.client.close()

    def is_connected(self) -> bool:
        return self.client.connected

    def has_work(self) -> bool:
        """Envelopes read and not acked yet (the fleet's turns wait for them: ``FleetBacklog``)."""
        return self.client.has_work()

    @property
    def reconnects(self) -> int:
        return self.client.reconnects

    @property
    def watchdog_reconnects(self) -> int:
        return self.client.watchdog_reconnects
