"""The lease fence (docs/operations.md): a pipeline whose process lost the instance's lease
records and processes nothing, so the new holder finds every entry as it was left.

The fence is the real one, the store's lease row asked inside the transaction; the
lease is taken away the way another process (or an operator's SQL) takes it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nanoslack.config import A2AConfig
from nanoslack.inbound import Identity
from nanoslack.pipeline import LeaseLost, Outcome, Pipeline
from nanoslack.store import Store
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM, bot_message, make_pipeline, message

IDENTITY = Identity(instance=INSTANCE, team_id="T0TEAM", bot_user_id=BOT_USER, bot_id="B0DANA")
HOLDER = "host-a:101:0000aaaa"  # this process
OTHER = "host-b:202:0000bbbb"  # the process that took the instance over


def fenced_pipeline(store: Store) -> Pipeline:
    config = A2AConfig(frozenset({ROOM}), 6)
    return make_pipeline(
        store, IDENTITY, a2a_config=lambda: config, fence=lambda: store.leases.holds(INSTANCE, HOLDER)
    )


def allowed(outcomes: list[Outcome]) -> list[str]:
    """The messages that go on to a turn."""
    return [o.msg.ts for o in outcomes if o.msg and o.verdict and o.verdict.action == "allow"]


def hand_lease_to(sql: Callable[[str], int], holder: str) -> None:
    assert sql(f"UPDATE instance_leases SET holder = '{holder}' WHERE instance = '{INSTANCE}'") == 1


async def test_a_pipeline_whose_lease_was_taken_over_records_nothing_and_processes_nothing(
    store: Store, sql: Callable[[str], int]
) -> None:
    assert store.leases.take(INSTANCE, HOLDER, 60).holder == HOLDER
    pipeline = fenced_pipeline(store)
    # Each would leave a trace: a pending message, a hop (and an approval DM), a halt (and its notice).
    msgs = [
        message(user=OWNER, mention=True, text="plan the release"),
        bot_message(mention=True, text="may I help?"),
        message(user=OWNER, text="stop"),
    ]
    assert pipeline.accept_many(msgs) == [True, True, True]  # recorded while the lease was ours

    hand_lease_to(sql, OTHER)
    late = message(user=OWNER, mention=True, text="and this?")
    with pytest.raises(LeaseLost):
        pipeline.accept_many([late])  # the edge does not ack: Slack redelivers to the new holder
    assert store.inbox.status(late.key) is None

    outcomes = await pipeline.process_many(msgs)
    assert [o.status for o in outcomes] == ["failed"] * 3
    assert sorted(m.ts for m in pipeline.unfinished()) == [m.ts for m in msgs]  # left for the new holder
    assert [store.messages.get(m.key) for m in msgs] == [None, None, None]
    assert store.hops.counts() == []
    assert store.room_halts.halted_rooms() == frozenset()
    assert store.outbox.queued(INSTANCE) == []
    assert allowed(outcomes) == []

    # The lease back: the same batch goes through every stage (what the fence held back).
    hand_lease_to(sql, HOLDER)
    outcomes = await pipeline.process_many(msgs)
    assert [o.status for o in outcomes] == ["processed"] * 3
    assert pipeline.unfinished() == []
    assert allowed(outcomes) == [msgs[0].ts]
    assert [h.count for h in store.hops.counts()] == [1]
    assert store.room_halts.halted_rooms() == frozenset({ROOM})
