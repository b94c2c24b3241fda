"""The composition root: what every instance of a fleet is made of, wired in one place.

``FleetCore`` holds what a fleet's instances share (the store, the owners, the live A2A
configuration, the turn cap, the LLM client and token ledger) and builds each
instance's ``InstanceCore``. An ``InstanceCore`` is everything that happens to what the
instance hears, from the durable inbox to the outbox: room control, guard, router and
gate (the pipeline), the owner asks, the budgets and the turns.

The Slack edge (``nanoslack.slack``) and the core meet at five points, nothing more:

- ``record(msgs)``: a batch of parsed messages into the durable inbox (the edge acks
  the envelopes only after this returns);
- ``submit(msg)``: a recorded message to process, in arrival order;
- ``answer(answer)``: an owner's click on one of the core's questions;
- ``ballot(click)``: a person's click on a vote's button (``nanoslack.team``);
- the outbox: the core queues rows, the edge's poster sends them (it is woken after
  every commit that queued one: ``Store.outbox.subscribe``).

One message's life, in the order the calls happen: ``record`` → ``submit`` → the
worker (``_work``) batches it into ``Pipeline.process_many`` → its ``Outcome`` comes
back to ``_react``: an allowed message wakes the turn scheduler, an owner's halt
cancels the room's turns, a resume restarts them → the scheduler runs a turn
(``nanoslack.turns``) → the turn's posts are outbox rows → the poster sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nanoslack import failpoints
from nanoslack.agents import (
    Agent,
    CommandAgent,
    Teammate,
    TokenLedger,
    build_agent,
    daily_tokens,
    load_teammate,
    make_http_client,
)
from nanoslack.agents.teammates import SKILLS_DIRNAME
from nanoslack.asks import APPROVAL, BUDGET, HALT, TOOL, Answer, NotAnOwner, OwnerAsks
from nanoslack.budgets import Budgets, StoreLedger
from nanoslack.config import A2AConfig, ConfigError, Settings, ToolSettings
from nanoslack.config.values import time_zone, warn_malformed
from nanoslack.control import Halts
from nanoslack.inbound import Identity, Inbound, InboxKey, bot_sender_id
from nanoslack.logs import get_logger
from nanoslack.metrics import FleetMetrics, Tally
from nanoslack.pipeline import NameResolver, Outcome, build_pipeline
from nanoslack.replies import MAX_CHARS, STREAM_MAX_CHARS
from nanoslack.rounds import RoundKeeper, warn_chiefless
from nanoslack.routines import spec as routine_spec
from nanoslack.routines.clock import RoutineClock, RunQueue
from nanoslack.routines.runner import RoutineTurns
from nanoslack.routines.tools import RoutineToolset
from nanoslack.shutdown import Shutdown, cancel
from nanoslack.store import Store, store_unavailable
from nanoslack.store.outage import StoreOutage
from nanoslack.team import Team, VoteClick
from nanoslack.tools import McpTools, ToolApprover, Toolboxes
from nanoslack.tools.approvals import OwnerToolApprover
from nanoslack.tools.mcp import TeammateMcp
from nanoslack.tools.memory import Notes
from nanoslack.tools.serve import HostToolServer
from nanoslack.tools.team import Voters
from nanoslack.turns import RoomDirectory, Transcripts, TurnOptions, TurnRecorder, TurnScheduler
from nanoslack.turns.scheduler import TurnsClosed
from nanoslack.turns.signals import Presence
from nanoslack.turns.viewing import viewing_notes

log = get_logger(__name__)

# Messages processed in one transaction at most: enough to amortise a commit,
# small enough that a burst does not delay the first reply.
MAX_BATCH = 64
# A failed message still open in the inbox is tried again after this long.
RETRY_DELAY_S = 1.0
# A stop without a signal's grace (a lost lease): turns under way get this long.
STOP_GRACE_S = 2.0
# What the worker has queued (acked already) may finish within this long, grace or not.
QUEUE_GRACE_S = 5.0
# Turns wait while the fleet's pipelines have more than this many recorded messages
# to process, for at most TURN_YIELD_MAX_S (then they run anyway: no starvation).
TURN_YIELD_BACKLOG = 64
TURN_YIELD_MAX_S = 1.0
TURN_YIELD_POLL_S = 0.005
# While a socket has envelopes read and not acked, turns wait at most this long for it.
TURN_YIELD_SOCKET_MAX_S = 0.05

OnPending = Callable[[Inbound], None]
OnOutcome = Callable[[Inbound, Outcome], None]


class Directory(NameResolver, RoomDirectory, Protocol):
    """What the edge tells the core about people: sender names, room members."""


@dataclass(frozen=True)
class Observers:
    """Watch what the instances decide (tests, the playground): never change it."""

    on_pending: OnPending | None = None
    on_outcome: OnOutcome | None = None


@dataclass(frozen=True)
class CoreConfig:
    """What every instance's core shares, read once from the settings."""

    owners: tuple[str, ...]
    hop_scope: str
    a2a_config: Callable[[], A2AConfig]
    teammates_dir: Path
    room_tokens: int | None
    # Fleet-wide cap on agent calls running at once (NANOSLACK_MAX_TURNS).
    limiter: asyncio.Semaphore
    # Every running instance: name → bot user id (``@name`` → ``<@U…>`` in replies).
    siblings: Callable[[], Mapping[str, str]]
    turns: TurnOptions = field(default_factory=TurnOptions)
    observers: Observers = field(default_factory=Observers)
    tools: ToolSettings = field(default_factory=ToolSettings)
    # The LLM back ends' token ledger, and each instance's daily cap (None: unlimited).
    ledger: TokenLedger | None = None
    daily_tokens: Callable[[str], int | None] = lambda _instance: None
    # Wakes the turns of a sibling this process runs (a handoff to it committed).
    wake: Callable[[str], None] = lambda _instance: None
    # The fleet's merged settings view: what ``${VAR}`` in an MCP config reads.
    setting: Callable[[str], str | None] = lambda _key: None
    # How long one DM reply may be before it is split: a streamed one is one message of
    # up to Slack's stream limit (NANOSLACK_STREAM, docs/agent-surface.md).
    dm_reply_chars: int = MAX_CHARS
    backlog: FleetBacklog = field(default_factory=lambda: FleetBacklog())
    # The users.id of a chain room's lead (None elsewhere): who may ask for lasting notes.
    lead_of: Callable[[str], str | None] = lambda _channel: None
    # NANOSLACK_TZ: the zone routines' cron schedules are read in (docs/routines.md).
    tz: dt.tzinfo = dt.UTC


class FleetBacklog:
    """Recorded messages every instance's pipeline has still to process.

    A burst is where agent work and envelope work meet: turns that run while the
    pipelines are behind take the CPU the sockets and pipelines need, and acks wait.
    So a turn waits for the backlog to fall (``yield_to``), at most ``TURN_YIELD_MAX_S``,
    and the burst's turns run once it is in (docs/architecture.md)."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[Any]] = []
        # The edge's sockets: each says whether it has read envelopes not acked yet.
        self._sockets: list[Callable[[], bool]] = []

    def add(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.append(queue)

    def remove(self, queue: asyncio.Queue[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def watch(self, socket_busy: Callable[[], bool]) -> Callable[[], None]:
        """Turns also wait while a socket has work (envelopes read, not acked yet);
        returns what stops watching it."""
        self._sockets.append(socket_busy)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._sockets.remove(socket_busy)

        return unwatch

    def size(self) -> int:
        return sum(q.qsize() for q in self._queues)

    def behind(self, *, sockets: bool = True) -> bool:
        if self.size() > TURN_YIELD_BACKLOG:
            return True
        return sockets and any(busy() for busy in self._sockets)

    async def yield_to(self) -> None:
        if not self.behind():
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        # A socket's batch is acked within milliseconds: waiting longer for a socket
        # that is never idle (a steady stream) would only delay every turn.
        while self.behind(sockets=loop.time() < start + TURN_YIELD_SOCKET_MAX_S):  # noqa: ASYNC110 — a poll, bounded; the queues have no "fell below" signal
            if loop.time() >= start + TURN_YIELD_MAX_S:
                return
            await asyncio.sleep(TURN_YIELD_POLL_S)


class InstanceCore:
    def __init__(
        self,
        identity: Identity,
        store: Store,
        agent: Agent,
        config: CoreConfig,
        *,
        directory: Directory,
        presence: Presence | None = None,
        fence: Callable[[], bool] | None = None,
        tally: Tally | None = None,
    ) -> None:
        self.identity = identity
        self.name = identity.instance
        self.store = store
        self.agent = agent
        self.teammates_dir = config.teammates_dir
        self.tally = tally or Tally()
        self._observers = config.observers
        self.asks = OwnerAsks(store, instance=self.name, owners=config.owners)
        self.halts = Halts(store)
        self.budgets = Budgets(store, self.asks, room_tokens=config.room_tokens)
        # The teammate's MCP servers, and the owners' Allow for its guarded tools (docs/agents.md).
        self.mcp = TeammateMcp.for_instance(config.teammates_dir, self.name, config.setting, config.tools)
        self.tool_approvals = OwnerToolApprover(store, self.asks, timeout=config.tools.approval_timeout)
        # Team rooms (docs/team-rooms.md): the board, votes, directives, and the clock behind them.
        self.team = Team(
            store,
            identity,
            config.tools.team,
            voters=directory if isinstance(directory, Voters) else None,
            wake=config.wake,
        )
        # Routines (docs/routines.md): the clock claims due times, the turns run them.
        routine_queue = RunQueue()
        self.routine_turns = RoutineTurns(
            store, self.name, routine_queue, owners=config.owners, tally=self.tally
        )
        self.routine_clock = RoutineClock(
            store,
            self.name,
            path=routine_spec.routines_path(config.teammates_dir, self.name),
            load=functools.partial(_load_routines, config, identity, directory),
            queue=routine_queue,
            halts=self.halts,
            owners=config.owners,
            used_today=functools.partial(config.ledger.used_today, self.name) if config.ledger else None,
            daily_cap=config.daily_tokens(self.name),
            wake=lambda: self.turns.wake(),
            fence=fence,
            tally=self.tally,
            tick=config.turns.routine_tick,
            clock=config.turns.routine_time,
        )
        self.pipeline = build_pipeline(
            identity,
            store,
            a2a_config=config.a2a_config,
            hop_scope=config.hop_scope,
            asks=self.asks,
            halts=self.halts,
            chief=config.tools.chief,
            names=directory,
            fence=fence,
        )
        self.turns = build_turns(
            identity,
            store,
            agent,
            teammate=_teammate(config.teammates_dir, self.name),
            skills_dir=config.teammates_dir / SKILLS_DIRNAME,
            directory=directory,
            siblings=config.siblings,
            limiter=config.limiter,
            owners=config.owners,
            tools=config.tools,
            ledger=config.ledger,
            daily_tokens=config.daily_tokens(self.name),
            halts=self.halts,
            budgets=self.budgets,
            presence=presence,
            on_handoff=config.wake,
            rounds=self.pipeline.rounds,
            options=config.turns,
            mcp=self.mcp,
            approver=self.tool_approvals,
            tally=self.tally,
            team=self.team,
            yield_to=config.backlog.yield_to,
            lead_of=config.lead_of,
            dm_reply_chars=config.dm_reply_chars,
            routines=self.routine_turns,
        )
        # Each message with whether it is to be checked before it is processed: still
        # open in the inbox, and not already in its batch (see ``_to_process``).
        self._queue: asyncio.Queue[tuple[Inbound, bool]] = asyncio.Queue()
        self._outage = StoreOutage("pipeline", instance=self.name)
        self._fleet_backlog = config.backlog
        config.backlog.add(self._queue)
        self._tasks: list[asyncio.Task[None]] = []
        # What the edge's pump recorded: batches (one commit each) and messages.
        self.inbox_batches = 0
        self.inbox_records = 0
        # Bound once: a bound logger's filtered levels are no-ops, and the worker
        # logs a debug line for every message.
        self._log = log.bind(instance=self.name)

    # -- what the edge calls ---------------------------------------------------------------

    def record(self, msgs: Sequence[Inbound]) -> list[bool]:
        """Into the durable inbox, in one commit, before the edge acks; False for a
        duplicate (a Slack retry, an ``app_mention`` twin). Raises when the store cannot
        take them: the edge then leaves them unacked for Slack to redeliver."""
        fresh = self.pipeline.accept_many(msgs)
        self.inbox_batches += 1
        self.inbox_records += len(msgs)
        failpoints.hit("inbox.recorded", len(msgs))
        return fresh

    def submit(self, msg: Inbound, *, recheck: bool = False) -> None:
        """A recorded message, to be processed after those submitted before it.
        ``recheck``: it may have been submitted already, or processed (a "duplicate" the
        edge got back from a write it tried again after a commit was cut off, which may
        have been its own); it is processed only if still open and not submitted before."""
        self._queue.put_nowait((msg, recheck))

    def backlog(self) -> int:
        """Recorded messages not processed yet (the edge stops reading past a bound)."""
        return self._queue.qsize()

    async def answer(self, answer: Answer) -> None:
        """An owner's click on one of this instance's questions (``nanoslack.asks``)."""
        kind = answer.kind
        if kind is None:
            return
        try:
            self.asks.authorize(answer.by_user)
        except NotAnOwner:
            log.info(
                f"{kind.label} click refused", instance=self.name, user=answer.by_user, reason="not an owner"
            )
            return
        if kind is APPROVAL:
            self._decide_approval(answer)
        elif kind is HALT:
            with self.store.transaction():
                resumed = self.pipeline.control.resume(answer.ref, by_user=answer.by_user)
            if resumed:
                self.turns.wake()
        elif kind is BUDGET and self.budgets.answer(
            answer.ref, allow=answer.choice == "budget_allow", by_user=answer.by_user
        ):
            self.turns.wake()
        elif kind is TOOL:
            self.tool_approvals.answer(answer)

    async def ballot(self, click: VoteClick) -> None:
        """A person's click on one of a vote's buttons (any human in the room may answer;
        a second click replaces the first)."""
        if self.team.click(click):
            log.info("vote click", instance=self.name, vote=click.vote_id, user=click.by_user)

    async def start(self) -> None:
        """Start the MCP servers; resume what a previous run left open; then the worker
        and the turns run."""
        await self.mcp.start()
        resumed = self.pipeline.unfinished()
        for msg in resumed:
            self._queue.put_nowait((msg, False))
        if resumed:
            log.info("inbox resumed", instance=self.name, count=len(resumed))
        self.turns.recover()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"{self.name}-worker"),
            asyncio.create_task(self.turns.run(), name=f"{self.name}-turns"),
            asyncio.create_task(self.team.clock.run(), name=f"{self.name}-team-clock"),
            asyncio.create_task(self.routine_clock.run(), name=f"{self.name}-routine-clock"),
        ]

    async def stop(self, shutdown: Shutdown | None = None) -> TurnsClosed:
        """Let the worker finish what is queued (it is already acked) and the turns under
        way record their replies, within the stop's grace; what does not finish runs
        again at the next start (the inbox and the turn rows say where it was)."""
        shutdown = shutdown or Shutdown(grace=STOP_GRACE_S)
        self.turns.stop_starting()
        drained = asyncio.ensure_future(self._queue.join())
        closed = await self.turns.close(shutdown)
        await shutdown.wait({drained}, shutdown.remaining(at_least=QUEUE_GRACE_S))
        drained.cancel()
        for task in self._tasks:
            await cancel(task)
        await self.mcp.stop()
        self._fleet_backlog.remove(self._queue)
        return closed

    # -- one message's way -----------------------------------------------------------------

    async def _work(self) -> None:
        """Messages in arrival order: hop counts, resets and sticky threads depend
        on the order messages happened in. What queued up meanwhile is processed
        as one batch (one commit), which is how the fleet keeps up with a burst."""
        while True:
            items = [await self._queue.get()]
            while len(items) < MAX_BATCH and not self._queue.empty():
                items.append(self._queue.get_nowait())
            batch = [msg for msg, _ in items]
            try:
                batch, outcomes = await self._process(items)
            except Exception as exc:  # process_many handles message failures; this is a bug guard
                log.error("pipeline crashed", instance=self.name, error=f"{type(exc).__name__}: {exc}")
                outcomes = []
            for msg, outcome in zip(batch, outcomes, strict=False):
                self._react(msg, outcome)
            for _ in items:
                self._queue.task_done()
            # A queue that is not empty hands out the next batch without suspending:
            # yield, so the sockets are read and acked between two batches (docs/architecture.md).
            await asyncio.sleep(0)

    async def _process(self, items: list[tuple[Inbound, bool]]) -> tuple[list[Inbound], list[Outcome]]:
        """The batch through the pipeline. While the store cannot take it (a database
        restart, a lost connection, a full disk, a deadlock's victim) the same batch is
        tried again, and nothing queued behind it overtakes it: order matters (hops,
        resets). Before a retry every message is checked (``_to_process``): an attempt
        cut off at its commit may have finished some after all."""
        batch = [msg for msg, _ in items]
        check = [flag for _, flag in items]
        while True:
            try:
                if any(check):
                    batch = self._to_process(batch, check)
                    check = [False] * len(batch)
                outcomes = await self.pipeline.process_many(batch) if batch else []
            except Exception as exc:
                trouble = store_unavailable(exc)
                if trouble is None:
                    raise
                await self._outage.wait(trouble)
                check = [True] * len(batch)
                continue
            self._outage.passed()
            return batch, outcomes

    def _to_process(self, batch: list[Inbound], check: list[bool]) -> list[Inbound]:
        """``batch`` less the checked messages that are finished (parked after failures,
        finished by a commit that was cut off) or that came earlier in the batch. A
        checked copy queued behind an unchecked one is left out the same way once the
        first is processed: messages are processed in the order they were queued."""
        checked = [msg for msg, flag in zip(batch, check, strict=True) if flag]
        still_open = {msg.key for msg in self.pipeline.still_open(checked)}
        seen: set[InboxKey] = set()
        kept: list[Inbound] = []
        for msg, flag in zip(batch, check, strict=True):
            if msg.key in seen or (flag and msg.key not in still_open):
                continue
            seen.add(msg.key)
            kept.append(msg)
        return kept

    def _retry_later(self, msg: Inbound) -> None:
        """A message whose processing failed is queued again, to be checked first: the
        failure may have parked it (``Inbox.note_failure``)."""
        self._queue.put_nowait((msg, True))

    def _react(self, msg: Inbound, outcome: Outcome) -> None:
        """What a committed decision sets going."""
        self._log.debug(
            "message processed", channel=msg.channel, ts=msg.ts, status=outcome.status, reason=outcome.reason
        )
        if outcome.status == "dropped":
            self.tally.hop_drop(outcome.reason)
        if outcome.control == "halted":
            self.turns.halt(msg.channel)
        elif outcome.control == "resumed":
            self.turns.wake()
        if outcome.verdict is not None and outcome.verdict.action == "allow":
            self.turns.wake()
            if self._observers.on_pending is not None:
                self._observers.on_pending(outcome.msg or msg)
        if outcome.status == "failed":
            asyncio.get_running_loop().call_later(RETRY_DELAY_S, self._retry_later, msg)
        if self._observers.on_outcome is not None:
            self._observers.on_outcome(msg, outcome)

    def _decide_approval(self, answer: Answer) -> None:
        try:
            decision = self.pipeline.gate.decide(
                int(answer.ref), allow=answer.choice == "approve", by_user=answer.by_user
            )
        except (PermissionError, ValueError, LookupError) as exc:
            log.info("approval click refused", instance=self.name, user=answer.by_user, reason=str(exc))
            return
        if decision.released:
            self.turns.wake()
        log.info(
            "approval decided",
            instance=self.name,
            approval=answer.ref,
            allow=answer.choice == "approve",
            by=answer.by_user,
            released=len(decision.released),
        )


def build_turns(
    identity: Identity,
    store: Store,
    agent: Agent,
    *,
    teammate: Teammate,
    skills_dir: Path,
    directory: RoomDirectory,
    siblings: Callable[[], Mapping[str, str]],
    limiter: asyncio.Semaphore,
    owners: Sequence[str] = (),
    tools: ToolSettings | None = None,
    ledger: TokenLedger | None = None,
    daily_tokens: int | None = None,
    halts: Halts | None = None,
    budgets: Budgets | None = None,
    presence: Presence | None = None,
    on_handoff: Callable[[str], None] | None = None,
    rounds: RoundKeeper | None = None,
    options: TurnOptions | None = None,
    mcp: McpTools | None = None,
    approver: ToolApprover | None = None,
    tally: Tally | None = None,
    team: Team | None = None,
    yield_to: Callable[[], Awaitable[None]] | None = None,
    lead_of: Callable[[str], str | None] = lambda _channel: None,
    dm_reply_chars: int = MAX_CHARS,
    routines: RoutineTurns | None = None,
) -> TurnScheduler:
    """One instance's turn stage: scheduler, transcripts, each turn's toolbox, recorder."""
    halts = halts or Halts(store)
    tools = tools or ToolSettings()
    instance = identity.instance
    notes = Notes(instance, store, tools.memory, tuple(owners), lead_of=lead_of)
    transcripts = Transcripts(
        identity=identity,
        store=store,
        teammate=teammate,
        skills_dir=skills_dir,
        directory=directory,
        notes=[*([rounds.notes] if rounds else []), *([team.notes] if team else []), viewing_notes(store)],
        history_chars=tools.memory.history_chars,
        owners=owners,
        remembers=getattr(agent, "remembers", True),
    )
    return TurnScheduler(
        instance=instance,
        store=store,
        agent=agent,
        transcripts=transcripts,
        recorder=TurnRecorder(
            instance=instance,
            store=store,
            halts=halts,
            siblings=siblings,
            budget=budgets.instance if budgets else None,
            owners=owners,
            bot_id=identity.bot_id,
            allow_broadcast=tools.allow_broadcast,
            on_handoff=on_handoff,
            on_recorded=rounds.turn_recorded if rounds else None,
            tally=tally,
            appliers=[notes.apply, *([team.apply] if team else [])],
            memory=transcripts.memory,
            dm_reply_chars=dm_reply_chars,
        ),
        toolboxes=Toolboxes(
            instance=instance,
            store=store,
            settings=tools,
            skills_dir=skills_dir,
            owners=tuple(owners),
            ledger=ledger,
            daily_tokens=daily_tokens,
            room_budget=budgets.room if budgets else None,
            mcp=mcp,
            approver=approver,
            toolsets=[
                notes.tools,
                *([team.tools] if team else []),
                RoutineToolset.factory(store, instance, tuple(owners)),
            ],
        ),
        limiter=limiter,
        halts=halts,
        room_budget=budgets.room if budgets else None,
        presence=presence,
        rounds=rounds,
        wake_instance=on_handoff,
        options=options,
        tally=tally,
        yield_to=yield_to,
        routines=routines,
    )


async def _load_routines(
    config: CoreConfig, identity: Identity, directory: Directory
) -> routine_spec.RoutineFile:
    """The instance's routines file, with the routines whose conversation the bot is not in
    turned into problems (asking Slack, when the directory can)."""
    path = routine_spec.routines_path(config.teammates_dir, identity.instance)
    loaded = routine_spec.load(
        path, identity.instance, tz=config.tz, max_steps=config.tools.max_steps(identity.instance)
    )
    is_member = getattr(directory, "is_member", None)

    async def member_of(channel: str) -> bool | None:
        if is_member is None:
            return None
        answer: bool | None = await is_member(channel, identity.bot_user_id)
        return answer

    return await routine_spec.check_channels(loaded, member_of, owners=config.owners)


class FleetCore:
    """What a fleet's instances share, and the one place each instance's core is built."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        siblings: Callable[[], Mapping[str, str]],
        turns: TurnOptions | None = None,
        observers: Observers | None = None,
        metrics: FleetMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics or FleetMetrics()
        self.a2a = settings.a2a_source()
        self._ledger = StoreLedger(store)
        self.instances: dict[str, InstanceCore] = {}
        self.config = CoreConfig(
            owners=settings.owners,
            hop_scope=settings.hop_scope,
            a2a_config=self.a2a.get,
            teammates_dir=settings.teammates_dir,
            room_tokens=room_tokens(settings),
            limiter=asyncio.Semaphore(settings.max_turns),
            siblings=siblings,
            turns=turns or TurnOptions(),
            observers=observers or Observers(),
            tools=settings.tools,
            ledger=self._ledger,
            daily_tokens=self._daily_tokens,
            wake=self._wake,
            setting=settings.value,
            lead_of=self._lead_of,
            dm_reply_chars=STREAM_MAX_CHARS if settings.surface.stream else MAX_CHARS,
            tz=routine_tz(settings),
        )
        # One HTTP client for every LLM back end of the fleet (connection reuse).
        self._http = make_http_client()
        # The host tools over MCP for the command agents' processes (docs/agents.md): one
        # endpoint for the fleet, started when a command agent is built, stopped in close.
        self.host_tool_server = HostToolServer()
        self._host_tool_server_start: asyncio.Task[None] | None = None

    def _daily_tokens(self, instance: str) -> int | None:
        try:
            return daily_tokens(self.settings.value, instance)
        except ConfigError:
            return None  # agent_for refused the instance already, naming the key

    def _lead_of(self, channel: str) -> str | None:
        """The chain room's lead as its messages name it (``slack:bot:B…``), when this
        process runs the lead (a lead run elsewhere is not trusted with lasting notes)."""
        room = self.store.room_kinds.get(channel)
        if room is None or room.kind != "chain" or not room.lead:
            return None
        lead = self.instances.get(room.lead)
        return bot_sender_id(lead.identity.bot_id) if lead and lead.identity.bot_id else None

    def _wake(self, instance: str) -> None:
        core = self.instances.get(instance)
        if core is not None:
            core.turns.wake()

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
            self._serve_mcp()
        return agent

    def _serve_mcp(self) -> None:
        """The MCP endpoint starts with the fleet, not in its first command turn."""
        if self._host_tool_server_start is not None:
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the first turn starts it
            self._host_tool_server_start = asyncio.get_running_loop().create_task(
                self.host_tool_server.warm(), name="mcp-warm"
            )

    def instance(
        self,
        identity: Identity,
        agent: Agent,
        *,
        directory: Directory,
        presence: Presence | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> InstanceCore:
        core = InstanceCore(
            identity,
            self.store,
            agent,
            self.config,
            directory=directory,
            presence=presence,
            fence=fence,
            tally=self.metrics.tally(identity.instance),
        )
        self.instances[identity.instance] = core
        return core

    def check_rooms(self) -> None:
        """At start: what the rooms' settings cannot do as configured (a round room whose
        chief is missing runs its rounds without the close)."""
        warn_chiefless(self.store.room_kinds.list(), self.settings.tools.chief)

    async def close(self) -> None:
        if self._host_tool_server_start is not None:
            await self._host_tool_server_start  # warm() never raises
        await self.host_tool_server.stop()
        await self._http.aclose()


def routine_tz(settings: Settings) -> dt.tzinfo:
    """NANOSLACK_TZ (default UTC); an unknown zone is UTC, with a warning naming the key."""
    tz, problem = time_zone(settings.value("NANOSLACK_TZ"))
    if problem:
        log.warning("malformed setting", key="NANOSLACK_TZ", problem=problem)
    return tz


def room_tokens(settings: Settings) -> int | None:
    """NANOSLACK_ROOM_TOKENS: unset → unlimited; not an integer > 0 → unlimited, with a warning."""
    raw = (settings.value("NANOSLACK_ROOM_TOKENS") or "").strip()
    if not raw:
        return None
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    warn_malformed(log, "NANOSLACK_ROOM_TOKENS", raw, "an integer > 0", "unlimited")
    return None


def _teammate(teammates_dir: Path, instance: str) -> Teammate:
    teammate = load_teammate(teammates_dir, instance)
    if teammate.is_default:
        log.warning(
            "teammate missing: using the default persona",
            instance=instance,
            folder=str(teammates_dir / instance),
        )
    return teammate
