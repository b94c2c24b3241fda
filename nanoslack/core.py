"""The composition root: what every instance of a fleet is made of, wired in one place.

``FleetCore`` holds what a fleet's instances share, as one ``Services`` value (the
store, the owners, the live A2A configuration, the turn cap, the token ledger, the
metrics), and ``build_instance`` wires one instance's core from it, top to bottom: the
owners' questions, halts and budgets; the room features; the pipeline (room control,
guard, router, gate: ``nanoslack.pipeline``); the turns (``nanoslack.turns``); the
ordered batch worker (``nanoslack.worker``) and the click router (``nanoslack.clicks``).

The Slack edge (``nanoslack.slack``) first learns who the instance is and hands the core
what it asked for (``EdgeParts``: the directory of names, the turns' signals, the lease's
fence); after that the two meet at these objects, nothing more:

- ``InstanceCore.inbox`` (``worker.BatchWorker``): the edge's pump hands it each batch of
  parsed messages, ``take``: into the durable inbox in one commit (the edge acks the
  envelopes only after it returns) and queued in arrival order; ``backlog`` says how far
  behind the core is;
- ``InstanceCore.clicks`` (``clicks.ClickRouter``): an owner's click on one of the core's
  questions (``answer``), a person's click on a feature's button (``ballot``);
- the outbox: the core queues rows, the edge's poster sends them (the fleet wakes it
  after every commit that queued one: the store's ``on_queued``).

One message's life, in the order the calls happen: ``inbox.take`` → the worker names
its sender and batches it into ``Pipeline.process_many`` → its ``Outcome`` comes back to
``worker.reactions``: an allowed message wakes the turn scheduler, an owner's halt cancels the
room's turns, a resume restarts them → the scheduler runs a turn → the turn's posts
are outbox rows → the poster sends them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nanoslack import tracing
from nanoslack.a2a import A2APolicy, install_a2a_policy
from nanoslack.agents import (
    Agent,
    CommandAgent,
    ToolResult,
    build_agent,
    make_http_client,
)
from nanoslack.agents.teammates import SKILLS_DIRNAME, Roster, TeammateSource
from nanoslack.asks import OwnerAsks
from nanoslack.budgets import Budgets, StoreLedger
from nanoslack.clicks import ClickRouter
from nanoslack.config import ConfigError, Settings
from nanoslack.config.agent import daily_tokens, daily_usd
from nanoslack.control import RoomControl
from nanoslack.features import Clock, MemoryFeature, RoomFeature
from nanoslack.gate import Gate
from nanoslack.guard import BotInboundGuard
from nanoslack.halts import Halts
from nanoslack.home import HomeSource, Spending
from nanoslack.inbound import Identity, bot_sender_id
from nanoslack.logs import get_logger
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.pipeline import Pipeline
from nanoslack.replies import MAX_CHARS, STREAM_MAX_CHARS
from nanoslack.rounds import RoundsFeature, warn_chiefless
from nanoslack.router import Router
from nanoslack.routines.feature import RoutinesFeature
from nanoslack.services import Services, TurnOptions
from nanoslack.shutdown import Shutdown, cancel
from nanoslack.store import Store
from nanoslack.team import TeamFeature
from nanoslack.tools import McpTools, ToolApprover, Toolboxes
from nanoslack.tools.approvals import OwnerToolApprover
from nanoslack.tools.ask import AskRequest
from nanoslack.tools.mcp import TeammateMcp
from nanoslack.tools.memory import Notes
from nanoslack.tools.serve import HostToolServer
from nanoslack.tools.team import Voters
from nanoslack.turns import RoomDirectory, Transcripts, TurnRecorder, TurnScheduler
from nanoslack.turns.files import FileSource
from nanoslack.turns.scheduler import TurnsClosed
from nanoslack.turns.signals import TurnSignals
from nanoslack.turns.slot import TurnSlot
from nanoslack.turns.viewing import viewing_notes
from nanoslack.worker import (
    QUEUE_GRACE_S,
    BatchWorker,
    FleetBacklog,
    NameResolver,
    Observers,
    OnOutcome,
    OnPending,
    reactions,
)

__all__ = [
    "STOP_GRACE_S",
    "Directory",
    "EdgeParts",
    "FleetCore",
    "InstanceCore",
    "Observers",
    "OnOutcome",
    "OnPending",
    "build_instance",
    "build_turns",
]

log = get_logger(__name__)

# A stop without a signal's grace (a lost lease): turns under way get this long.
STOP_GRACE_S = 2.0


class Directory(NameResolver, RoomDirectory, Protocol):
    """What the edge tells the core about people: sender names, room members."""


@dataclass(frozen=True)
class EdgeParts:
    """What the edge hands the core once Slack said who the instance is."""

    directory: Directory
    signals: TurnSignals | None = None
    # Several hosts (docs/operations.md): whether this process still holds the lease.
    fence: Callable[[], bool] | None = None
    # Who is in a room, for votes (``tools.team.Voters``); None: votes wait for nobody named.
    voters: Voters | None = None
    # The files messages carry, downloaded for the turns (docs/agents.md "Files"); None:
    # a turn sees only their ``[file: name]`` words.
    files: FileSource | None = None


class InstanceCore:
    """Everything that happens to what one instance hears, built by ``build_instance``.
    The edge hands ``inbox`` each batch of events and ``clicks`` people's clicks."""

    def __init__(
        self,
        identity: Identity,
        agent: Agent,
        *,
        store: Store,
        teammates_dir: Path,
        home: HomeSource,
        halts: Halts,
        pipeline: Pipeline,
        worker: BatchWorker,
        clicks: ClickRouter,
        turns: TurnScheduler,
        mcp: TeammateMcp,
        tool_approvals: OwnerToolApprover,
        clocks: Mapping[str, Clock],
        tally: Tally,
        wake_teammate: Callable[[str], None] | None = None,
    ) -> None:
        self.identity = identity
        self.name = identity.instance
        self.agent = agent
        self.store = store
        self.teammates_dir = teammates_dir
        # What its Home tab shows (the edge publishes it: ``nanoslack.slack.home``).
        self.home = home
        self.halts = halts
        self._pipeline = pipeline
        self._turns = turns
        self.mcp = mcp
        self.tool_approvals = tool_approvals
        # The edge's two handshakes: events in, clicks in.
        self.inbox = worker
        self.clicks = clicks
        self._clocks = dict(clocks)
        self._tally = tally
        # Wakes a teammate's turns (this process's), for a handoff the edge delivered: a
        # routine's, when the poster sent the run's post (docs/routines.md).
        self.wake_teammate: Callable[[str], None] = wake_teammate or (lambda _name: None)
        self._tasks: list[asyncio.Task[None]] = []

    def wake(self) -> None:
        """Something for this instance's turns committed elsewhere (a sibling's handoff)."""
        self._turns.wake()

    async def answer_ask(self, request: AskRequest) -> ToolResult:
        """A sibling's ``ask_agent`` (docs/agents.md "Asking a teammate"): a turn of this
        instance answers it, on the asking turn's task."""
        return await self._turns.asked.answer(request)

    def held_rooms(self) -> frozenset[str]:
        """Rooms whose agents' replies wait (halted), for the edge's poster."""
        return self.halts.rooms()

    # -- its life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the MCP servers; resume what a previous run left open; then the worker,
        the turns and the clocks run."""
        await self.mcp.start()
        self.inbox.start()
        self._turns.recover()
        self._tasks = [
            asyncio.create_task(self._turns.run(), name=f"{self.name}-turns"),
            *(asyncio.create_task(c.run(), name=f"{self.name}-{what}") for what, c in self._clocks.items()),
        ]

    async def stop(self, shutdown: Shutdown | None = None) -> TurnsClosed:
        """Let the worker finish what is queued (it is already acked) and the turns under
        way record their replies, within the stop's grace; what does not finish runs
        again at the next start (the inbox and the turn rows say where it was)."""
        shutdown = shutdown or Shutdown(grace=STOP_GRACE_S)
        self._turns.stop_starting()
        drained = self.inbox.drained()
        closed = await self._turns.close(shutdown)
        await shutdown.wait({drained}, shutdown.remaining(at_least=QUEUE_GRACE_S))
        drained.cancel()
        await self.inbox.stop()
        for task in self._tasks:
            await cancel(task)
        await self.mcp.stop()
        return closed


def build_instance(identity: Identity, agent: Agent, services: Services, edge: EdgeParts) -> InstanceCore:
    """One instance's core, wired in the order a message meets it."""
    store, name = services.store, identity.instance
    tally = services.metrics.tally(name)
    # The owners' questions, the halts and the token budgets every stage below consults.
    asks = OwnerAsks(store, instance=name, owners=services.owners)
    halts = Halts(store)
    budgets = Budgets(store, asks, room_tokens=services.room_tokens, room_usd=services.room_usd)
    # The teammate's MCP servers, and the owners' Allow for its guarded tools (docs/agents.md).
    mcp = TeammateMcp.for_instance(services.teammates_dir, name, services.setting, services.tools)
    tool_approvals = OwnerToolApprover(store, asks, timeout=services.tools.approval_timeout)
    # The room features (``nanoslack.features``), registered in one list: the turns, the
    # recorder, room control and the clicks ask each of them, in this order.
    notes = Notes(name, store, services.tools.memory, services.owners, bot_sender=services.bot_sender)
    features: list[RoomFeature] = [
        RoundsFeature(store, instance=name, chief=services.tools.chief),
        MemoryFeature(notes),
        TeamFeature(store, identity, services.tools.team, voters=edge.voters, wake=services.wake),
        RoutinesFeature(
            store,
            identity,
            teammates_dir=services.teammates_dir,
            owners=services.owners,
            halts=halts,
            wake=lambda: turns.wake(),
            tz=services.tz,
            max_steps=services.tools.max_steps(name),
            is_member=getattr(edge.directory, "is_member", None),
            used_today=functools.partial(services.ledger.used_today, name) if services.ledger else None,
            daily_cap=services.daily_tokens(name),
            fence=edge.fence,
            tally=tally,
            tick=services.turns.clock_tick,
            clock=services.turns.clock_time,
            # Routines an agent sets follow its self notes' write rule (docs/routines.md).
            may_write_self=lambda turn, msgs: notes.context(turn, msgs).trusted,
        ),
        *services.extra_features(identity),
    ]
    # Room control, guard, router and gate, in one transaction per batch (``nanoslack.pipeline``).
    pipeline = build_pipeline(
        identity,
        services,
        asks=asks,
        halts=halts,
        features=features,
        fence=edge.fence,
        discard_files=edge.files.discard if edge.files is not None else None,
    )
    turns = build_turns(
        identity,
        agent,
        services,
        directory=edge.directory,
        signals=edge.signals,
        files=edge.files,
        halts=halts,
        budgets=budgets,
        features=features,
        mcp=mcp,
        approver=tool_approvals,
        tally=tally,
    )
    # The instance's inbox: the edge's one call per batch of events, and the ordered
    # worker that names the senders (the edge's directory) and runs the pipeline.
    worker = BatchWorker(
        name,
        pipeline,
        react=reactions(turns, services.observers, name),
        backlog=services.backlog,
        tally=tally,
        names=edge.directory,
    )
    clicks = ClickRouter(
        name,
        asks=asks,
        pipeline=pipeline,
        budgets=budgets,
        tool_approvals=tool_approvals,
        votes=[feature.click for feature in features],
        wake=turns.wake,
        turns=turns,
        store=store,
        tally=tally,
    )
    return InstanceCore(
        identity,
        agent,
        store=store,
        teammates_dir=services.teammates_dir,
        home=_home(services, asks, halts),
        halts=halts,
        pipeline=pipeline,
        worker=worker,
        clicks=clicks,
        turns=turns,
        mcp=mcp,
        tool_approvals=tool_approvals,
        clocks={what: clock for feature in features for what, clock in feature.clocks().items()},
        tally=tally,
        wake_teammate=services.wake,
    )


def _home(services: Services, asks: OwnerAsks, halts: Halts) -> HomeSource:
    """What the instance's Home tab shows its owners (docs/agent-surface.md)."""
    name, ledger, dollars = asks.instance, services.ledger, services.dollars
    spending = Spending(
        tokens_today=functools.partial(ledger.used_today, name) if ledger else lambda: 0,
        usd_today=functools.partial(dollars.usd_today, name) if dollars else lambda: 0.0,
        token_cap=services.daily_tokens(name),
        usd_cap=services.daily_usd(name),
    )
    return HomeSource(services.store, asks, halts, teammates_dir=services.teammates_dir, spending=spending)


def build_pipeline(
    identity: Identity,
    services: Services,
    *,
    asks: OwnerAsks,
    halts: Halts,
    features: Sequence[RoomFeature],
    fence: Callable[[], bool] | None = None,
    discard_files: Callable[[Sequence[str]], None] | None = None,
) -> Pipeline:
    """Room control, guard with the A2A policy installed, router and gate for one instance,
    from the services and the parts its core shares with the turns: the owners' questions
    (``asks``), the halts, the room features (in the order the stages ask them)."""
    store, instance = services.store, identity.instance
    guard = BotInboundGuard(instance)
    control = RoomControl(store, asks, halts, features=features)
    policy = A2APolicy(
        instance=instance,
        config=services.a2a_config,
        ledger=store.hops,
        scope=services.hop_scope,
        on_limit=control.hop_limit_reached,
        team_id=identity.team_id,
    )
    install_a2a_policy(guard, policy)
    return Pipeline(
        identity=identity,
        store=store,
        control=control,
        guard=guard,
        router=Router(store, instance=instance, bot_user_id=identity.bot_user_id, features=features),
        gate=Gate(store, asks),
        features=features,
        fence=fence,
        discard_files=discard_files,
    )


def build_turns(
    identity: Identity,
    agent: Agent,
    services: Services,
    *,
    directory: RoomDirectory,
    halts: Halts,
    signals: TurnSignals | None = None,
    budgets: Budgets | None = None,
    features: Sequence[RoomFeature] = (),
    mcp: McpTools | None = None,
    approver: ToolApprover | None = None,
    tally: Tally | None = None,
    files: FileSource | None = None,
) -> TurnScheduler:
    """One instance's turn stage: scheduler, transcripts, each turn's toolbox, recorder."""
    store, instance, tools, owners = services.store, identity.instance, services.tools, services.owners
    skills_dir = services.teammates_dir / SKILLS_DIRNAME
    teammate = TeammateSource(services.teammates_dir, instance)
    teammate.get()  # read now: a missing or malformed persona is warned about at start
    transcripts = Transcripts(
        identity=identity,
        store=store,
        teammate=teammate,
        skills_dir=skills_dir,
        directory=directory,
        notes=[*(feature.notes for feature in features), viewing_notes(store)],
        history_chars=tools.memory.history_chars,
        owners=owners,
        remembers=getattr(agent, "remembers", True),
        files=files,
        roster=Roster(services.teammates_dir, tools.teammates_of(instance)),
    )
    return TurnScheduler(
        services,
        instance=instance,
        agent=agent,
        transcripts=transcripts,
        recorder=TurnRecorder(
            services,
            identity=identity,
            halts=halts,
            features=features,
            budget=budgets.instance if budgets else None,
            memory=transcripts.memory,
            tally=tally,
        ),
        toolboxes=Toolboxes(
            services,
            instance=instance,
            skills_dir=skills_dir,
            room_budget=budgets.room if budgets else None,
            mcp=mcp,
            approver=approver,
            toolsets=[toolset for feature in features for toolset in feature.toolsets()],
            ask=services.ask,
        ),
        halts=halts,
        features=features,
        room_budget=budgets.room if budgets else None,
        signals=signals,
        tally=tally,
        slot=TurnSlot(lambda: teammate.get().serial),
    )


class FleetCore:
    """What a fleet's instances share (``services``), and the one place each instance's
    core is built (``instance``)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        siblings: Callable[[], Mapping[str, str]],
        turns: TurnOptions | None = None,
        observers: Observers | None = None,
        metrics: FleetMetrics | None = None,
        backlog: FleetBacklog | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics or FleetMetrics()
        self.a2a = settings.a2a_source()
        self.instances: dict[str, InstanceCore] = {}
        ledger = StoreLedger(store)
        self.services = Services(
            store=store,
            teammates_dir=settings.teammates_dir,
            siblings=siblings,
            limiter=asyncio.Semaphore(settings.max_turns),
            owners=settings.owners,
            hop_scope=settings.hop_scope,
            a2a_config=self.a2a.get,
            room_tokens=settings.room_tokens(),
            room_usd=settings.room_usd(),
            turns=turns or TurnOptions(),
            observers=observers or Observers(),
            tools=settings.tools,
            metrics=self.metrics,
            ledger=ledger,
            daily_tokens=self._daily_tokens,
            dollars=ledger,
            daily_usd=self._daily_usd,
            wake=self._wake,
            ask=self._ask,
            setting=settings.value,
            dm_reply_chars=STREAM_MAX_CHARS if settings.surface.stream else MAX_CHARS,
            bot_sender=self._bot_sender,
            backlog=backlog or FleetBacklog(),
            tz=settings.routine_tz(),
        )
        # One HTTP client for every LLM back end of the fleet (connection reuse).
        self._http = make_http_client()
        # The host tools over MCP for the command agents' processes (docs/agents.md): one
        # endpoint for the fleet, started when a command agent is built, stopped in close.
        self.host_tool_server = HostToolServer()
        # Each turn a trace when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operations.md "Traces").
        self._traced = tracing.configure(settings.value)

    def _daily_tokens(self, instance: str) -> int | None:
        try:
            return daily_tokens(self.settings.value, instance)
        except ConfigError:
            return None  # agent_for refused the instance already, naming the key

    def _daily_usd(self, instance: str) -> float | None:
        try:
            return daily_usd(self.settings.value, instance)
        except ConfigError:
            return None  # as for the token cap

    def _bot_sender(self, instance: str) -> str | None:
        """A fleet instance this process runs, as its messages name it (``slack:bot:B…``);
        None for one run elsewhere."""
        core = self.instances.get(instance)
        return bot_sender_id(core.identity.bot_id) if core and core.identity.bot_id else None

    def _wake(self, instance: str) -> None:
        core = self.instances.get(instance)
        if core is not None:
            core.wake()

    async def _ask(self, request: AskRequest) -> ToolResult:
        """An ask reaches a teammate this process runs. One another process runs (several
        hosts) is refused, saying so: its turn could not be waited on, nor cancelled, from here."""
        core = self.instances.get(request.to)
        if core is None:
            reason = (
                f"not asked: {request.to} runs in another process (several hosts), and an ask reaches "
                "only a teammate run here; hand the work over with send_to_agent in a group conversation"
            )
            log.info("ask refused", instance=request.asker, to=request.to, reason=reason)
            return ToolResult(reason, is_error=True)
        return await core.answer_ask(request)

    def agent_for(self, name: str) -> Agent | None:
        """The instance's back end; None (logged, with the key to fix) when it has none."""
        try:
            agent = build_agent(
                self.settings.value,
                name,
                http=self._http,
                teammates_dir=self.settings.teammates_dir,
                mcp=self.host_tool_server,
            )
        except ConfigError as exc:
            log.error("instance skipped: agent not configured", instance=name, error=str(exc))
            return None
        if isinstance(agent, CommandAgent):
            self.host_tool_server.serve_soon()
        return agent

    def instance(self, identity: Identity, agent: Agent, edge: EdgeParts) -> InstanceCore:
        """The instance's core, from what the edge learnt of it (``EdgeParts``)."""
        core = build_instance(identity, agent, self.services, edge)
        self.instances[identity.instance] = core
        return core

    def check_rooms(self) -> None:
        """At start: what the rooms' settings cannot do as configured (a round room whose
        chief is missing runs its rounds without the close)."""
        warn_chiefless(self.store.room_kinds.list(), self.settings.tools.chief)

    async def close(self) -> None:
        await self.host_tool_server.stop()
        await self._http.aclose()
        if self._traced:
            self._traced = False
            await asyncio.to_thread(tracing.shutdown)  # exports the spans still held
