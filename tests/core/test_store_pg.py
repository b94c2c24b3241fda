"""What several fleet processes sharing one store rely on (docs/operations.md), on SQLite and
on a real PostgreSQL server: each ``Store`` below is one process's connection."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from nanoslack.gate import Gate, Verdict
from nanoslack.inbound import Inbound
from nanoslack.router import Router
from nanoslack.store import SCHEMA_VERSION, Store
from tests.core.core_helpers import (
    INSTANCE,
    OWNER,
    ROOM,
    bot_message,
    make_gate,
    make_router,
    message,
)

ELI = "slack:bot:B0ELI"


@pytest.fixture
def other(store_url: str, store: Store) -> Iterator[Store]:
    """A second process's store on the same database."""
    s = Store.open(store_url)
    yield s
    s.close()


def route_and_judge(store: Store, router: Router, gate: Gate, msg: Inbound) -> Verdict | None:
    with store.transaction():
        route = router.route(msg)
        return gate.judge(msg, route) if route.engaged else None


def fleet(store: Store) -> tuple[Router, Gate]:
    return make_router(store), make_gate(store)


def test_a_bot_message_stores_its_sender_and_a_later_name_is_kept_never_erased(store: Store) -> None:
    # The first bot message on PostgreSQL used to fail here (SQLite-only ``IS NOT``).
    store.users.ensure(ELI, kind="bot")
    assert store.users.ensure(ELI, kind="bot", display_name="eli").display_name == "eli"
    assert store.users.ensure(ELI, kind="bot", display_name="eli").display_name == "eli"
    assert store.users.ensure(ELI, kind="bot").display_name == "eli"
    assert store.users.ensure(ELI, kind="bot", display_name="eli2").display_name == "eli2"


def test_reopening_a_store_keeps_the_schema_at_the_current_version(store_url: str, store: Store) -> None:
    with Store.open(store_url) as again, again.transaction() as conn:
        version = conn.execute(text("SELECT value FROM schema_meta WHERE key='version'")).scalar_one()
    assert int(version) == SCHEMA_VERSION == 20


def test_a_policy_change_made_with_psql_applies_to_the_next_message_in_every_process(
    store: Store, other: Store, sql: Callable[[str], int]
) -> None:
    routers = [fleet(store), fleet(other)]
    for s, (router, gate) in zip((store, other), routers, strict=True):
        route_and_judge(s, router, gate, message(mention=True, user=OWNER))  # creates the room, warms caches
        assert route_and_judge(s, router, gate, bot_message(mention=True)) == Verdict(
            "hold", "awaiting approval", 1
        )
    changed = sql(
        f"UPDATE messaging_groups SET unknown_sender_policy='public' WHERE platform_id='slack:{ROOM}'"
    )
    assert changed == 1
    for s, (router, gate) in zip((store, other), routers, strict=True):
        assert route_and_judge(s, router, gate, bot_message(mention=True)) == Verdict("allow", "public")


def test_a_member_removed_with_psql_is_refused_on_the_next_message(
    store: Store, sql: Callable[[str], int]
) -> None:
    router, gate = fleet(store)
    route_and_judge(store, router, gate, message(mention=True, user=OWNER))
    sql("UPDATE messaging_groups SET unknown_sender_policy='strict'")
    store.agents.add_member(store.agents.ensure(INSTANCE).id, ELI)
    assert route_and_judge(store, router, gate, bot_message(mention=True)) == Verdict("allow", "member")
    assert sql(f"DELETE FROM agent_group_members WHERE user_id='{ELI}'") == 1
    assert route_and_judge(store, router, gate, bot_message(mention=True)) == Verdict("refuse", "strict")


def test_an_approval_decided_in_another_process_replays_the_held_message_once(
    store: Store, other: Store
) -> None:
    """Process B holds eli's message; the click lands in process A (another store):
    the message moves to pending exactly once, and B's outbox gets the request update."""
    router_b, gate_b = fleet(store)
    route_and_judge(store, router_b, gate_b, message(mention=True, user=OWNER))
    held = bot_message(mention=True)
    verdict = route_and_judge(store, router_b, gate_b, held)
    assert verdict is not None and verdict.action == "hold" and verdict.approval_id is not None
    _, gate_a = fleet(other)
    first = gate_a.decide(verdict.approval_id, allow=True, by_user=OWNER)
    second = gate_b.decide(verdict.approval_id, allow=True, by_user=OWNER)
    assert first.applied and not second.applied
    assert first.released == [held.key] and not second.released
    row = store.messages.get(held.key)
    assert row is not None and row.status == "pending"
    assert [m.key for m in store.messages.pending(INSTANCE)].count(held.key) == 1
    assert route_and_judge(store, router_b, gate_b, bot_message(mention=True)) == Verdict("allow", "member")


def test_fifty_concurrent_reservations_over_two_processes_admit_exactly_the_limit(
    store_url: str, store: Store, tmp_path: Path
) -> None:
    limit = 7
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.core.reserve_worker",
                store_url,
                ROOM,
                inst,
                str(first),
                "25",
                str(limit),
                str(go),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for inst, first in (("dana", 1), ("eli", 101))
    ]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        go.touch()
        admitted = [int(w.communicate(timeout=120)[0].strip()) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert sum(admitted) == limit
    assert sum(c.count for c in store.hops.counts() if c.room == ROOM) == limit


def test_an_instance_lease_is_held_by_one_process_until_it_lapses_or_is_released(
    store: Store, other: Store
) -> None:
    assert store.leases.take("dana", "host:1:a", ttl=30).holder == "host:1:a"
    assert other.leases.take("dana", "host:2:b", ttl=30).holder == "host:1:a"
    assert store.leases.renew("dana", "host:1:a", ttl=30)
    assert store.leases.release("dana", "host:1:a")
    assert other.leases.take("dana", "host:2:b", ttl=0.05).holder == "host:2:b"
    assert not store.leases.renew("dana", "host:1:a", ttl=30)
    deadline = time.monotonic() + 5
    while store.leases.take("dana", "host:1:a", ttl=30).holder != "host:1:a":
        assert time.monotonic() < deadline, "a lapsed lease was never taken over"
        time.sleep(0.02)
    assert not other.leases.renew("dana", "host:2:b", ttl=30)


def test_a_lease_of_a_holder_known_dead_is_taken_at_once(store: Store, other: Store) -> None:
    store.leases.take("dana", "host:1:a", ttl=60)
    assert other.leases.take("dana", "host:2:b", ttl=60, stale="host:9:z").holder == "host:1:a"
    assert other.leases.take("dana", "host:2:b", ttl=60, stale="host:1:a").holder == "host:2:b"


def test_hops_written_by_the_instances_previous_holder_are_reset_after_a_takeover(
    store: Store, other: Store
) -> None:
    def reserve(s: Store, ts: str) -> int | None:
        return s.hops.reserve(
            room=ROOM, instance=INSTANCE, ts=ts, bot_id="B0ELI", max_hops=2, scope="identity"
        )

    store.hops.reset(room=ROOM, instance=INSTANCE)  # this process now knows the pair is clean
    assert reserve(other, "1.1") == 1 and reserve(other, "1.2") == 2  # the other process held dana
    store.hops.forget(INSTANCE)  # the lease came back here
    assert store.hops.reset(room=ROOM, instance=INSTANCE) == 2
    assert reserve(store, "1.3") == 1


def test_a_plain_postgresql_url_opens_the_store_with_psycopg(pg_url: str) -> None:
    with Store.open(pg_url.replace("postgresql+psycopg://", "postgresql://", 1)) as s:
        assert s.db.engine.dialect.driver == "psycopg"
        assert s.groups.list() == []
