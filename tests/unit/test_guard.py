from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from structlog.testing import capture_logs

from nanoslack.guard import Admit, Admitted, BotInboundGuard
from nanoslack.inbound import Drop, Inbound
from tests.unit.helpers import MessageFactory


def admit_all(msg: Inbound) -> Admit | Drop:
    return Admit(sender_id=f"slack:bot:{msg.bot_id}", hop=1, hop_limit=2)


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def test_humans_pass_unchanged(human: MessageFactory) -> None:
    guard, msg = BotInboundGuard("dana"), human()
    assert guard.decide(msg) == Admitted(msg)


def test_no_policy_drops_bots_with_a_debug_log(bot: MessageFactory) -> None:
    guard = BotInboundGuard("dana")
    with capture_logs() as logs:
        assert guard.decide(bot()) == Drop("no bot-inbound policy installed")
    (dropped,) = events(logs, "bot message dropped")
    assert dropped["log_level"] == "debug" and dropped["reason"] == "no bot-inbound policy installed"
    assert dropped["bot_id"] == "B0ELI" and dropped["instance"] == "dana"


def test_admitted_bot_is_reattributed_and_carries_its_hop(bot: MessageFactory) -> None:
    guard = BotInboundGuard("dana")
    guard.set_policy(admit_all)
    with capture_logs() as logs:
        result = guard.decide(bot())
    assert isinstance(result, Admitted)
    assert (result.msg.sender_id, result.msg.hop, result.msg.hop_limit) == ("slack:bot:B0ELI", 1, 2)
    (admitted,) = events(logs, "bot message admitted")
    assert (admitted["sender"], admitted["hop"], admitted["max"]) == ("slack:bot:B0ELI", 1, 2)


def test_policy_drop_is_logged_at_info_with_its_reason(bot: MessageFactory) -> None:
    def refuse(msg: Inbound) -> Admit | Drop:
        return Drop("not today")

    guard = BotInboundGuard("dana")
    guard.set_policy(refuse)
    with capture_logs() as logs:
        assert guard.decide(bot()) == Drop("not today")
    (dropped,) = events(logs, "bot message dropped")
    assert (dropped["log_level"], dropped["reason"]) == ("info", "not today")


def test_guard_fails_closed_on_a_throwing_policy(bot: MessageFactory) -> None:
    def broken(msg: Inbound) -> Admit | Drop:
        raise KeyError("config")

    guard = BotInboundGuard("dana")
    guard.set_policy(broken)
    with capture_logs() as logs:
        result = guard.decide(bot())
    assert isinstance(result, Drop) and "KeyError" in result.reason
    (dropped,) = events(logs, "bot message dropped")
    assert dropped["log_level"] == "warning"


def test_guard_fails_closed_on_a_policy_answering_nonsense(bot: MessageFactory) -> None:
    def confused(msg: Inbound) -> Admit | Drop:
        return Admit(sender_id="")

    def not_an_answer(msg: Inbound) -> Admit | Drop:
        return "yes"  # type: ignore[return-value]

    for policy in (confused, not_an_answer):
        guard = BotInboundGuard("dana")
        guard.set_policy(policy)
        assert isinstance(guard.decide(bot()), Drop)


def test_replacing_the_policy_warns(bot: MessageFactory) -> None:
    def other(msg: Inbound) -> Admit | Drop:
        return Drop("other")

    guard = BotInboundGuard("dana")
    with capture_logs() as logs:
        guard.set_policy(admit_all)
        guard.set_policy(admit_all)  # the same policy again is not a replacement
        guard.set_policy(other)
    (replaced,) = events(logs, "bot-inbound policy replaced")
    assert replaced["log_level"] == "warning"
    assert guard.decide(bot()) == Drop("other")


def test_observers_see_humans_but_not_bots(human: MessageFactory, bot: MessageFactory) -> None:
    seen: list[Inbound] = []
    guard = BotInboundGuard("dana")
    guard.set_policy(admit_all)
    guard.add_observer(seen.append)
    h = human()
    guard.decide(h)
    guard.decide(bot())
    assert seen == [h]


def test_a_throwing_observer_does_not_stop_a_human(human: MessageFactory) -> None:
    def broken(msg: Inbound) -> None:
        raise RuntimeError("observer bug")

    later: list[Inbound] = []
    guard, msg = BotInboundGuard("dana"), human()
    guard.add_observer(broken)
    guard.add_observer(later.append)
    with capture_logs() as logs:
        assert guard.decide(msg) == Admitted(msg)
    assert later == [msg]
    (failed,) = events(logs, "human observer failed")
    assert failed["log_level"] == "warning"


def test_the_policy_callback_rides_on_the_admission_and_its_failure_is_only_logged(
    bot: MessageFactory,
) -> None:
    calls: list[str] = []

    def policy(msg: Inbound) -> Admit | Drop:
        return Admit("slack:bot:B0ELI", on_accepted=lambda: calls.append("accepted"))

    def broken_callback() -> None:
        raise RuntimeError("callback bug")

    guard = BotInboundGuard("dana")
    guard.set_policy(policy)
    result = guard.decide(bot())
    assert isinstance(result, Admitted) and calls == []  # nothing runs before the pipeline commits
    result.accepted()
    assert calls == ["accepted"]
    with capture_logs() as logs:
        Admitted(result.msg, broken_callback).accepted()
    (failed,) = events(logs, "admission callback failed")
    assert failed["log_level"] == "warning"
