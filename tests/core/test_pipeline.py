"""The pipeline's batch transaction: real guard, A2A policy, router, gate and SQLite."""

from __future__ import annotations

import dataclasses

from nanoslack.a2a import A2APolicy, install_a2a_policy
from nanoslack.config import A2AConfig
from nanoslack.gate import Gate
from nanoslack.guard import BotInboundGuard
from nanoslack.inbound import Inbound
from nanoslack.pipeline import Identity, Pipeline
from nanoslack.router import Route, Router
from nanoslack.store import Store
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM, bot_message, message


class FaultyRouter(Router):
    """The real router, except that it breaks on the messages it is told to."""

    def __init__(self, store: Store, broken: set[str]) -> None:
        super().__init__(store, instance=INSTANCE, bot_user_id=BOT_USER)
        self.broken = broken

    def route(self, msg: Inbound) -> Route:
        if msg.ts in self.broken:
            raise RuntimeError("router down")
        return super().route(msg)


def make_pipeline(store: Store, broken: set[str]) -> Pipeline:
    guard = BotInboundGuard(INSTANCE)
    config = A2AConfig(frozenset({ROOM}), 6)
    install_a2a_policy(guard, A2APolicy(instance=INSTANCE, config=lambda: config, ledger=store.hops))
    return Pipeline(
        identity=Identity(instance=INSTANCE, team_id="T0TEAM", bot_user_id=BOT_USER, bot_id="B0DANA"),
        store=store,
        guard=guard,
        router=FaultyRouter(store, broken),
        gate=Gate(store, instance=INSTANCE, owners=[OWNER]),
    )


async def test_a_failing_message_rolls_back_alone_and_consumes_no_hop(store: Store) -> None:
    msgs = [dataclasses.replace(bot_message(mention=True), sender_id="") for _ in range(3)]
    pipeline = make_pipeline(store, broken={msgs[1].ts})
    assert pipeline.accept_many(msgs) == [True, True, True]

    outcomes = await pipeline.process_many(msgs)

    assert [o.status for o in outcomes] == ["delivered", "failed", "delivered"]
    assert [h.count for h in store.hops.counts()] == [2]
    assert [store.inbox.status(m.key) for m in msgs] == ["done", "received", "done"]
    assert store.messages.get(msgs[1].key) is None
    assert [o.delivered.hop if o.delivered else 0 for o in outcomes] == [1, 0, 2]


async def test_a_whole_batch_commits_once_and_duplicates_are_recorded_once(store: Store) -> None:
    msgs = [message(user=OWNER, mention=True) for _ in range(5)]
    pipeline = make_pipeline(store, broken=set())
    assert pipeline.accept_many([*msgs, msgs[0]]) == [True] * 5 + [False]
    outcomes = await pipeline.process_many(msgs)
    assert {o.status for o in outcomes} == {"delivered"}
    assert [o.verdict.action if o.verdict else None for o in outcomes] == ["allow"] * 5
    assert pipeline.unfinished() == []
