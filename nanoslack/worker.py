"""One instance's inbox: where the edge hands each batch of events, and the ordered
batch worker behind it (docs/architecture.md).

The edge's envelope pump makes one call per batch, ``take``: the batch is recorded in the
durable inbox in one commit (the pump acks the envelopes once it returns) and the new
messages are queued, in the order they were recorded. The worker takes what queued up
meanwhile as one batch (at most ``MAX_BATCH``), names its senders (``NameResolver``, the
edge's directory: the one stage that may wait on the network, before the transaction),
runs it through ``Pipeline.process_many`` and hands each message's ``Outcome`` to
``react`` (the instance's core: a turn, a halt). While the store cannot take a batch,
the same batch is tried again and nothing queued behind it overtakes it
(``StoreOutage.attempt``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nanoslack import failpoints
from nanoslack.inbound import Inbound, InboxKey
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.pipeline import Outcome, Pipeline
from nanoslack.shutdown import cancel
from nanoslack.store.outage import StoreOutage

log = get_logger(__name__)

# Messages processed in one transaction at most: enough to amortise a commit,
# small enough that a burst does not delay the first reply.
MAX_BATCH = 64
# A failed message still open in the inbox is tried again after this long.
RETRY_DELAY_S = 1.0
# What the worker has queued (acked already) may finish within this long, grace or not.
QUEUE_GRACE_S = 5.0
# Turns wait while the fleet's pipelines have more than this many recorded messages
# to process, for at most TURN_YIELD_MAX_S (then they run anyway: no starvation).
TURN_YIELD_BACKLOG = 64
TURN_YIELD_MAX_S = 1.0
TURN_YIELD_POLL_S = 0.005
# While a socket has envelopes read and not acked, turns wait at most this long for it.
TURN_YIELD_SOCKET_MAX_S = 0.05
# A turn under way, between two of its stages, waits at most this long for a busy socket.
TURN_STAGE_SOCKET_MAX_S = 0.02


class NameResolver(Protocol):
    """Makes sure each sender's ``users`` row has a display name (bots.info, users.info)."""

    async def ensure_many(self, msgs: Sequence[Inbound]) -> None: ...


OnPending = Callable[[Inbound], None]
OnOutcome = Callable[[Inbound, Outcome], None]
# What a committed decision sets going (the instance's core).
React = Callable[[Inbound, Outcome], None]


@dataclass(frozen=True)
class Observers:
    """Watch what the instances decide (tests, the playground): never change it."""

    on_pending: OnPending | None = None
    on_outcome: OnOutcome | None = None


class TurnWakes(Protocol):
    """What a decision sets going in the instance's turns (``turns.TurnScheduler``)."""

    def halt(self, channel: str) -> None: ...

    def wake(self) -> None: ...

    def wake_thread(self, channel: str, thread_key: str) -> None: ...


def reactions(turns: TurnWakes, observers: Observers, instance: str) -> React:
    """What a committed decision sets going: an allowed message wakes its thread's turns,
    an owner's halt cancels the room's turns, a resume restarts them; the observers see
    every outcome."""
    debug = log.bind(instance=instance).debug
    on_pending, on_outcome = observers.on_pending, observers.on_outcome

    def react(msg: Inbound, outcome: Outcome) -> None:
        debug(
            "message processed", channel=msg.channel, ts=msg.ts, status=outcome.status, reason=outcome.reason
        )
        if outcome.control == "halted":
            turns.halt(msg.channel)
        elif outcome.control == "resumed":
            turns.wake()
        if outcome.verdict is not None and outcome.verdict.action == "allow":
            allowed = outcome.msg or msg
            turns.wake_thread(allowed.channel, allowed.thread_key or "")
            if on_pending is not None:
                on_pending(allowed)
        if on_outcome is not None:
            on_outcome(msg, outcome)

    return react


class FleetBacklog:
    """Recorded messages every instance's pipeline has still to process.

    A burst is where agent work and envelope work meet: turns that run while the
    pipelines are behind take the CPU the sockets and pipelines need, and acks wait.
    So a turn waits for the backlog to fall (``yield_to``), at most ``TURN_YIELD_MAX_S``,
    and the burst's turns run once it is in (docs/architecture.md)."""

    def __init__(self, sockets_busy: Callable[[], bool] = lambda: False) -> None:
        self._queues: list[asyncio.Queue[Any]] = []
        # Whether a socket of the edge has read envelopes not acked yet (the root's).
        self._sockets_busy = sockets_busy
        # Turns waiting in ``yield_to`` or ``between_stages``: until when the pipelines'
        # backlog holds them, until when a busy socket does, and what wakes them.
        self._waiting: list[tuple[float, float, asyncio.Future[None]]] = []
        self._poller: asyncio.Task[None] | None = None

    def add(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.append(queue)

    def remove(self, queue: asyncio.Queue[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def size(self) -> int:
        return sum(q.qsize() for q in self._queues)

    def behind(self) -> bool:
        return self._pipelines_behind() or self._sockets_busy()

    def _pipelines_behind(self) -> bool:
        return self.size() > TURN_YIELD_BACKLOG

    async def yield_to(self) -> None:
        """Before a turn takes its slot: return at once unless the fleet is behind; else
        once it has caught up, or a socket has kept this turn waiting
        ``TURN_YIELD_SOCKET_MAX_S`` (a batch is acked within milliseconds: waiting longer
        for a socket that is never idle, a steady stream, would only delay every turn), or
        the pipelines ``TURN_YIELD_MAX_S``."""
        if not self.behind():
            return
        now = asyncio.get_running_loop().time()
        await self._wait(now + TURN_YIELD_MAX_S, now + TURN_YIELD_SOCKET_MAX_S)

    async def between_stages(self) -> None:
        """Between two stages of a turn under way (a burst's turns draining): the loop
        goes to the sockets first. While one has envelopes read and not acked, the turn
        waits for them, at most ``TURN_STAGE_SOCKET_MAX_S``; else it gives the loop one
        iteration. Each stage is a few milliseconds of the loop; run back to back they
        kept a read envelope's ack waiting (docs/architecture.md)."""
        if not self._sockets_busy():
            await asyncio.sleep(0)
            return
        now = asyncio.get_running_loop().time()
        await self._wait(now, now + TURN_STAGE_SOCKET_MAX_S)

    async def _wait(self, pipelines_until: float, sockets_until: float) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.append((pipelines_until, sockets_until, waiter))
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll(), name="fleet-backlog-poll")
        await waiter

    async def _poll(self) -> None:
        """One poll for every waiting turn (a burst queues thousands): the backlog and
        the sockets are looked at once per ``TURN_YIELD_POLL_S``, and a turn is woken
        once, when it may go, in the order the turns came."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            await asyncio.sleep(TURN_YIELD_POLL_S)  # noqa: ASYNC110 — a poll, bounded; the queues have no "fell below" signal
            now = loop.time()
            pipelines = self._pipelines_behind()
            sockets = self._sockets_busy()
            still: list[tuple[float, float, asyncio.Future[None]]] = []
            for entry in self._waiting:
                pipelines_until, sockets_until, waiter = entry
                if waiter.done():
                    continue  # cancelled (a halt, a stop)
                if (pipelines and now < pipelines_until) or (sockets and now < sockets_until):
                    still.append(entry)
                else:
                    waiter.set_result(None)
            self._waiting = still


class BatchWorker:
    def __init__(
        self,
        instance: str,
        pipeline: Pipeline,
        *,
        react: React,
        backlog: FleetBacklog,
        tally: Tally,
        names: NameResolver | None = None,
    ) -> None:
        self.instance = instance
        self._pipeline = pipeline
        self._names = names
        self._react = react
        self._tally = tally
        # Each message with whether it is to be checked before it is processed: still
        # open in the inbox, and not already in its batch (see ``_to_process``).
        self._queue: asyncio.Queue[tuple[Inbound, bool]] = asyncio.Queue()
        self._outage = StoreOutage("pipeline", instance=instance)
        self._fleet_backlog = backlog
        backlog.add(self._queue)
        self._task: asyncio.Task[None] | None = None

    def take(self, msgs: Sequence[Inbound], *, retried: bool = False) -> list[bool]:
        """The edge's batch: into the durable inbox in one commit, then the new messages
        queued in order; False for a duplicate (a Slack retry, an ``app_mention`` twin),
        which is ignored. Raises when the store cannot take them (nothing queued: the
        pump leaves the envelopes unacked for Slack to redeliver).

        ``retried``: this write was tried before, and an attempt cut off at its commit
        may have recorded the batch after all, so a "duplicate" may be that attempt's
        own: it is queued to be checked first (``submit``'s ``recheck``)."""
        fresh = self._pipeline.accept_many(msgs)
        tally = self._tally
        tally.inbox_commits += 1
        tally.inbox_records += len(msgs)
        failpoints.hit("inbox.recorded", len(msgs))
        put = self._queue.put_nowait
        for msg, is_new in zip(msgs, fresh, strict=True):
            if is_new or retried:
                put((msg, not is_new))
            else:
                log.debug(
                    "duplicate delivery ignored", instance=self.instance, channel=msg.channel, ts=msg.ts
                )
        return fresh

    def submit(self, msg: Inbound, *, recheck: bool = False) -> None:
        """A recorded message, to be processed after those submitted before it.
        ``recheck``: it may have been submitted already, or processed; it is processed
        only if still open and not submitted before."""
        self._queue.put_nowait((msg, recheck))

    def backlog(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        """Resume what a previous run left open in the inbox, then work."""
        resumed = self._pipeline.unfinished()
        for msg in resumed:
            self._queue.put_nowait((msg, False))
        if resumed:
            log.info("inbox resumed", instance=self.instance, count=len(resumed))
        self._task = asyncio.create_task(self._work(), name=f"{self.instance}-worker")

    def drained(self) -> asyncio.Future[None]:
        """Done once everything queued is processed (a stop waits for it, bounded)."""
        return asyncio.ensure_future(self._queue.join())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel(self._task)
        self._fleet_backlog.remove(self._queue)

    async def _work(self) -> None:
        """Messages in arrival order: hop counts, resets and sticky threads depend
        on the order messages happened in. What queued up meanwhile is processed
        as one batch (one commit), which is how the fleet keeps up with a burst."""
        queue = self._queue
        while True:
            items = [await queue.get()]
            while len(items) < MAX_BATCH and not queue.empty():
                items.append(queue.get_nowait())
            batch = [msg for msg, _ in items]
            try:
                batch, outcomes = await self._process(items)
            except Exception as exc:  # process_many handles message failures; this is a bug guard
                log.error("pipeline crashed", instance=self.instance, error=f"{type(exc).__name__}: {exc}")
                outcomes = []
            for msg, outcome in zip(batch, outcomes, strict=False):
                self._after(msg, outcome)
            for _ in items:
                queue.task_done()
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
        outcomes: list[Outcome] = []

        async def attempt() -> None:
            nonlocal batch, check, outcomes
            if any(check):
                batch = self._to_process(batch, check)
                check = [False] * len(batch)
            if not batch:
                outcomes = []
                return
            if self._names is not None:
                await self._names.ensure_many(batch)
            outcomes = await self._pipeline.process_many(batch)

        while not await self._outage.attempt(attempt):
            check = [True] * len(batch)
        return batch, outcomes

    def _to_process(self, batch: list[Inbound], check: list[bool]) -> list[Inbound]:
        """``batch`` less the checked messages that are finished (parked after failures,
        finished by a commit that was cut off) or that came earlier in the batch. A
        checked copy queued behind an unchecked one is left out the same way once the
        first is processed: messages are processed in the order they were queued."""
        checked = [msg for msg, flag in zip(batch, check, strict=True) if flag]
        still_open = {msg.key for msg in self._pipeline.still_open(checked)}
        seen: set[InboxKey] = set()
        kept: list[Inbound] = []
        for msg, flag in zip(batch, check, strict=True):
            if msg.key in seen or (flag and msg.key not in still_open):
                continue
            seen.add(msg.key)
            kept.append(msg)
        return kept

    def _after(self, msg: Inbound, outcome: Outcome) -> None:
        if outcome.status == "dropped":
            self._tally.hop_drop(outcome.reason)
        self._react(msg, outcome)
        if outcome.status == "failed":
            asyncio.get_running_loop().call_later(RETRY_DELAY_S, self._retry_later, msg)

    def _retry_later(self, msg: Inbound) -> None:
        """A message whose processing failed is queued again, to be checked first: the
        failure may have parked it (``Inbox.note_failure``)."""
        self._queue.put_nowait((msg, True))
