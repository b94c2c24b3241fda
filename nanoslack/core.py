"""The composition root: what every instance of a fleet is made of, wired in one place.

``FleetCore`` holds what a fleet's instances share (the store, the owners, the live A2A
configuration, the turn cap, the LLM client and token ledger) and builds each
instance's ``InstanceCore``. An ``InstanceCore`` is everything that happens to what the
instance hears, from the durable inbox to the outbox: room control, guard, router and
gate (the pipeline), the owner asks, the budgets and the turns.

The Slack edge (``nanoslack.slack``) and the core meet at four points, nothing more:

- ``record(msgs)``: a batch of parsed messages into the durable inbox (the edge acks
  the envelopes only after this returns);
- ``submit(msg)``: a recorded message to process, in arrival order;
- ``answer(answer)``: an owner's click on one of the core's questions;
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from nanoslack import failpoints
from nanoslack.agents import Agent, Teammate, build_agent, load_teammate, make_http_client
from nanoslack.agents.teammates import SKILLS_DIRNAME
from nanoslack.asks import APPROVAL, BUDGET, HALT, Answer, NotAnOwner, OwnerAsks
from nanoslack.budgets import Budgets, StoreLedger
from nanoslack.config import A2AConfig, ConfigError, Settings
from nanoslack.config.values import warn_malformed
from nanoslack.control import Halts
from nanoslack.inbound import Identity, Inbound
from nanoslack.logs import get_logger
from nanoslack.pipeline import NameResolver, Outcome, build_pipeline
from nanoslack.store import Store
from nanoslack.turns import RoomDirectory, Transcripts, TurnOptions, TurnRecorder, TurnScheduler

log = get_logger(__name__)

# Messages processed in one transaction at most: enough to amortise a commit,
# small enough that a burst does not delay the first reply.
MAX_BATCH = 64
# A failed message still open in the inbox is tried again after this long.
RETRY_DELAY_S = 1.0
# Turns wait while the fleet's pipelines have more than this many recorded messages
# to process, for at most TURN_YIELD_MAX_S (then they run anyway: no starvation).
TURN_YIELD_BACKLOG = 64
TURN_YIELD_MAX_S = 1.0
TURN_YIELD_POLL_S = 0.005

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
    backlog: FleetBacklog = field(default_factory=lambda: FleetBacklog())


class FleetBacklog:
    """Recorded messages every instance's pipeline has still to process.

    A burst is where agent work and envelope work meet: turns that run while the
    pipelines are behind take the CPU the sockets and pipelines need, and acks wait.
    So a turn waits for the backlog to fall (``yield_to``), at most ``TURN_YIELD_MAX_S``,
    and the burst's turns run once it is in (DESIGN §9, issue 19)."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[Inbound]] = []

    def add(self, queue: asyncio.Queue[Inbound]) -> None:
        self._queues.append(queue)

    def remove(self, queue: asyncio.Queue[Inbound]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def size(self) -> int:
        return sum(q.qsize() for q in self._queues)

    async def yield_to(self) -> None:
        if self.size() <= TURN_YIELD_BACKLOG:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TURN_YIELD_MAX_S
        while self.size() > TURN_YIELD_BACKLOG and loop.time() < deadline:  # noqa: ASYNC110 — a poll, bounded; the queues have no "fell below" signal
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
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.identity = identity
        self.name = identity.instance
        self.store = store
        self.agent = agent
        self._observers = config.observers
        self.asks = OwnerAsks(store, instance=self.name, owners=config.owners)
        self.halts = Halts(store)
        self.budgets = Budgets(store, self.asks, room_tokens=config.room_tokens)
        self.pipeline = build_pipeline(
            identity,
            store,
            a2a_config=config.a2a_config,
            hop_scope=config.hop_scope,
            asks=self.asks,
            halts=self.halts,
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
            halts=self.halts,
            budgets=self.budgets,
            options=config.turns,
            yield_to=config.backlog.yield_to,
        )
        self._queue: asyncio.Queue[Inbound] = asyncio.Queue()
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

    def submit(self, msg: Inbound) -> None:
        """A recorded message, to be processed after those submitted before it."""
        self._queue.put_nowait(msg)

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

    async def start(self) -> None:
        """Resume what a previous run left open; then the worker and the turns run."""
        resumed = self.pipeline.unfinished()
        for msg in resumed:
            self._queue.put_nowait(msg)
        if resumed:
            log.info("inbox resumed", instance=self.name, count=len(resumed))
        self.turns.recover()
        self._tasks = [
            asyncio.create_task(self._work(), name=f"{self.name}-worker"),
            asyncio.create_task(self.turns.run(), name=f"{self.name}-turns"),
        ]

    async def stop(self, *, within: float = 5.0) -> None:
        """Let the worker finish what is queued (it is already acked) and the turns under
        way record their replies; what does not finish runs again at the next start."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=within)
        await self.turns.close(within=2.0)
        for task in self._tasks:
            await cancel(task)
        self._fleet_backlog.remove(self._queue)

    # -- one message's way -----------------------------------------------------------------

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
                outcomes = []
            for msg, outcome in zip(batch, outcomes, strict=False):
                self._react(msg, outcome)
            for _ in batch:
                self._queue.task_done()
            # A queue that is not empty hands out the next batch without suspending:
            # yield, so the sockets are read and acked between two batches (§9).
            await asyncio.sleep(0)

    def _react(self, msg: Inbound, outcome: Outcome) -> None:
        """What a committed decision sets going."""
        self._log.debug(
            "message processed", channel=msg.channel, ts=msg.ts, status=outcome.status, reason=outcome.reason
        )
        if outcome.control == "halted":
            self.turns.halt(msg.channel)
        elif outcome.control == "resumed":
            self.turns.wake()
        if outcome.verdict is not None and outcome.verdict.action == "allow":
            self.turns.wake()
            if self._observers.on_pending is not None:
                self._observers.on_pending(outcome.msg or msg)
        if outcome.status == "failed" and self.pipeline.is_open(msg):
            asyncio.get_running_loop().call_later(RETRY_DELAY_S, self._queue.put_nowait, msg)
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
    halts: Halts | None = None,
    budgets: Budgets | None = None,
    options: TurnOptions | None = None,
    yield_to: Callable[[], Awaitable[None]] | None = None,
) -> TurnScheduler:
    """One instance's turn stage: scheduler, transcripts and recorder."""
    halts = halts or Halts(store)
    return TurnScheduler(
        instance=identity.instance,
        store=store,
        agent=agent,
        transcripts=Transcripts(
            identity=identity, store=store, teammate=teammate, skills_dir=skills_dir, directory=directory
        ),
        recorder=TurnRecorder(
            instance=identity.instance,
            store=store,
            halts=halts,
            siblings=siblings,
            budget=budgets.instance if budgets else None,
        ),
        limiter=limiter,
        halts=halts,
        room_budget=budgets.room if budgets else None,
        options=options,
        yield_to=yield_to,
    )


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
    ) -> None:
        self.settings = settings
        self.store = store
        self.a2a = settings.a2a_source()
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
        )
        # One HTTP client for every LLM back end of the fleet (connection reuse).
        self._http = make_http_client()
        self._ledger = StoreLedger(store)

    def agent_for(self, name: str) -> Agent | None:
        """The instance's back end; None (logged, with the key to fix) when it has none."""
        try:
            return build_agent(
                self.settings.value,
                name,
                http=self._http,
                ledger=self._ledger,
                teammates_dir=self.settings.teammates_dir,
            )
        except ConfigError as exc:
            log.error("instance skipped: agent not configured", instance=name, error=str(exc))
            return None

    def instance(
        self,
        identity: Identity,
        agent: Agent,
        *,
        directory: Directory,
        fence: Callable[[], bool] | None = None,
    ) -> InstanceCore:
        return InstanceCore(identity, self.store, agent, self.config, directory=directory, fence=fence)

    async def close(self) -> None:
        await self._http.aclose()


def room_tokens(settings: Settings) -> int | None:
    """NANOSLACK_ROOM_TOKENS: unset → unlimited; not an integer > 0 → unlimited, with a warning."""
    raw = (settings.value("NANOSLACK_ROOM_TOKENS") or "").strip()
    if not raw:
        return None
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    warn_malformed(log, "NANOSLACK_ROOM_TOKENS", raw, "an integer > 0", "unlimited")
    return None


async def cancel(task: asyncio.Task[None]) -> None:
    """Cancel until it is done: Python 3.11's ``wait_for`` swallows a cancel that
    lands as the awaited event fires (gh-86296), and the worker loops here all
    wait on one; a single cancel could leave ``stop`` waiting forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it at exit


def _teammate(teammates_dir: Path, instance: str) -> Teammate:
    teammate = load_teammate(teammates_dir, instance)
    if teammate.is_default:
        log.warning(
            "teammate missing: using the default persona",
            instance=instance,
            folder=str(teammates_dir / instance),
        )
    return teammate
