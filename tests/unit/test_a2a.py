"""The seed's policy reference cases, run through the real guard and the real store."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from nanoslack.a2a import A2APolicy, install_a2a_policy
from nanoslack.config import A2AConfig
from nanoslack.guard import Admitted, BotInboundGuard
from nanoslack.inbound import Drop
from nanoslack.store import Store
from tests.unit.helpers import MessageFactory

ROOMS = frozenset({"G0A", "C0B"})


class Fleet:
    """One guard + policy per instance over a shared store, like `nanoslack run`."""

    def __init__(self, store: Store, *, max_hops: int = 2, scope: str = "identity") -> None:
        self.store = store
        self.config = A2AConfig(ROOMS, max_hops)
        self.scope = scope
        self.guards: dict[str, BotInboundGuard] = {}
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

    def send(self, make: MessageFactory, *, to: str = "dana", **kw: object) -> Admitted | Drop:
        """The guard's decision, committed (as the pipeline commits each batch)."""
        kw.setdefault("ts", self.next_ts())
        msg = make(instance=to, **kw)
        with self.store.transaction():
            return self.guard(to).decide(msg)


def admitted(result: Admitted | Drop) -> bool:
    return isinstance(result, Admitted)


def test_bot_in_allowlisted_room_is_admitted_as_slack_bot_id(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    result = fleet.send(bot, bot_id="B0ELI", channel="G0A")
    assert isinstance(result, Admitted)
    assert result.msg.sender_id == "slack:bot:B0ELI"
    assert (result.msg.hop, result.msg.hop_limit) == (1, 2)


def test_bot_in_another_room_is_dropped(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    assert fleet.send(bot, channel="C0ELSEWHERE") == Drop("room not in SLACK_A2A_ROOMS")
    assert store.hops.counts() == []


def test_humans_pass_unchanged_in_and_outside_a2a_rooms(store: Store, human: MessageFactory) -> None:
    fleet = Fleet(store)
    for channel in ("G0A", "C0ELSEWHERE", "D0DM"):
        msg = human(channel=channel, ts=fleet.next_ts())
        result = fleet.guard("dana").decide(msg)
        assert result == Admitted(msg)
        assert result.msg.sender_id == "slack:U0HUMAN" and result.msg.hop == 0


def test_third_consecutive_bot_message_is_dropped_at_max_hops_2(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    first, second = fleet.send(bot), fleet.send(bot)
    with capture_logs() as logs:
        third = fleet.send(bot)
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


def test_human_message_resets_the_hop_count(store: Store, bot: MessageFactory, human: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    fleet.send(bot)
    fleet.send(bot)
    assert not admitted(fleet.send(bot))
    assert admitted(fleet.send(human))
    results = [fleet.send(bot) for _ in range(3)]
    assert [admitted(r) for r in results] == [True, True, False]


def test_the_last_allowed_hop_is_marked_wrapping_up(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    first, second = fleet.send(bot), fleet.send(bot)
    assert isinstance(first, Admitted) and isinstance(second, Admitted)
    assert not first.msg.wrapping_up and second.msg.wrapping_up


def test_counts_are_independent_per_room(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    fleet.send(bot, channel="G0A")
    fleet.send(bot, channel="G0A")
    assert not admitted(fleet.send(bot, channel="G0A"))
    assert admitted(fleet.send(bot, channel="C0B"))
    assert admitted(fleet.send(bot, channel="C0B"))


def test_counts_are_independent_per_identity(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    fleet.send(bot, to="dana")
    fleet.send(bot, to="dana")
    assert not admitted(fleet.send(bot, to="dana"))
    assert admitted(fleet.send(bot, to="eli"))
    assert admitted(fleet.send(bot, to="eli"))
    assert not admitted(fleet.send(bot, to="eli"))


def test_human_reset_in_identity_scope_clears_only_the_observing_instance(
    store: Store, bot: MessageFactory, human: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=1)
    fleet.send(bot, to="dana")
    fleet.send(bot, to="eli")
    fleet.send(human, to="dana")
    assert admitted(fleet.send(bot, to="dana"))
    assert not admitted(fleet.send(bot, to="eli"))


def test_room_scope_counts_one_budget_across_instances_and_resets_it_all(
    store: Store, bot: MessageFactory, human: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=2, scope="room")
    assert admitted(fleet.send(bot, to="dana"))
    assert admitted(fleet.send(bot, to="eli"))
    assert not admitted(fleet.send(bot, to="dana"))
    fleet.send(human, to="eli")
    assert admitted(fleet.send(bot, to="dana"))


def test_room_scope_counts_a_message_heard_by_every_instance_as_one_hop(
    store: Store, bot: MessageFactory
) -> None:
    fleet = Fleet(store, max_hops=2, scope="room")
    hops = []
    for ts in ("1.000001", "1.000002"):
        for to in ("dana", "eli"):
            result = fleet.send(bot, to=to, ts=ts)
            assert isinstance(result, Admitted)
            hops.append(result.msg.hop)
    assert hops == [1, 1, 2, 2]  # the second instance to hear it pays nothing, even at the limit
    assert not admitted(fleet.send(bot, to="dana", ts="1.000003"))


def test_a_resumed_earlier_message_keeps_its_place_among_the_hops(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=3)
    fleet.send(bot, ts="1.000002")
    fleet.send(bot, ts="1.000003")
    earlier = fleet.send(bot, ts="1.000001")  # recorded before the others, processed after them
    assert isinstance(earlier, Admitted) and earlier.msg.hop == 1
    assert not admitted(fleet.send(bot, ts="1.000004"))


def test_a_rolled_back_admission_consumes_no_hop(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    with pytest.raises(RuntimeError), store.transaction():
        assert admitted(fleet.guard("dana").decide(bot(instance="dana", ts=fleet.next_ts())))
        raise RuntimeError("router down")  # the rest of the message's processing failed
    results = [fleet.send(bot) for _ in range(3)]
    assert [admitted(r) for r in results] == [True, True, False]


def test_redelivery_of_an_admitted_message_keeps_its_hop(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store, max_hops=2)
    first = fleet.send(bot, ts="1.000001")
    again = fleet.send(bot, ts="1.000001")
    assert isinstance(first, Admitted) and isinstance(again, Admitted)
    assert first.msg.hop == again.msg.hop == 1
    assert admitted(fleet.send(bot))


def test_room_list_changes_apply_on_the_next_message(store: Store, bot: MessageFactory) -> None:
    fleet = Fleet(store)
    assert not admitted(fleet.send(bot, channel="G0NEW"))
    fleet.config = A2AConfig(ROOMS | {"G0NEW"}, 2)
    assert admitted(fleet.send(bot, channel="G0NEW"))


def test_unknown_hop_scope_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="scope"):
        A2APolicy(instance="dana", config=lambda: A2AConfig(ROOMS, 2), ledger=store.hops, scope="fleet")
