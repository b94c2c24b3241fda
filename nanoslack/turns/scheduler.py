"""When turns run (docs/agents.md).

The pipeline leaves allowed messages ``pending`` in the store; the scheduler, one per
instance, turns them into turns:

- woken by the instance's core (an allowed message, an approval, a resume, a budget
  answer) and by a short poll (an approval made by ``nanoslack senders approve`` in
  another process only shows up in the store);
- one turn at a time per (instance, thread): messages that arrive during a turn, or
  that piled up while the fleet was down, are answered together by the next one;
  turns of different threads and instances run concurrently, under a fleet-wide cap;
  an instance whose teammate says ``serial: true`` runs one turn at a time across all its
  threads, the longest waiting first (``TurnSlot``, ``self.slot``: held by every kind of
  turn of the instance);
- a halted room starts no turn and its turns under way are cancelled (``halt``; also
  noticed on every poll, for a halt made by another process); a room whose token
  budget is spent waits for an owner's answer;
- a person's Stop (``stop_thread``: Slack's ``agent_session_stopped``) cancels the turn
  answering in that thread the same way, while its agent runs: it is recorded ``stopped``
  and its messages are consumed; what came in behind it runs next, as usual;
- turns no message woke come from the room features' turn sources (``TurnSource``, with
  clocks of their own): one at a time, never ahead of a person's or a handoff's turn.

A turn takes its slot, then reads its thread's pending messages: those are what the
agent is shown (``Transcripts``) and what the turn consumes (``TurnRecorder``), the
same set, however long it waited for the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from nanoslack import failpoints, tracing
from nanoslack.agents import Agent, BudgetExhausted, Turn, TurnFailed
from nanoslack.agents.drafts import drafting
from nanoslack.agents.waits import owner_waits
from nanoslack.budgets import RoomBudget
from nanoslack.control import is_acknowledgement
from nanoslack.features import RoomFeature, SourcedTurn, TurnSource
from nanoslack.halts import Halts
from nanoslack.inbound import FLEET_SENDER, InboxKey, ThreadKey
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.services import Services
from nanoslack.shutdown import Shutdown
from nanoslack.store import MessageRow
from nanoslack.store.outage import StoreOutage, until_stored
from nanoslack.tools import Toolboxes
from nanoslack.turns.asked import AskedTurns
from nanoslack.turns.history import Recall
from nanoslack.turns.record import TurnRecorder
from nanoslack.turns.signals import Outcome, SignalledTools, TurnSignals, Waking
from nanoslack.turns.slot import TurnSlot
from nanoslack.turns.transcript import Transcripts

log = get_logger(__name__)

CRASH_BACKOFF_S = 5.0
# More turns than this under way or waiting in an instance: its turns yield between
# stages (ack p99 while 5,000 queued turns drain).
SLICE_WHEN_BUSY = 8
# Builds of one turn's transcript at most, when its conversation keeps changing as it is built.
REBUILDS = 3


@dataclass(frozen=True)
class TurnsClosed:
    """What a stop did to the turns under way: finished (recorded) or left for the next start."""

    finished: int = 0
    left: int = 0


class TurnScheduler:
    def __init__(
        self,
        services: Services,
        *,
        instance: str,
        agent: Agent,
        transcripts: Transcripts,
        recorder: TurnRecorder,
        toolboxes: Toolboxes,
        halts: Halts,
        features: Sequence[RoomFeature],
        room_budget: RoomBudget | None = None,
        signals: TurnSignals | None = None,
        tally: Tally | None = None,
        slot: TurnSlot | None = None,
    ) -> None:
        self.instance = instance
        # Held by each turn of the instance while it runs: one at a time when the teammate
        # is serial (docs/agents.md, "Turns"); a turn run outside this scheduler takes it too.
        self.slot = slot or TurnSlot()
        self._tally = tally or Tally()
        self._store = services.store
        self._agent = agent
        self._transcripts = transcripts
        self._recorder = recorder
        self._toolboxes = toolboxes
        self._signals = signals
        # The room features (``nanoslack.features``): what they hold back, their ticks,
        # their turn sources.
        self._features = tuple(features)
        self._sources: tuple[TurnSource, ...] = tuple(s for f in features for s in f.turn_sources())
        # Wakes a sibling's turns (a feature's tick named it).
        self._wake_instance = services.wake
        # The fleet-wide cap on agent calls running at once.
        self._limiter = services.limiter
        # Awaited before a turn takes its slot: the fleet lets what the sockets brought
        # in go first (the pipelines' backlog, ``nanoslack.worker.FleetBacklog``; bounded).
        self._yield_to = services.backlog.yield_to
        # Awaited between a turn's stages while the instance has turns queued: the
        # sockets' reads go first (``FleetBacklog.between_stages``; bounded).
        self._between_stages = services.backlog.between_stages
        self._halts = halts
        self._room_budget = room_budget
        self._options = services.turns
        self._wake = asyncio.Event()
        self._outage = StoreOutage("turns", instance=instance)
        self._busy: dict[ThreadKey, asyncio.Task[None]] = {}
        self._closing = False
        # Turns cancelled because their room was halted (not a shutdown).
        self._halting: set[ThreadKey] = set()
        # Turns cancelled by a person's Stop, and who clicked it.
        self._stopping: dict[ThreadKey, str] = {}
        # Turns whose agent runs (a Stop may cancel them), and the thread each answers in
        # Slack (the one its session is on).
        self._answering: dict[ThreadKey, str] = {}
        self._turn_ids: dict[ThreadKey, int] = {}
        # Turns that hold their slot of the fleet's cap (the others still wait for one).
        self._slotted: set[ThreadKey] = set()
        # The one turn of a source under way at a time, and whether a halt cancelled it.
        self._sourced: tuple[SourcedTurn, asyncio.Task[None]] | None = None
        self._sourced_halting = False
        # What the next look reads: every thread with a pending message (``_scan_all``, and
        # at least once a poll interval), or only the threads woken by name since the last
        # look. With thousands of turns queued, reading every pending thread on each
        # allowed message was a long stretch of the loop per message (the acks waited).
        self._woken: dict[ThreadKey, bool] = {}  # the thread, and whether a message was just allowed there
        self._scan_all = True
        self._scanned_at = 0.0
        # The turns that answer siblings' asks (docs/agents.md "Asking a teammate"): they run
        # on the asking turn's task, not here, with this instance's agent, tools and recorder.
        self.asked = AskedTurns(
            instance=instance,
            store=services.store,
            agent=agent,
            transcripts=transcripts,
            recorder=recorder,
            toolboxes=toolboxes,
            halts=halts,
            room_budget=room_budget,
            sender_of=services.bot_sender,
            closing=lambda: self._closing,
            slot=self.slot,
        )

    def wake(self) -> None:
        """Look at every thread with a pending message (an approval, a resume, a budget
        answer, a sibling's handoff: any thread may have one now)."""
        self._scan_all = True
        self._wake.set()

    def wake_thread(self, channel: str, thread_key: str) -> None:
        """A message was allowed in this thread: the next look starts its turn."""
        self._woken[ThreadKey(channel, thread_key)] = True
        self._wake.set()

    def recover(self) -> int:
        """At start: turns a previous run left ``running`` run again."""
        abandoned = self._store.turns.abandon_running(self.instance)
        self._tally.turns["abandoned"] += abandoned
        self.wake()  # what piled up while the fleet was down: at once, not at the first poll
        if abandoned:
            log.info("turns abandoned by a previous run", instance=self.instance, count=abandoned)
        return abandoned

    async def run(self) -> None:
        me = asyncio.current_task()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._options.poll_interval)
                # Python 3.11's wait_for swallows a cancel that lands as the wake
                # event fires (gh-86296): stop() would then wait for this loop forever.
                if me is not None and me.cancelling():
                    raise asyncio.CancelledError
                self._wake.clear()
                await self._outage.attempt(self._schedule_once)  # refused: the next poll asks again
        finally:
            for task in list(self._busy.values()):
                task.cancel()
            if self._sourced is not None:
                self._sourced[1].cancel()

    def stop_starting(self) -> None:
        """No new turn from now on (the first thing a clean stop does)."""
        self._closing = True

    async def close(self, shutdown: Shutdown) -> TurnsClosed:
        """Start no new turn; give the turns under way what is left of the stop's grace
        to record their output, then cancel the rest (they run again at the next start)."""
        self._closing = True
        tasks: set[asyncio.Future[None]] = set(self._busy.values())
        if self._sourced is not None:
            tasks.add(self._sourced[1])
        if not tasks:
            return TurnsClosed()
        late = await shutdown.wait(tasks, shutdown.remaining())
        for task in late:
            task.cancel()
        if late:
            # A cancelled command agent is killed (its process group) before the task ends.
            await asyncio.wait(late, timeout=5.0)
        return TurnsClosed(finished=len(tasks) - len(late), left=len(late))

    def halt(self, channel: str) -> None:
        """The room was halted: cancel its turns under way; their messages stay pending."""
        for key, task in list(self._busy.items()):
            if key.channel == channel and key not in self._halting:
                self._halting.add(key)
                task.cancel()
        if self._sourced is not None and self._sourced[0].room == channel and not self._sourced_halting:
            self._sourced_halting = True
            self._sourced[1].cancel()

    def stop_thread(self, channel: str, thread_ts: str, *, by_user: str) -> int | None:
        """A person clicked Stop on the session of ``thread_ts``: the turn whose agent is
        answering there is cancelled (as a halt cancels one) and recorded ``stopped``. The
        turn's id, or None when no turn's agent runs there (one that finished its answer
        is being recorded, and posts it): its session is moved to ``active`` then."""
        for key, answered in list(self._answering.items()):
            if key.channel != channel or answered != thread_ts:
                continue
            if key in self._halting or key in self._stopping:
                return None
            task = self._busy.get(key)
            if task is None:
                return None
            self._stopping[key] = by_user
            task.cancel()
            return self._turn_ids.get(key)
        if self._signals is not None:
            self._signals.settle(channel, thread_ts)  # a session nothing runs in goes active
        return None

    async def _schedule_once(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        if self._closing:
            return
        # Asked on every poll: a halt made by another process (or the CLI) shows up here.
        halted = self._halts.rooms()
        for channel in halted:
            self.halt(channel)
        self._tick_features()
        people_wait = self._schedule_people(halted)
        if self._sources and self._sourced is None:
            # Never ahead of people: a source's turn starts only when every turn of the
            # instance that was woken by a person or a handoff holds its slot.
            if not people_wait and not self._people_waiting():
                self._start_sourced()

    def _schedule_people(self, halted: Collection[str]) -> bool:
        """A turn for each thread with answerable messages and none under way; True when
        one was started."""
        started = False
        for key in self._threads_to_look_at():
            if key in self._busy or key.channel in halted or self._over_budget(key):
                continue  # answered by the next turn, once this one is recorded (or resumed)
            task = asyncio.create_task(self._turn(key), name=f"{self.instance}-turn")
            self._busy[key] = task
            task.add_done_callback(functools.partial(self._turn_ended, key))
            started = True
        return started

    def _people_waiting(self) -> bool:
        return any(key not in self._slotted for key in self._busy)

    def _people_came(self) -> bool:
        """Asked of the store just before a source's turn starts (nothing awaited between
        this and the turn's row): a person's message recorded while it got ready (its
        gate, its prompt) has its turn started now, and goes first."""
        return self._schedule_people(self._halts.rooms()) or self._people_waiting()

    def _start_sourced(self) -> None:
        for source in self._sources:
            sourced = source.take()
            if sourced is not None:
                task = asyncio.create_task(self._sourced_turn(sourced), name=f"{self.instance}-sourced")
                self._sourced = (sourced, task)
                task.add_done_callback(self._sourced_ended)
                return

    def _sourced_ended(self, _task: asyncio.Task[None]) -> None:
        self._sourced = None
        self._sourced_halting = False
        self._wake.set()  # the next one a source has ready, or what came in meanwhile

    def _threads_to_look_at(self) -> list[ThreadKey]:
        """Every thread with pending messages, or only those woken by name since the last
        look that have some: an allowed message's own, and those whose turn ended (what
        came in during it, or what a crashed turn left)."""
        now = time.monotonic()
        held = self._held()
        woken, self._woken = self._woken, {}
        if self._scan_all or held or now - self._scanned_at >= self._options.poll_interval:
            self._scan_all = False
            self._scanned_at = now
            return self._pending_threads(held)
        keys: list[ThreadKey] = []
        messages = self._store.messages
        for key, just_allowed in woken.items():
            if key in self._busy:
                continue  # its turn's end wakes it again
            if messages.has_pending(self.instance, key.channel, key.thread_key):
                keys.append(key)
            elif just_allowed:
                # Allowed, yet not pending in its own thread (a feature filed it elsewhere):
                # the next look reads everything.
                self.wake()
        return keys

    def _pending_threads(self, held: frozenset[tuple[str, str]]) -> list[ThreadKey]:
        """The threads with pending messages, in the order their first one arrived."""
        if held:
            # Messages held by a feature (rare: docs/architecture.md, "Room features") are
            # skipped message by message, so read the messages themselves.
            return list(_threads(self._answerable(self._store.messages.pending(self.instance), held)))
        # One row per thread: with thousands of turns queued, reading every pending
        # message on each wake made draining them quadratic (the bench).
        return [ThreadKey(c, t) for c, t in self._store.messages.pending_threads(self.instance)]

    def _held(self) -> frozenset[tuple[str, str]]:
        """(room, ts) the features hold back (a question that waits for the one under way
        in its room: docs/team-rooms.md)."""
        held: frozenset[tuple[str, str]] = frozenset()
        for feature in self._features:
            held |= feature.held()
        return held

    def _answerable(self, rows: Sequence[MessageRow], held: frozenset[tuple[str, str]]) -> list[MessageRow]:
        """What a turn may answer now: not what a feature holds back."""
        return [row for row in rows if (row.channel, row.ts) not in held] if held else list(rows)

    def _tick_features(self) -> None:
        """The features' timers on every poll (the instances they wake: this one or a sibling)."""
        for feature in self._features:
            for instance in feature.tick():
                if instance == self.instance:
                    self.wake()
                else:
                    self._wake_instance(instance)

    def _over_budget(self, key: ThreadKey) -> bool:
        """A room whose daily token budget is spent waits for an owner's answer."""
        return (
            self._room_budget is not None and bool(key.thread_key) and self._room_budget.paused(key.channel)
        )

    async def _slice(self) -> None:
        """With turns queued (a burst's, draining), each stage of a turn is its own slice
        of the loop, so envelopes are read and acked between them; a lone turn runs
        straight through, as every extra slice is a loop iteration on its reply's way."""
        if len(self._busy) > SLICE_WHEN_BUSY:
            await self._between_stages()

    def _turn_ended(self, key: ThreadKey, _task: asyncio.Task[None]) -> None:
        self._busy.pop(key, None)
        self._halting.discard(key)
        self._stopping.pop(key, None)
        self._answering.pop(key, None)
        self._turn_ids.pop(key, None)
        self._slotted.discard(key)
        # Messages that came in during the turn (or that a crashed turn left pending).
        self._woken.setdefault(key, False)
        self._wake.set()

    async def _turn(self, key: ThreadKey) -> None:
        try:
            # The instance's slot first, in the order the turns were started (their threads'
            # first pending messages' order): a serial instance's longest waiting thread goes
            # next, and a turn waiting for it holds no place in the fleet's cap.
            async with self.slot.turn():
                await self._run_in_slot(key)
        except Exception as exc:  # the store or the edge failed: the messages stay pending
            log.error(
                "turn crashed",
                instance=self.instance,
                channel=key.channel,
                error=f"{type(exc).__name__}: {exc}",
            )
            # Keep the thread busy a while: the next poll would only fail the same way.
            await asyncio.sleep(CRASH_BACKOFF_S)

    async def _run_in_slot(self, key: ThreadKey) -> None:
        await self._yield_to()
        async with self._limiter:
            self._slotted.add(key)
            if self._sources:
                self._wake.set()  # a source's turn waiting behind this one may start now
            # Read once the slot is ours: what arrived while the turn waited for it
            # is answered now, and the transcript ends at the same message.
            changes = self._store.messages.changes(self.instance, key.channel)
            msgs = self._pending(key)
            if msgs:
                with self._traced(key, msgs):
                    await self._run(key, msgs, changes)

    def _pending(self, key: ThreadKey) -> list[MessageRow]:
        return self._answerable(
            self._store.messages.pending_in_thread(self.instance, key.channel, key.thread_key), self._held()
        )

    def _traced(self, key: ThreadKey, msgs: Sequence[MessageRow]) -> tracing.Span | tracing.OffSpan:
        """The turn's trace span (docs/operations.md "Traces"): woken by a handoff, it
        continues the handing turn's trace, in whichever process that one ran."""
        if not tracing.enabled():
            return tracing.OFF
        waking = msgs[-1]
        handed = [m for m in msgs if m.handoff_depth > 0]
        parent = (
            self._store.handoffs.traceparent(self.instance, key.channel, handed[-1].ts) if handed else None
        )
        trigger = "handoff" if handed else "bot" if waking.sender_id.startswith("slack:bot:") else "person"
        return tracing.turn(
            instance=self.instance,
            conversation=key.channel,
            thread=key.thread_key,
            trigger=trigger,
            parent=parent,
        )

    async def _built(
        self, key: ThreadKey, msgs: Sequence[MessageRow], changes: int
    ) -> tuple[Turn, Recall, Sequence[MessageRow]] | None:
        """The turn that answers ``msgs``, built again while a message of its conversation
        was edited or deleted as it was built (its downloads, the member list are awaited):
        what the turn shows and answers is the store as it is when its row is written, no
        await after (docs/agents.md, "Edits and deletes"). None: its messages were deleted."""
        messages = self._store.messages
        attempt = 0
        while True:
            attempt += 1
            await self._slice()
            turn, recall = await self._transcripts.build(key, msgs)
            await failpoints.pause_point("turn.built")
            await self._slice()
            now = messages.changes(self.instance, key.channel)
            # A conversation that keeps changing as fast as it is built: the last build stands.
            if now == changes or attempt == REBUILDS:
                return turn, recall, msgs
            changes, msgs = now, self._pending(key)
            log.info(
                "turn rebuilt",
                instance=self.instance,
                channel=key.channel,
                reason="a message was edited or deleted as its transcript was built",
                messages=len(msgs),
            )
            if not msgs:
                log.info(
                    "turn not started",
                    instance=self.instance,
                    channel=key.channel,
                    reason="its messages were deleted",
                )
                return None

    async def _run(self, key: ThreadKey, msgs: Sequence[MessageRow], changes: int) -> None:
        built = await self._built(key, msgs, changes)
        if built is None:
            return
        turn, recall, msgs = built
        turn_id = self._store.turns.start(
            instance=self.instance,
            channel=key.channel,
            thread_key=key.thread_key,
            reply_thread_ts=turn.thread_ts,
            sender_id=turn.sender_id,
            through_ts=msgs[-1].ts,
            messages=len(msgs),
            wrapping_up=turn.wrapping_up,
        )
        log.info(
            "turn started",
            instance=self.instance,
            turn=turn_id,
            channel=key.channel,
            thread=turn.thread_ts,
            messages=len(msgs),
            wrapping_up=turn.wrapping_up,
        )
        recorder = self._recorder
        tools = self._toolboxes.for_turn(turn_id, turn, msgs)
        waking = self._waking(turn_id, turn, msgs)
        signal = self._signals.begin(waking) if waking is not None and self._signals is not None else None
        shown: Outcome = "failed"
        self._answering[key] = waking.thread_ts if waking is not None else turn.thread_ts
        self._turn_ids[key] = turn_id
        try:
            shown_tools = tools if signal is None else SignalledTools(tools, signal)
            with (
                drafting(signal.drafts() if signal is not None else None),
                owner_waits(signal.owner_waits if signal is not None else None),
            ):
                reply = await self._agent.run(turn, shown_tools)
        except asyncio.CancelledError:
            self._answering.pop(key, None)
            if key in self._halting:
                recorder.halted(turn_id)
            elif key in self._stopping:
                # Durable before anything else is done about it (the stream, the session).
                recorder.stopped(
                    turn_id, turn, msgs, by_user=self._stopping[key], thread_ts=self._answering_thread(waking)
                )
                shown = "stopped"
            raise
        except BudgetExhausted as exc:
            outcome = functools.partial(
                recorder.budget_spent,
                turn_id,
                turn,
                msgs,
                str(exc),
                tools.effects,
                recall,
                scope=exc.scope,
                unit=exc.unit,
            )
        except TurnFailed as exc:
            outcome = functools.partial(recorder.failure, turn_id, turn, msgs, str(exc), recall)
        except Exception as exc:  # a back-end bug must not stop the instance
            error = f"{type(exc).__name__}: {exc}"
            outcome = functools.partial(recorder.failure, turn_id, turn, msgs, error, recall)
        else:
            self._answering.pop(key, None)  # answered: a Stop from now on is too late
            outcome = functools.partial(recorder.reply, turn_id, turn, msgs, reply, tools.effects, recall)
            # What the recorder will post: an acknowledgement alone is silence (its status is cleared).
            posts = (*reply.posts, *tools.effects.posts)
            shown = "posted" if any(p.strip() and not is_acknowledgement(p) for p in posts) else "silent"
        finally:
            if signal is not None:
                signal.end(shown)
        # What the agent said is kept until the store takes it: running the agent again
        # would cost a second call. Recording twice is harmless (a turn finishes once).
        await until_stored(outcome, StoreOutage("turns", instance=self.instance))

    def _waking(self, turn_id: int, turn: Turn, msgs: Sequence[MessageRow]) -> Waking | None:
        """The message the turn answers, as Slack knows it; none for a handoff (it is not
        in Slack)."""
        waking = msgs[-1]
        if waking.internal or self._signals is None:
            return None
        dm = not turn.thread_ts
        thread_ts = turn.thread_ts
        title = ""
        if dm:  # a DM is one conversation; its message may still sit in a thread (the pane's)
            thread_ts = waking.ts
            with contextlib.suppress(Exception):  # a store outage: the message's own thread
                heard = self._store.inbox.message(waking.key)
                thread_ts = heard.thread_ts if heard is not None and heard.thread_ts else waking.ts
                title = self._first_text(waking.channel, thread_ts, heard.text if heard is not None else "")
        return Waking(waking.channel, waking.ts, thread_ts, dm, turn=turn_id, title=title)

    def _first_text(self, channel: str, thread_ts: str, fallback: str) -> str:
        """The text of the thread's first message (its session's title), as recorded."""
        root = self._store.inbox.message(InboxKey(self.instance, channel, thread_ts))
        return root.text if root is not None else fallback

    @staticmethod
    def _answering_thread(waking: Waking | None) -> str | None:
        """Where a stopped turn says so: the thread its session is on (a DM's)."""
        return waking.thread_ts if waking is not None and waking.dm else None

    # -- turns of the features' sources ------------------------------------------------------

    async def _sourced_turn(self, sourced: SourcedTurn) -> None:
        try:
            async with self.slot.turn():  # a serial instance's sourced turn waits its turn too
                await self._sourced_in_slot(sourced)
        except asyncio.CancelledError:
            if self._sourced_halting:
                sourced.ended("skipped", "room halted")
            raise  # a stop: its source calls it interrupted at the next start
        except Exception as exc:
            log.error(
                "turn crashed",
                instance=self.instance,
                origin=sourced.origin.conversation,
                error=f"{type(exc).__name__}: {exc}",
            )
            sourced.ended("failed", f"{type(exc).__name__}")

    async def _sourced_in_slot(self, sourced: SourcedTurn) -> None:
        await self._yield_to()
        async with self._limiter:
            if self._people_waiting():
                # A person's turn came in while this waited for the slot: it goes
                # first; this one waits at the head of its source.
                sourced.put_back()
                return
            origin = sourced.origin
            with tracing.turn(
                instance=self.instance,
                conversation=sourced.room,
                thread=origin.conversation,
                trigger=origin.kind,
            ):
                await self._run_sourced(sourced)

    async def _run_sourced(self, sourced: SourcedTurn) -> None:
        room, origin = sourced.room, sourced.origin
        if room and self._halts.is_halted(room):
            sourced.ended("skipped", "room halted")
            return
        prompt = await sourced.prepare()
        if prompt is None:
            return
        turn, recall = await self._transcripts.build_sourced(origin, room, prompt)
        if self._people_came():
            sourced.put_back()  # at the head of its source; it prepares again then
            return
        turn_id = self._store.turns.start(
            instance=self.instance,
            channel=turn.channel,
            thread_key=origin.conversation,
            reply_thread_ts="",
            sender_id=FLEET_SENDER,
            through_ts="",
            messages=0,
            wrapping_up=False,
        )
        sourced.started(turn_id)
        log.info(
            "turn started",
            instance=self.instance,
            turn=turn_id,
            channel=turn.channel,
            origin=origin.conversation,
        )
        tools = self._toolboxes.for_turn(
            turn_id, turn, (), max_steps=sourced.max_steps, own_tokens_left=sourced.tokens_left
        )
        ended = functools.partial(_ended, sourced, turn_id)
        recorder = self._recorder
        outcome: Callable[[], None]
        try:
            reply = await self._agent.run(turn, tools)
        except asyncio.CancelledError:
            if self._sourced_halting:
                recorder.halted(turn_id)
            raise
        except BudgetExhausted:
            spent = tools.effects.tokens
            outcome = functools.partial(
                recorder.sourced_reply,
                turn_id,
                turn,
                (),
                tools.effects,
                to_owners=not room,
                recall=recall,
                # Refused before its first model call: it was skipped, not run.
                ended=(
                    lambda status, _r, t: ended(
                        "skipped" if spent == 0 and status == "silent" else status, "budget", t
                    )
                ),
                stopped="budget",
            )
        except TurnFailed as exc:
            outcome = functools.partial(
                recorder.sourced_failure, turn_id, str(exc), ended=ended, tokens=tools.effects.tokens
            )
        except Exception as exc:  # a back-end bug must not stop the instance
            outcome = functools.partial(
                recorder.sourced_failure,
                turn_id,
                f"{type(exc).__name__}: {exc}",
                ended=ended,
                tokens=tools.effects.tokens,
            )
        else:
            outcome = functools.partial(
                recorder.sourced_reply,
                turn_id,
                turn,
                reply.posts,
                tools.effects,
                to_owners=not room,
                ended=ended,
                recall=recall,
                reply=reply,
            )
        await until_stored(outcome, StoreOutage("turns", instance=self.instance))


def _ended(sourced: SourcedTurn, turn_id: int, status: str, reason: str, tokens: int) -> None:
    sourced.ended(status, reason, tokens, turn_id)


def _threads(rows: Sequence[MessageRow]) -> dict[ThreadKey, None]:
    """The threads with pending messages, in the order their first one arrived."""
    return dict.fromkeys(ThreadKey(row.channel, row.thread_key) for row in rows)
