"""The seed's policy reference cases, run through the real guard and the real store."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from nanoslack.a2a import A2APolicy, install_a2a_policy
from nanoslack.config import A2AConfig
from nanoslack.guard import BotInboundGuard, Delivered
from nanoslack.inbound import Drop, Inbound
from nanoslack.store import Store
from tests.unit.helpers import MessageFactory, Sink

ROOMS = frozenset({"G0A", "C0B"})


class Fleet:
    """One guard + policy per instance over a shared store, like `nanoslack run`."""

    def __init__(self, store: Store, *, max_hops: int = 2, scope: str = "identity") -> None:
        self.store = store
        self.config = A2AConfig(ROOMS, max_hops)
        self.scope = scope
        self.guards: dict[str, BotInboundGuard] = {}
        self.sink = Sink()
        self._ts = 0

    def guard(self, instance: str) -> BotInboundGuard:
        if instance not in self.guards:
            guard = BotInboundGuard(instance)
            policy = A2APolicy(
                instance=instance, config=lambda: self.config, ledger=self.store.hops, scope=self.scope
            )
            install_a2a_policy(guard, policy)
            self.guards[instance] = guard
        return self.guards[instance]

    def next_ts(self) -> str:
        self._ts += 1
        return f"1700000000.{self._ts:06d}"

    async def send(self, make: MessageFactory, *, to: str = "dana", **kw: object) -> Delivered | Drop:
        kw.setdefault("ts", self.next_ts())
        msg = make(instance=to, **kw)
        return await self.guard(to).handle(msg, self.sink)


def admitted(result: Delivered | Drop) -> bool:
    return isinstance(result, Delivered)


async def test_bot_in_allowlisted_room_is_admitted_as_slack_bot_id(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    result = await fleet.send(bot, bot_id="B0ELI", channel="G0A")
    assert isinstance(result, Delivered)
    assert result.msg.sender_id == "slack:bot:B0ELI"
    assert (result.msg.hop, result.msg.hop_limit) == (1, 2)
    assert fleet.sink.received == [result.msg]


async def test_bot_in_another_room_is_dropped(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    assert await fleet.send(bot, channel="C0ELSEWHERE") == Drop("room not in SLACK_A2A_ROOMS")
    assert fleet.sink.received == []


async def test_humans_pass_unchanged_in_and_outside_a2a_rooms(store: Store, human: MessageFactory) -> None:
    fleet = Fleet(store)
    for channel in ("G0A", "C0ELSEWHERE", "D0DM"):
        result = await fleet.send(human, channel=channel)
        assert isinstance(result, Delivered) and result.msg == fleet.sink.received[-1]
        assert result.msg.sender_id == "slack:U0HUMAN" and result.msg.hop == 0


async def test_third_consecutive_bot_message_is_dropped_at_max_hops_2(
    store: Store, bot: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=2)
    first, second = await fleet.send(bot), await fleet.send(bot)
    with capture_logs() as logs:
        third = await fleet.send(bot)
    assert admitted(first) and admitted(second)
    assert third == Drop("hop limit reached")
    limit = [
        e for e in logs if e["event"] == "hop limit reached — dropping bot messages until a human speaks"
    ]
    assert limit == [
        {
            "event": "hop limit reached — dropping bot messages until a human speaks",
            "instance": "dana",
            "room": "G0A",
            "bot_id": "B0ELI",
            "max": 2,
            "log_level": "info",
        }
    ]


async def test_human_message_resets_the_hop_count(
    store: Store, bot: MessageFactory, human: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=2)
    await fleet.send(bot)
    await fleet.send(bot)
    assert not admitted(await fleet.send(bot))
    assert admitted(await fleet.send(human))
    results = [await fleet.send(bot) for _ in range(3)]
    assert [admitted(r) for r in results] == [True, True, False]


async def test_the_last_allowed_hop_is_marked_wrapping_up(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    first, second = await fleet.send(bot), await fleet.send(bot)
    assert isinstance(first, Delivered) and isinstance(second, Delivered)
    assert not first.msg.wrapping_up and second.msg.wrapping_up


async def test_counts_are_independent_per_room(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    await fleet.send(bot, channel="G0A")
    await fleet.send(bot, channel="G0A")
    assert not admitted(await fleet.send(bot, channel="G0A"))
    assert admitted(await fleet.send(bot, channel="C0B"))
    assert admitted(await fleet.send(bot, channel="C0B"))


async def test_counts_are_independent_per_identity(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    await fleet.send(bot, to="dana")
    await fleet.send(bot, to="dana")
    assert not admitted(await fleet.send(bot, to="dana"))
    assert admitted(await fleet.send(bot, to="eli"))
    assert admitted(await fleet.send(bot, to="eli"))
    assert not admitted(await fleet.send(bot, to="eli"))


async def test_human_reset_in_identity_scope_clears_only_the_observing_instance(
    store: Store, bot: MessageFactory, human: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=1)
    await fleet.send(bot, to="dana")
    await fleet.send(bot, to="eli")
    await fleet.send(human, to="dana")
    assert admitted(await fleet.send(bot, to="dana"))
    assert not admitted(await fleet.send(bot, to="eli"))


async def test_room_scope_counts_one_budget_across_instances_and_resets_it_all(
    store: Store, bot: MessageFactory, human: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=2, scope="room")
    assert admitted(await fleet.send(bot, to="dana"))
    assert admitted(await fleet.send(bot, to="eli"))
    assert not admitted(await fleet.send(bot, to="dana"))
    await fleet.send(human, to="eli")
    assert admitted(await fleet.send(bot, to="dana"))


async def test_downstream_failure_consumes_no_hop(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    fleet.sink.fail = True
    with pytest.raises(RuntimeError):
        await fleet.send(bot)
    fleet.sink.fail = False
    results = [await fleet.send(bot) for _ in range(3)]
    assert [admitted(r) for r in results] == [True, True, False]


async def test_redelivery_of_an_admitted_message_keeps_its_hop(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    first = await fleet.send(bot, ts="1.000001")
    again = await fleet.send(bot, ts="1.000001")
    assert isinstance(first, Delivered) and isinstance(again, Delivered)
    assert first.msg.hop == again.msg.hop == 1
    assert admitted(await fleet.send(bot))


async def test_concurrent_deliveries_never_over_admit(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=6)

    async def slow_sink(msg: Inbound) -> None:
        await asyncio.sleep(0)

    guard = fleet.guard("dana")
    results = await asyncio.gather(
        *(guard.handle(bot(instance="dana", ts=f"2.{i:06d}"), slow_sink) for i in range(50))
    )
    assert sum(admitted(r) for r in results) == 6


async def test_room_list_changes_apply_on_the_next_message(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    assert not admitted(await fleet.send(bot, channel="G0NEW"))
    fleet.config = A2AConfig(ROOMS | {"G0NEW"}, 2)
    assert admitted(await fleet.send(bot, channel="G0NEW"))


def test_unknown_hop_scope_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="scope"):
        A2APolicy(instance="dana", config=lambda: A2AConfig(ROOMS, 2), ledger=store.hops, scope="fleet")
