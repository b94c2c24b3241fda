"""One instance's pipeline after the socket (docs/architecture.md).

Order, as a message travels: ``accept_many`` records it in the durable inbox (for the
instance's inbox, ``nanoslack.worker.BatchWorker.take``: the Slack edge acks only after
that); ``process_many`` then runs, for each message and
in ONE transaction per batch, room control (an owner's halt or resume, a bot in a
halted room; ``nanoslack.control``), the guard (admits or drops), the router (engages or
ignores), the gate (allows, holds, refuses or declines) and closes the inbox entry.
That transaction is what makes delivery exactly-once: a crash before it commits
leaves the entries open for ``unfinished`` (resumed at start), a crash after it
leaves nothing to redo. After the commit the guard's ``on_accepted`` runs, and each
message's ``Outcome`` goes back to the caller, the instance's core
(``nanoslack.core``), which starts what comes next: a turn, a halt.

The room features (``nanoslack.features``) take part without being named here: the
router asks them whether a message engages the instance, room control tells them of a
halt and asks them for the hop limit's pause notice, and once the gate has let a
message in, each is told (``RoomFeature.allowed``), in the same transaction.

``nanoslack.core.build_pipeline`` puts room control, guard with the A2A policy, router and
gate in that order; the tests and the benchmark build it through it too. No bolt
here: the edge (``nanoslack.slack``) hands in parsed ``Inbound`` values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from nanoslack import failpoints
from nanoslack.control import Effect, RoomControl
from nanoslack.edits import MessageChanges
from nanoslack.features import RoomFeature
from nanoslack.frozen import quick_init
from nanoslack.gate import Decision, Gate, Verdict
from nanoslack.guard import Admitted, BotInboundGuard
from nanoslack.inbound import Drop, Identity, Inbound, InboxKey
from nanoslack.logs import get_logger
from nanoslack.router import Route, Router
from nanoslack.store import Store, store_unavailable

log = get_logger(__name__)


Status = Literal["processed", "dropped", "failed"]
# An inbox entry to close at the end of its batch: key, status, reason.
Finish = tuple[InboxKey, str, str | None]


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one message.

    ``processed``: the guard admitted it and router and gate decided (``route`` and,
    when it engaged, ``verdict`` say what); ``dropped``: the guard dropped it;
    ``failed``: processing raised and rolled back (the inbox entry stays open).
    """

    status: Status
    reason: str
    # The guard's admission: the message as it went downstream (re-attributed, hop set).
    admitted: Admitted | None = None
    route: Route | None = None
    verdict: Verdict | None = None
    # Room control took the message (a halt, a resume, a bot in a halted room).
    control: Effect | None = None
    # A deletion's files no stored message names any more (``nanoslack.edits``).
    files_gone: tuple[str, ...] = ()

    @property
    def msg(self) -> Inbound | None:
        return self.admitted.msg if self.admitted else None


class Pipeline:
    def __init__(
        self,
        *,
        identity: Identity,
        store: Store,
        control: RoomControl,
        guard: BotInboundGuard,
        router: Router,
        gate: Gate,
        features: Sequence[RoomFeature],
        fence: Callable[[], bool] | None = None,
        discard_files: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        self.identity = identity
        self.instance = identity.instance
        self.control = control
        self.guard = guard
        self.gate = gate
        self.changes = MessageChanges(store, instance=identity.instance, bot_user_id=identity.bot_user_id)
        self._store = store
        self._router = router
        self._features = tuple(features)
        # Several hosts (docs/operations.md): whether this process still holds the instance's
        # lease, asked inside each batch's transaction.
        self._fence = fence
        # Removes the downloads of a deleted message's files, once the deletion is committed
        # (the edge's ``FileSource.discard``; None: the instance downloads nothing).
        self._discard_files = discard_files

    def accept_many(self, msgs: Sequence[Inbound]) -> list[bool]:
        """Record before ack, a burst in one commit (the intake's group commit);
        False for a duplicate (Slack retry, ``app_mention`` twin).

        Fenced like processing: a process that lost the instance's lease records
        nothing (``LeaseLost``), so the envelopes stay unacked and Slack brings them
        to the new holder; what it recorded while it held the lease committed before
        the takeover, and the new holder resumes it.
        """
        with self._store.transaction():
            if self._fence is not None and not self._fence():
                raise LeaseLost()
            return self._store.inbox.record_many(msgs)

    def resume(self, room: str, *, by_user: str) -> bool:
        """An owner's Resume click on a halt's question (``RoomControl.resume``), in its
        own transaction; False when the room was not halted."""
        with self._store.transaction():
            return self.control.resume(room, by_user=by_user)

    def decide_approval(self, approval_id: int, *, allow: bool, by_user: str) -> Decision:
        """An owner's click on an approval request (``Gate.decide``)."""
        return self.gate.decide(approval_id, allow=allow, by_user=by_user)

    def unfinished(self) -> list[Inbound]:
        return self._store.inbox.unfinished(self.instance)

    def is_open(self, msg: Inbound) -> bool:
        """Still waiting to be finished (a failed attempt not yet parked)."""
        return self._store.inbox.status(msg.key) == "received"

    def still_open(self, msgs: Sequence[Inbound]) -> list[Inbound]:
        """Those of ``msgs`` still waiting to be finished, in one transaction: before a
        batch is tried again, since an attempt whose commit was cut off may have
        committed after all (only this process runs the instance, so nothing else
        finishes them meanwhile)."""
        with self._store.transaction():
            return [msg for msg in msgs if self.is_open(msg)]

    async def process_many(self, msgs: Sequence[Inbound]) -> list[Outcome]:
        """Guard, route, gate and close the inbox entries in one transaction.

        A failing message rolls back alone: the batch is run again with a savepoint
        per message, so its hop reservation goes with it (docs/architecture.md) and the others commit.
        Batching is what makes the pipeline fast: SQLite's cost is the pages a commit
        writes, and consecutive messages share pages. Nothing here waits on the
        network: the senders are named before (``nanoslack.worker``).

        A store that cannot take the batch (``store_unavailable``: the connection lost,
        the disk full, a deadlock's victim) is no message's fault: that error is raised
        as it is, nothing is counted against the messages, and the caller tries the
        batch again (``nanoslack.worker.BatchWorker``).
        """
        try:
            outcomes = self._run_batch_fenced(msgs)
        except LeaseLost:
            # Another process runs the instance now and resumes these entries: touch
            # nothing (no failure recorded, no side effect).
            log.warning("batch skipped: lease lost", instance=self.instance, messages=len(msgs))
            return [Outcome("failed", LeaseLost.reason) for _ in msgs]
        failpoints.hit("pipeline.committed", len(msgs))
        for msg, outcome in zip(msgs, outcomes, strict=True):
            self._after_commit(msg, outcome)
        return outcomes

    def _run_batch_fenced(self, msgs: Sequence[Inbound]) -> list[Outcome]:
        try:
            return self._run_batch(msgs, isolate=False)  # optimistic: no savepoints
        except LeaseLost:
            raise
        except Exception as exc:
            if store_unavailable(exc) is not None:
                raise
            if len(msgs) == 1:
                return [_failed(exc)]
            return self._run_batch(msgs, isolate=True)

    def _run_batch(self, msgs: Sequence[Inbound], *, isolate: bool) -> list[Outcome]:
        """One transaction; its per-message writes go out as few statements: the inbox
        entries closed in one call, the ``messages`` rows and the engaged threads in one each
        (``batched``), the
        engaged threads looked up once (``Router.prefetch``). With ``isolate`` each
        message has its own savepoint and its writes go out before it is released."""
        outcomes: list[Outcome] = []
        store = self._store
        with store.transaction():
            if self._fence is not None and not self._fence():
                raise LeaseLost()
            # Isolated, each message asks the store itself, as a lookup that fails must
            # fail that message alone.
            self._router.prefetch(() if isolate else msgs)
            if not isolate:  # a failure aborts the whole batch
                finished: list[Finish] = []
                with store.messages.batched(), store.groups.batched():
                    for msg in msgs:
                        outcomes.append(self._process_one(msg, finished))
                store.inbox.finish_many(finished)
                return outcomes
            for msg in msgs:
                try:
                    with store.db.savepoint():
                        finished = []
                        with store.messages.batched(), store.groups.batched():
                            outcome = self._process_one(msg, finished)
                        store.inbox.finish_many(finished)
                    outcomes.append(outcome)
                except Exception as exc:
                    if store_unavailable(exc) is not None:
                        raise  # the whole batch waits for the store, not this message
                    outcomes.append(_failed(exc))
        return outcomes

    def _process_one(self, msg: Inbound, finished: list[Finish]) -> Outcome:
        if msg.is_change:
            return self._change(msg, finished)
        control = self.control.decide(msg)
        if control is not None:
            status = "done" if control.status == "processed" else "dropped"
            finished.append((msg.key, status, control.reason))
            return Outcome(control.status, control.reason, control=control.effect)
        return self._judge(msg, msg.key, finished)

    def _change(self, msg: Inbound, finished: list[Finish]) -> Outcome:
        """An edit or a deletion (``nanoslack.edits``): applied to the store, never a hop;
        only an edit that newly names the instance goes on, as a mention would."""
        change = self.changes.apply(msg)
        if change.route is None:
            finished.append((msg.key, "done" if change.status == "processed" else "dropped", change.reason))
            return Outcome(change.status, change.reason, files_gone=change.files_gone)
        outcome = self._judge(change.route, msg.key, finished)
        if change.edit_of is not None:
            self._store.messages.mark_edit(change.route.key, change.edit_of)
        return outcome

    def _judge(self, msg: Inbound, key: InboxKey, finished: list[Finish]) -> Outcome:
        """Guard, router and gate; ``key``: the inbox entry to close."""
        decision = self.guard.decide(msg)
        if isinstance(decision, Drop):
            finished.append((key, "dropped", decision.reason))
            return Outcome("dropped", decision.reason)
        admitted = decision.msg
        route = self._router.route(admitted)
        verdict = self.gate.judge(admitted, route) if route.engaged else None
        if verdict is not None and verdict.action == "allow":
            for feature in self._features:
                feature.allowed(admitted, route.room, route.reason)
        reason = verdict.reason if verdict else route.reason
        finished.append((key, "done", reason))
        return Outcome("processed", reason, decision, route, verdict)

    def _after_commit(self, msg: Inbound, outcome: Outcome) -> None:
        if outcome.status == "failed":
            self._record_failure(msg, outcome.reason)
        elif outcome.admitted is not None:
            outcome.admitted.accepted()
        if outcome.files_gone and self._discard_files is not None:
            self._discard_files(outcome.files_gone)

    def _record_failure(self, msg: Inbound, error: str) -> None:
        try:
            parked = self._store.inbox.note_failure(msg.key, error)
        except Exception as exc:
            if store_unavailable(exc) is None:
                raise
            parked = False  # not counted: the entry stays open and is tried again
        log.error(
            "downstream failed",
            instance=self.instance,
            channel=msg.channel,
            ts=msg.ts,
            error=error,
            parked=parked,
        )


class LeaseLost(Exception):
    reason = "lease lost"


def _failed(exc: Exception) -> Outcome:
    return Outcome("failed", f"{type(exc).__name__}: {exc}")
