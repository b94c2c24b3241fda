"""One instance on the wire: its bolt app, Socket Mode handler, worker, poster, watchdog."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.agents import Agent, Teammate, load_teammate
from nanoslack.agents.teammates import SKILLS_DIRNAME
from nanoslack.budgets import RoomBudget
from nanoslack.config import A2AConfig, InstanceSettings
from nanoslack.control import Effect
from nanoslack.inbound import Identity, Inbound
from nanoslack.logs import get_logger
from nanoslack.pipeline import Outcome, build_pipeline
from nanoslack.slack.batching import GroupCommit
from nanoslack.slack.client import make_post_client, make_web_client
from nanoslack.slack.intake import Intake
from nanoslack.slack.names import SlackNames
from nanoslack.slack.pacing import ChannelPacer
from nanoslack.slack.poster import Poster
from nanoslack.slack.socket import EnvelopePump, install_envelope_handler
from nanoslack.store import Store
from nanoslack.turns import TurnDispatcher, TurnOptions

log = get_logger(__name__)

# Messages processed in one transaction at most: enough to amortise a commit,
# small enough that a burst does not delay the first reply.
MAX_BATCH = 64


@dataclass(frozen=True)
class SocketOptions:
    ping_interval: float = 10.0
    # Reconnect when no envelope arrived for this long: the known Socket Mode
    # failure (events stop after an idle reconnect while pings still succeed)
    # cannot be seen any other way. A fresh connection is cheap.
    idle_reconnect: float = 300.0
    watchdog_interval: float = 5.0


@dataclass(frozen=True)
class Shared:
    """What every instance of a fleet shares."""

    store: Store
    api_url: str
    owners: tuple[str, ...]
    hop_scope: str
    a2a_config: Callable[[], A2AConfig]
    socket: SocketOptions
    teammates_dir: Path
    # Fleet-wide cap on agent calls running at once (NANOSLACK_MAX_TURNS).
    turn_limiter: asyncio.Semaphore
    # Every running instance: name → bot user id (``@name`` → ``<@U…>`` in replies).
    siblings: Callable[[], Mapping[str, str]]
    turns: TurnOptions = TurnOptions()
    post_rate: float = 1.0  # NANOSLACK_POST_RATE
    # Whether this process still holds an instance's lease (DESIGN §10), by name.
    holds_lease: Callable[[str], bool] | None = None
    on_pending: Callable[[Inbound], None] | None = None
    on_outcome: Callable[[Inbound, Outcome], None] | None = None
    # NANOSLACK_ROOM_TOKENS: a room's daily token budget, all instances together.
    room_tokens: int | None = None


class InstanceRuntime:
    """Built from an instance's ``auth.test`` answer (``connect``): everything the
    instance runs exists from the constructor on."""

    def __init__(
        self,
        settings: InstanceSettings,
        shared: Shared,
        client: AsyncWebClient,
        auth_test: AsyncSlackResponse,
        agent: Agent,
    ) -> None:
        self.name = settings.name
        self.agent = agent
        self._shared = shared
        self.client = client
        self.identity = _identity(settings.name, auth_test)
        post_client = make_post_client(settings.bot_token.reveal(), shared.api_url)
        self._poster = Poster(self.name, post_client, shared.store, pacer=ChannelPacer(rate=shared.post_rate))
        names = SlackNames(client, shared.store, shared.siblings)
        self.pipeline = build_pipeline(
            self.identity,
            shared.store,
            owners=shared.owners,
            a2a_config=shared.a2a_config,
            hop_scope=shared.hop_scope,
            names=names,
            on_outbox=self._poster.wake,
            on_pending=self._pending,
            on_control=self._room_control,
            fence=functools.partial(shared.holds_lease, self.name) if shared.holds_lease else None,
        )
        self.turns = TurnDispatcher(
            identity=self.identity,
            store=shared.store,
            agent=agent,
            teammate=_teammate(shared.teammates_dir, self.name),
            skills_dir=shared.teammates_dir / SKILLS_DIRNAME,
            directory=names,
            siblings=shared.siblings,
            limiter=shared.turn_limiter,
            on_posts=self._poster.wake,
            options=shared.turns,
            budget=RoomBudget(
                shared.store, instance=self.name, owners=shared.owners, room_tokens=shared.room_tokens
            ),
        )
        self._queue: asyncio.Queue[Inbound] = asyncio.Queue()
        self.group_commit = GroupCommit(self.pipeline.accept_many)
        self.handler = self._socket_handler(settings, auth_test)
        self._tasks: list[asyncio.Task[None]] = []
        self.last_envelope = time.monotonic()
        self.reconnects = 0
        # Bound once: a bound logger's filtered levels are no-ops, and the worker
        # logs a debug line for every message.
        self._log = log.bind(instance=self.name)

    @classmethod
    async def connect(cls, settings: InstanceSettings, shared: Shared, agent: Agent) -> InstanceRuntime:
        """Ask Slack who this instance is (``auth.test``; raises when it refuses),
        then build it. Connecting the socket is ``start``."""
        client = make_web_client(settings.bot_token.reveal(), shared.api_url)
        auth_test = await client.auth_test()
        return cls(settings, shared, client, auth_test, agent)

    def _pending(self, msg: Inbound) -> None:
        """An allowed message is waiting for a turn."""
        self.turns.wake()
        if self._shared.on_pending is not None:
            self._shared.on_pending(msg)

    def _socket_handler(
        self, settings: InstanceSettings, auth_test: AsyncSlackResponse
    ) -> AsyncSocketModeHandler:
        """The bolt app, with our intake as its only middleware, on a Socket Mode handler
        whose envelope handler is ours."""
        app = AsyncApp(
            # The client carries the bot token; passing it again makes bolt warn.
            client=self.client,
            # Our intake acks every envelope itself, after the inbox write.
            raise_error_for_unhandled_request=False,
        )
        _seed_bolt_authorization(app, auth_test)
        intake = Intake(
            self.identity,
            accept=self.group_commit.record,
            submit=self._queue.put_nowait,
            on_click=self._on_click,
            on_activity=self._touch,
            on_resume=self._on_resume,
            on_budget=self._on_budget,
        )
        app.use(intake)
        handler = AsyncSocketModeHandler(
            app, app_token=settings.app_token.reveal(), ping_interval=self._shared.socket.ping_interval
        )
        install_envelope_handler(handler.client, app, self.name)
        # Message events skip bolt: recorded and acked in batches, with backpressure.
        EnvelopePump(
            handler.client,
            intake,
            record_now=self.group_commit.record_now,
            backlog=self._queue.qsize,
            instance=self.name,
        ).install()
        return handler

    async def start(self) -> None:
        """Resume what a previous run left open, then connect."""
        resumed = self.pipeline.unfinished()
        for msg in resumed:
            self._queue.put_nowait(msg)
        if resumed:
            log.info("inbox resumed", instance=self.name, count=len(resumed))
        self.turns.recover()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"{self.name}-worker"),
            asyncio.create_task(self.turns.run(), name=f"{self.name}-turns"),
            asyncio.create_task(self._poster.run(), name=f"{self.name}-poster"),
            asyncio.create_task(self._watchdog(), name=f"{self.name}-watchdog"),
        ]
        self._poster.wake()
        await self.handler.connect_async()  # type: ignore[no-untyped-call]
        log.info(
            "instance connected",
            instance=self.name,
            bot_user_id=self.identity.bot_user_id,
        )

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.handler.close_async()  # type: ignore[no-untyped-call]
        # Let the worker finish what is queued (it is already acked) and the turns
        # under way record their replies; what does not finish runs again at start.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=5.0)
        await self.turns.close(within=2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._poster.drain(), timeout=5.0)
        for task in self._tasks:
            await _cancel(task)

    def _touch(self) -> None:
        self.last_envelope = time.monotonic()

    async def _work(self) -> None:
        """Messages in arrival order: hop counts, resets and sticky threads depend
        on the order messages happened in. What queued up meanwhile is processed
        as one batch (one commit), which is how the fleet keeps up with a burst."""
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                outcomes = await self.pipeline.process_many(batch)
            except Exception as exc:  # process_many handles message failures; this is a bug guard
                log.error("pipeline crashed", instance=self.name, error=f"{type(exc).__name__}: {exc}")
                for _ in batch:
                    self._queue.task_done()
                continue
            for msg, outcome in zip(batch, outcomes, strict=True):
                self._finished(msg, outcome)
                self._queue.task_done()

    def _finished(self, msg: Inbound, outcome: Outcome) -> None:
        self._log.debug(
            "message processed",
            channel=msg.channel,
            ts=msg.ts,
            status=outcome.status,
            reason=outcome.reason,
        )
        if outcome.status == "failed" and self.pipeline.is_open(msg):
            self._retry_later(msg)
        if self._shared.on_outcome is not None:
            self._shared.on_outcome(msg, outcome)

    def _retry_later(self, msg: Inbound, delay: float = 1.0) -> None:
        asyncio.get_running_loop().call_later(delay, self._queue.put_nowait, msg)

    async def _on_click(self, approval_id: str, allow: bool, user: str) -> None:
        try:
            decision = self.pipeline.gate.decide(int(approval_id), allow=allow, by_user=user)
        except (PermissionError, ValueError, LookupError) as exc:
            log.info("approval click refused", instance=self.name, user=user, reason=str(exc))
            return
        self._poster.wake()
        if decision.released:
            self.turns.wake()
        log.info(
            "approval decided",
            instance=self.name,
            approval=approval_id,
            allow=allow,
            by=user,
            released=len(decision.released),
        )

    def _room_control(self, channel: str, effect: Effect) -> None:
        """After a halt or resume committed: cancel or restart this instance's turns there."""
        if effect == "halted":
            self.turns.halt(channel)
        else:
            self.turns.wake()
        self._poster.wake()

    async def _on_resume(self, room: str, user: str) -> None:
        control = self.pipeline.control
        if control is None or not control.is_owner_user(user):
            log.info("resume click refused", instance=self.name, user=user, reason="not an owner")
            return
        with self._shared.store.transaction():
            resumed = control.resume(room, by_user=user)
        if resumed:
            self._room_control(room, "resumed")

    async def _on_budget(self, value: str, allow: bool, user: str) -> None:
        budget = self.turns.budget
        if budget is None or user not in self._shared.owners:
            log.info("budget click refused", instance=self.name, user=user, reason="not an owner")
            return
        if budget.decide(value, allow=allow, by_user=user):
            self._poster.wake()
            self.turns.wake()

    async def _watchdog(self) -> None:
        opts = self._shared.socket
        while True:
            await asyncio.sleep(opts.watchdog_interval)
            client = self.handler.client
            idle = time.monotonic() - self.last_envelope
            connected = await client.is_connected()
            if connected and idle < opts.idle_reconnect:
                continue
            reason = "socket not connected" if not connected else "no envelope for too long"
            # An idle refresh is routine (the only cure for a silently dead session);
            # a dropped socket the client did not restore by itself is not.
            level = log.info if connected else log.warning
            level("socket watchdog reconnecting", instance=self.name, reason=reason, idle=round(idle, 1))
            try:
                await client.connect_to_new_endpoint(force=True)
                self.reconnects += 1
                self._touch()
            except Exception as exc:  # keep watching; the next round tries again
                log.warning("socket watchdog reconnect failed", instance=self.name, error=type(exc).__name__)


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel until it is done: Python 3.11's ``wait_for`` swallows a cancel that
    lands as the awaited event fires (gh-86296), and the worker loops here all
    wait on one; a single cancel could leave ``stop`` waiting forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it at exit


def _seed_bolt_authorization(app: AsyncApp, auth_test: AsyncSlackResponse) -> None:
    """Give bolt the ``auth.test`` answer we already have.

    bolt caches it only once its own first call returns, so every envelope of a
    burst that arrives before that (a restart with events queued) calls
    ``auth.test`` itself, each on a fresh HTTP session: measured 11,000 calls and
    +450 MB for 21 instances. ``auth_test_result`` is the middleware's cache; the
    list holding the middleware is private to bolt, hence the defensive lookup
    (``test_restart_with_queued_events_calls_auth_test_once`` guards it).
    """
    middlewares = getattr(app, "_async_middleware_list", [])
    for middleware in middlewares:
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth_test
            return
    log.warning("bolt authorization cache not seeded", reason="middleware not found")


def _teammate(teammates_dir: Path, instance: str) -> Teammate:
    teammate = load_teammate(teammates_dir, instance)
    if teammate.is_default:
        log.warning(
            "teammate missing: using the default persona",
            instance=instance,
            folder=str(teammates_dir / instance),
        )
    return teammate


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
