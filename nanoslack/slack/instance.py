"""One instance on the wire: its Socket Mode connection (``connection.Connection``: our
Socket Mode client and the envelope pump), its poster, its assistant pane and the turns'
signals (the status line, the working reaction).

Everything the instance decides lives in its core (``nanoslack.core.InstanceCore``).
Building one takes two steps the fleet runs in turn: ``SlackInstance.introduce`` asks
Slack who the instance is and makes what the core asks of the edge (``core.EdgeParts``:
the directory of names, the turns' signals, and the reply streams those use);
``SlackInstance(intro, options, core)`` then joins the core to the wire: the pump hands
each batch of events to the core's inbox, the intake hands clicks to its click router,
and the poster sends what the core queued in the outbox (woken by the fleet after a
commit that queued a row: ``wake_poster``). This module only talks to Slack.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.config import ConfigError, InstanceSettings, Settings
from nanoslack.config.agent import SlackView, slack_view
from nanoslack.config.surface import DEFAULT_HOME_INTERVAL_S, SurfaceSettings
from nanoslack.core import STOP_GRACE_S, EdgeParts, InstanceCore
from nanoslack.inbound import Identity
from nanoslack.logs import get_logger
from nanoslack.shutdown import Shutdown, cancel
from nanoslack.slack.client import make_post_client, make_web_client
from nanoslack.slack.connection import Connection, EdgeOptions
from nanoslack.slack.files import SlackFiles
from nanoslack.slack.home import HomePublisher
from nanoslack.slack.names import SlackNames
from nanoslack.slack.pacing import ChannelPacer
from nanoslack.slack.pane import AssistantPane
from nanoslack.slack.poster import Poster
from nanoslack.slack.reaction import WorkingReaction
from nanoslack.slack.sessions import AgentSessions
from nanoslack.slack.status import Refusals, StatusLine
from nanoslack.slack.streams import ReplyStreams
from nanoslack.slack.surface import SurfaceSignals
from nanoslack.turns.scheduler import TurnsClosed

__all__ = ["EdgeOptions", "Introduction", "SlackInstance", "view_of"]

log = get_logger(__name__)

# The poster's last drain at a stop may take this long (or what is left of the grace).
DRAIN_S = 5.0


@dataclass(frozen=True)
class Introduction:
    """What Slack said of the instance (``auth.test``), and the edge's parts of it: the
    reply streams first, then the turns' signals that stream into them."""

    settings: InstanceSettings
    client: AsyncWebClient
    identity: Identity
    names: SlackNames
    # One HTTP session for every post of the instance (closed by ``close``).
    post_session: aiohttp.ClientSession
    post_client: AsyncWebClient
    refusals: Refusals
    streams: ReplyStreams
    signals: SurfaceSignals
    # How the app shows its DM: an agent_view or an assistant_view app (docs/agent-surface.md).
    view: SlackView = "agent"
    # The instance's file downloads (docs/agents.md "Files"), on the fleet's fetcher.
    files: SlackFiles | None = None
    # Seconds between two publishes of one person's Home (NANOSLACK_HOME_INTERVAL).
    home_interval: float = DEFAULT_HOME_INTERVAL_S

    def parts(self, *, fence: Callable[[], bool] | None = None) -> EdgeParts:
        """What the core asks of the edge (``core.build_instance``)."""
        return EdgeParts(
            directory=self.names, signals=self.signals, fence=fence, voters=self.names, files=self.files
        )

    async def close(self) -> None:
        """An instance that never ran (its core could not be built) lets its session go."""
        await self.post_session.close()


class SlackInstance:
    def __init__(self, intro: Introduction, options: EdgeOptions, core: InstanceCore) -> None:
        settings = intro.settings
        self.name = settings.name
        self.core = core
        self.identity = core.identity
        self.client = intro.client
        self._intro = intro
        tally = self.tally = options.tally(self.name)
        self._home = HomePublisher(
            core.home,
            intro.post_client,
            bot_user_id=self.identity.bot_user_id,
            interval=intro.home_interval,
        )
        self._pane = AssistantPane(
            self.name,
            intro.post_client,
            options.store,
            teammates_dir=core.teammates_dir,
            refusals=intro.refusals,
            view=intro.view,
            home=self._home.opened,
        )
        # The one handshake with the core: each batch of events to its inbox, clicks to its
        # click router (docs/architecture.md).
        self.connection = Connection(
            settings, options, self.identity, inbox=core.inbox, clicks=core.clicks, pane=self._pane.take
        )
        self._poster = Poster(
            self.name,
            intro.post_client,
            options.store,
            held_rooms=core.held_rooms,
            pacer=ChannelPacer(rate=options.post_rate),
            tally=tally,
            streams=intro.streams,
            on_delivered=core.wake_teammate,
        )
        self._tasks: list[asyncio.Task[None]] = []

    @staticmethod
    async def introduce(
        settings: InstanceSettings,
        options: EdgeOptions,
        surface: SurfaceSettings | None = None,
        *,
        view: SlackView = "agent",
    ) -> Introduction:
        """Ask Slack who this instance is (``auth.test``; raises when it refuses) and make
        the edge's parts the core asks for. ``surface``: Slack's agent surface in DMs
        (docs/agent-surface.md), on by default."""
        on_error = options.tally(settings.name).api_error
        client = make_web_client(settings.bot_token.reveal(), options.api_url, on_error=on_error)
        auth_test = await client.auth_test()
        identity = _identity(settings.name, auth_test)
        names = SlackNames(client, options.store, options.siblings)
        surface = surface or SurfaceSettings()
        post_session = aiohttp.ClientSession()
        post_client = make_post_client(
            settings.bot_token.reveal(), options.api_url, on_error=on_error, session=post_session
        )
        refusals = Refusals(settings.name)
        status = StatusLine(client, settings.name, refusals)
        # Kept with streaming off too: a stream a crash left open is still finished, not reposted.
        streams = ReplyStreams(
            settings.name,
            post_client,
            options.store,
            team_id=identity.team_id,
            bot_user_id=identity.bot_user_id,
            refusals=refusals,
            enabled=surface.stream,
            on_plain_fallback=status.clear,
        )
        reaction = options.working_reaction
        signals = SurfaceSignals(
            status,
            reaction=WorkingReaction(client, reaction, settings.name) if reaction else None,
            replies=streams,
            refresh=surface.status_refresh,
            sessions=AgentSessions(client, settings.name, refusals),
        )
        files = (
            SlackFiles(options.files, client, settings.bot_token, settings.name) if options.files else None
        )
        return Introduction(
            settings,
            client,
            identity,
            names,
            post_session,
            post_client,
            refusals,
            streams,
            signals,
            view,
            files,
            surface.home_interval,
        )

    @property
    def reconnects(self) -> int:
        """New connections after the first (dropped, refreshed, or the watchdog's)."""
        return self.connection.reconnects

    @property
    def watchdog_reconnects(self) -> int:
        """Of those, the ones the monitor made: a heartbeat missed, an idle socket."""
        return self.connection.watchdog_reconnects

    async def start(self) -> None:
        """Resume what a previous run left open, then connect."""
        await self.core.start()
        self._tasks = [
            asyncio.create_task(self._poster.run(), name=f"{self.name}-poster"),
            asyncio.create_task(self._home.run(), name=f"{self.name}-home"),
        ]
        self._poster.wake()
        await self.connection.connect()
        log.info("instance connected", instance=self.name, bot_user_id=self.identity.bot_user_id)

    async def stop(self, shutdown: Shutdown | None = None) -> TurnsClosed:
        """Stop reading envelopes (the socket closes: what Slack still has for us waits
        there), let the core finish within the stop's grace, then send what the turns
        recorded. A hurried stop sends nothing more: the outbox keeps it for the next start."""
        shutdown = shutdown or Shutdown(grace=STOP_GRACE_S)
        await self.connection.close()
        closed = await self.core.stop(shutdown)
        with contextlib.suppress(Exception):
            await shutdown.run(self._poster.drain(), shutdown.remaining(at_least=DRAIN_S))
        for task in self._tasks:
            await cancel(task)
        await self._intro.close()
        return closed

    def wake_poster(self) -> None:
        """A commit queued a row in the outbox for this instance (the fleet's store says so)."""
        self._poster.wake()

    def socket_busy(self) -> bool:
        """Envelopes read and not acked yet."""
        return self.connection.has_work()

    async def is_connected(self) -> bool:
        return self.connection.is_connected()


def view_of(settings: Settings, instance: str) -> SlackView:
    """The instance's ``NANOSLACK_SLACK_VIEW``; a malformed one is ``agent``, with a warning
    (``doctor`` fails on it)."""
    try:
        return slack_view(settings.value, instance)
    except ConfigError as exc:
        log.warning("config value malformed", instance=instance, error=str(exc), using="agent")
        return "agent"


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
