"""The pipeline's batch transaction: real guard, A2A policy, router, gate and SQLite."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from nanoslack.config import A2AConfig
from nanoslack.guard import Admit
from nanoslack.inbound import Drop, Identity, Inbound
from nanoslack.pipeline import Pipeline
from nanoslack.store import Store
from tests.core import core_helpers
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM, bot_message, message

IDENTITY = Identity(instance=INSTANCE, team_id="T0TEAM", bot_user_id=BOT_USER, bot_id="B0DANA")


def make_pipeline(store: Store) -> Pipeline:
    config = A2AConfig(frozenset({ROOM}), 6)
    return core_helpers.make_pipeline(store, IDENTITY, a2a_config=lambda: config)


def break_writes_of(sql: Callable[[str], int], store: Store, ts: str) -> None:
    """A real database failure for one message: its ``messages`` row cannot be written."""
    if store.db.is_sqlite:
        sql(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON messages"
            f" WHEN NEW.ts = '{ts}' BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
        return
    with store.transaction() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'disk says no'; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON messages FOR EACH ROW"
            f" WHEN (NEW.ts = '{ts}') EXECUTE FUNCTION refuse_one()"
        )


async def test_a_failing_message_rolls_back_alone_and_consumes_no_hop(
    store: Store, sql: Callable[[str], int]
) -> None:
    msgs = [dataclasses.replace(bot_message(mention=True), sender_id="") for _ in range(3)]
    break_writes_of(sql, store, msgs[1].ts)
    pipeline = make_pipeline(store)
    assert pipeline.accept_many(msgs) == [True, True, True]

    outcomes = await pipeline.process_many(msgs)

    assert [o.status for o in outcomes] == ["processed", "failed", "processed"]
    assert "disk says no" in outcomes[1].reason
    assert [h.count for h in store.hops.counts()] == [2]
    assert [store.inbox.status(m.key) for m in msgs] == ["done", "received", "done"]
    assert store.messages.get(msgs[1].key) is None
    assert [o.msg.hop if o.msg else 0 for o in outcomes] == [1, 0, 2]


async def test_a_whole_batch_commits_once_and_duplicates_are_recorded_once(store: Store) -> None:
    msgs = [message(user=OWNER, mention=True) for _ in range(5)]
    pipeline = make_pipeline(store)
    assert pipeline.accept_many([*msgs, msgs[0]]) == [True] * 5 + [False]
    outcomes = await pipeline.process_many(msgs)
    assert {o.status for o in outcomes} == {"processed"}
    assert [o.verdict.action if o.verdict else None for o in outcomes] == ["allow"] * 5
    # What goes on to a turn, in order: each message once.
    assert [o.msg.ts for o in outcomes if o.msg] == [m.ts for m in msgs]
    assert pipeline.unfinished() == []


async def test_outcomes_say_what_each_stage_decided(store: Store) -> None:
    pipeline = make_pipeline(store)
    dropped = bot_message(channel="C0ELSEWHERE", mention=True)
    ignored = message(user=OWNER)  # no mention, no messaging group yet
    allowed = message(user=OWNER, mention=True)
    held = bot_message(mention=True)
    msgs = [
        dataclasses.replace(m, sender_id="") if m.is_bot else m for m in (dropped, ignored, allowed, held)
    ]
    pipeline.accept_many(msgs)

    outcomes = await pipeline.process_many(msgs)

    assert [(o.status, o.reason) for o in outcomes] == [
        ("dropped", "room not in SLACK_A2A_ROOMS"),
        ("processed", "no messaging group"),
        ("processed", "owner"),
        ("processed", "awaiting approval"),
    ]
    assert [o.route.engaged if o.route else None for o in outcomes] == [None, False, True, True]
    assert [o.verdict.action if o.verdict else None for o in outcomes] == [None, None, "allow", "hold"]
    assert outcomes[3].msg is not None and outcomes[3].msg.sender_id == "slack:bot:B0ELI"


async def test_the_policy_callback_runs_after_the_commit_and_never_for_a_failed_message(
    store: Store, sql: Callable[[str], int]
) -> None:
    pipeline = make_pipeline(store)
    msgs = [dataclasses.replace(bot_message(mention=True), sender_id="") for _ in range(2)]
    break_writes_of(sql, store, msgs[1].ts)
    status_when_called: list[str | None] = []
    a2a = pipeline.guard.policy
    assert a2a is not None

    def a2a_with_callback(msg: Inbound) -> Admit | Drop:
        answer = a2a(msg)
        assert isinstance(answer, Admit)
        return dataclasses.replace(
            answer, on_accepted=lambda: status_when_called.append(store.inbox.status(msg.key))
        )

    pipeline.guard.set_policy(a2a_with_callback)
    pipeline.accept_many(msgs)
    await pipeline.process_many(msgs)
    assert status_when_called == ["done"]  # the first message, committed; never the failed one
