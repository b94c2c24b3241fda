"""One instance's pipeline after the socket (DESIGN §3 steps 4–8).

Order, as a message travels: ``accept_many`` records it in the durable inbox (the
Slack edge acks only after that); ``process_many`` runs the bot-inbound guard, and
the guard's downstream routes, gates and closes the inbox entry in ONE
transaction. That transaction is what makes delivery exactly-once: a crash before
it commits leaves the entry open for ``unfinished`` (resumed at start), a crash
after it leaves nothing to redo.

No bolt here: the edge (``nanoslack.slack``) hands in parsed ``Inbound`` values.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import structlog

from nanoslack import failpoints
from nanoslack.gate import Gate, Verdict
from nanoslack.guard import BotInboundGuard
from nanoslack.inbound import Drop, Inbound, InboxKey
from nanoslack.router import Router
from nanoslack.store import Store

log = structlog.get_logger("nanoslack.pipeline")
T = TypeVar("T")


def run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that must finish without suspending.

    The guard's API is async (a policy may one day need to await), but inside a
    store transaction nothing may yield to the loop: another coroutine would
    join the open transaction. This enforces that instead of trusting it.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError("a pipeline stage suspended inside a store transaction")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an instance is on Slack, from ``auth.test``."""

    instance: str
    team_id: str | None
    bot_user_id: str
    bot_id: str | None
    name: str | None = None


class NameResolver(Protocol):
    """Makes sure each sender's ``users`` row has a display name (bots.info, users.info)."""

    async def ensure_many(self, msgs: Sequence[Inbound]) -> None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # delivered | dropped | failed
    reason: str
    verdict: Verdict | None = None
    # The message as it went downstream (re-attributed, hop set); None if it did not.
    delivered: Inbound | None = None


class Pipeline:
    def __init__(
        self,
        *,
        identity: Identity,
        store: Store,
        guard: BotInboundGuard,
        router: Router,
        gate: Gate,
        names: NameResolver | None = None,
        on_outbox: Callable[[], None] | None = None,
        on_pending: Callable[[Inbound], None] | None = None,
    ) -> None:
        self.identity = identity
        self.instance = identity.instance
        self._store = store
        self._guard = guard
        self._router = router
        self._gate = gate
        self._names = names
        self._on_outbox = on_outbox
        self._on_pending = on_pending
        # What _deliver decided, by message, for process() to report (the guard
        # only says *that* it delivered).
        self._outcomes: dict[InboxKey, Outcome] = {}

    def accept_many(self, msgs: Sequence[Inbound]) -> list[bool]:
        """Record before ack, a burst in one commit (the intake's group commit);
        False for a duplicate (Slack retry, ``app_mention`` twin)."""
        with self._store.transaction():
            return [self._store.inbox.record(msg) for msg in msgs]

    def unfinished(self) -> list[Inbound]:
        return self._store.inbox.unfinished(self.instance)

    def is_open(self, msg: Inbound) -> bool:
        """Still waiting to be finished (a failed attempt not yet parked)."""
        return self._store.inbox.status(msg.key) == "received"

    async def process_many(self, msgs: Sequence[Inbound]) -> list[Outcome]:
        """Guard, route, gate and close the inbox entries in one transaction.

        A crash before the commit leaves the entries open for ``resume``; a failing
        message rolls back alone (the batch is retried with a savepoint per message),
        its hop reservation included (§3.6: a downstream failure consumes no hop).
        Batching is what makes the pipeline fast: SQLite's cost is the pages a
        commit writes, and consecutive messages share pages.
        The one stage that may touch the network, the sender's display name, runs
        first, outside the transaction.
        """
        if self._names is not None:
            await self._names.ensure_many(msgs)
        try:
            # Optimistic: the whole batch in one transaction, no savepoints.
            outcomes, failures = self._run_batch(msgs, isolate=False)
        except Exception as exc:
            # One message failed and the batch rolled back (hops, resets and all):
            # run it again with each message in a savepoint, so only it fails.
            for msg in msgs:
                self._outcomes.pop(msg.key, None)
            if len(msgs) == 1:
                outcomes, failures = [Outcome("failed", str(exc))], [(msgs[0], exc)]
            else:
                outcomes, failures = self._run_batch(msgs, isolate=True)
        failpoints.hit("pipeline.committed", len(msgs))
        for msg, error in failures:
            self._failed(msg, error)
        for outcome in outcomes:
            self._after_commit(outcome)
        return outcomes

    def _run_batch(
        self, msgs: Sequence[Inbound], *, isolate: bool
    ) -> tuple[list[Outcome], list[tuple[Inbound, Exception]]]:
        outcomes: list[Outcome] = []
        failures: list[tuple[Inbound, Exception]] = []
        with self._store.transaction():
            for msg in msgs:
                if not isolate:
                    outcomes.append(self._run_one(msg))  # a failure aborts the whole batch
                    continue
                try:
                    with self._store.db.savepoint():
                        outcomes.append(self._run_one(msg))
                except Exception as exc:
                    self._outcomes.pop(msg.key, None)
                    failures.append((msg, exc))
                    outcomes.append(Outcome("failed", str(exc)))
        return outcomes, failures

    def _run_one(self, msg: Inbound) -> Outcome:
        result = run_to_completion(self._guard.handle(msg, self._deliver))
        if isinstance(result, Drop):
            self._store.inbox.finish(msg.key, "dropped", result.reason)
            return Outcome("dropped", result.reason)
        return self._outcomes.pop(msg.key, Outcome("delivered", ""))

    def _failed(self, msg: Inbound, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        parked = self._store.inbox.note_failure(msg.key, error)
        log.error(
            "downstream failed",
            instance=self.instance,
            channel=msg.channel,
            ts=msg.ts,
            error=error,
            parked=parked,
        )

    async def _deliver(self, msg: Inbound) -> None:
        """The guard's downstream: router and gate, inside process()'s transaction."""
        verdict: Verdict | None = None
        route = self._router.route(msg)
        if route.engaged:
            verdict = self._gate.admit(msg, route)
        reason = verdict.reason if verdict else route.reason
        self._store.inbox.finish(msg.key, "done", reason)
        self._outcomes[msg.key] = Outcome("delivered", reason, verdict, msg)

    def _after_commit(self, outcome: Outcome) -> None:
        verdict, msg = outcome.verdict, outcome.delivered
        if verdict is None or msg is None:
            return
        if verdict.action == "allow" and self._on_pending is not None:
            self._on_pending(msg)  # as delivered: a bot's admitted sender id and hop
        if verdict.action in ("decline", "hold") and self._on_outbox is not None:
            self._on_outbox()
