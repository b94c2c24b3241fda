from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from nanoslack.guard import Admit, BotInboundGuard, Delivered
from nanoslack.inbound import Drop, Inbound
from tests.unit.helpers import MessageFactory, Sink


async def admit_all(msg: Inbound) -> Admit | Drop:
    return Admit(sender_id=f"slack:bot:{msg.bot_id}", hop=1, hop_limit=2)


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_humans_pass_unchanged(human: MessageFactory) -> None:
    guard, sink, msg = BotInboundGuard("dana"), Sink(), human()
    assert await guard.handle(msg, sink) == Delivered(msg)
    assert sink.received == [msg]


async def test_no_policy_drops_bots_with_a_debug_log(bot: MessageFactory) -> None:
    guard, sink = BotInboundGuard("dana"), Sink()
    with capture_logs() as logs:
        assert await guard.handle(bot(), sink) == Drop("no bot-inbound policy installed")
    assert sink.received == []
    (dropped,) = events(logs, "bot message dropped")
    assert dropped["log_level"] == "debug" and dropped["reason"] == "no bot-inbound policy installed"
    assert dropped["bot_id"] == "B0ELI" and dropped["instance"] == "dana"


async def test_admitted_bot_is_reattributed_and_carries_its_hop(bot: MessageFactory) -> None:
    guard, sink = BotInboundGuard("dana"), Sink()
    guard.set_policy(admit_all)
    with capture_logs() as logs:
        result = await guard.handle(bot(), sink)
    assert isinstance(result, Delivered)
    assert sink.received == [result.msg]
    assert (result.msg.sender_id, result.msg.hop, result.msg.hop_limit) == ("slack:bot:B0ELI", 1, 2)
    (admitted,) = events(logs, "bot message admitted")
    assert (admitted["sender"], admitted["hop"], admitted["max"]) == ("slack:bot:B0ELI", 1, 2)


async def test_policy_drop_is_logged_at_info_with_its_reason(bot: MessageFactory) -> None:
    async def refuse(msg: Inbound) -> Admit | Drop:
        return Drop("not today")

    guard, sink = BotInboundGuard("dana"), Sink()
    guard.set_policy(refuse)
    with capture_logs() as logs:
        assert await guard.handle(bot(), sink) == Drop("not today")
    (dropped,) = events(logs, "bot message dropped")
    assert (dropped["log_level"], dropped["reason"]) == ("info", "not today")
    assert sink.received == []


async def test_guard_fails_closed_on_a_throwing_policy(bot: MessageFactory) -> None:
    async def broken(msg: Inbound) -> Admit | Drop:
        raise KeyError("config")

    guard, sink = BotInboundGuard("dana"), Sink()
    guard.set_policy(broken)
    with capture_logs() as logs:
        result = await guard.handle(bot(), sink)
    assert isinstance(result, Drop) and "KeyError" in result.reason
    assert sink.received == []
    (dropped,) = events(logs, "bot message dropped")
    assert dropped["log_level"] == "warning"


async def test_guard_fails_closed_on_a_policy_answering_nonsense(bot: MessageFactory) -> None:
    async def confused(msg: Inbound) -> Admit | Drop:
        return Admit(sender_id="")

    guard, sink = BotInboundGuard("dana"), Sink()
    guard.set_policy(confused)
    assert isinstance(await guard.handle(bot(), sink), Drop)
    assert sink.received == []


async def test_replacing_the_policy_warns(bot: MessageFactory) -> None:
    async def other(msg: Inbound) -> Admit | Drop:
        return Drop("other")

    guard = BotInboundGuard("dana")
    with capture_logs() as logs:
        guard.set_policy(admit_all)
        guard.set_policy(admit_all)  # the same policy again is not a replacement
        guard.set_policy(other)
    (replaced,) = events(logs, "bot-inbound policy replaced")
    assert replaced["log_level"] == "warning"
    assert await guard.handle(bot(), Sink()) == Drop("other")


async def test_observers_see_humans_but_not_bots(human: MessageFactory, bot: MessageFactory) -> None:
    seen: list[Inbound] = []

    async def watch_async(msg: Inbound) -> None:
        seen.append(msg)

    guard = BotInboundGuard("dana")
    guard.set_policy(admit_all)
    guard.add_observer(seen.append)
    guard.add_observer(watch_async)
    h = human()
    await guard.handle(h, Sink())
    await guard.handle(bot(), Sink())
    assert seen == [h, h]


async def test_a_throwing_observer_does_not_stop_a_human(human: MessageFactory) -> None:
    def broken(msg: Inbound) -> None:
        raise RuntimeError("observer bug")

    later: list[Inbound] = []
    guard, sink, msg = BotInboundGuard("dana"), Sink(), human()
    guard.add_observer(broken)
    guard.add_observer(later.append)
    with capture_logs() as logs:
        assert await guard.handle(msg, sink) == Delivered(msg)
    assert sink.received == [msg] and later == [msg]
    (failed,) = events(logs, "human observer failed")
    assert failed["log_level"] == "warning"


async def test_on_accepted_runs_only_after_downstream_succeeded(bot: MessageFactory) -> None:
    calls: list[str] = []
    sink = Sink()

    async def accepted() -> None:
        calls.append(f"accepted after {len(sink.received)}")

    async def rejected() -> None:
        calls.append("rejected")

    async def policy(msg: Inbound) -> Admit | Drop:
        return Admit("slack:bot:B0ELI", on_accepted=accepted, on_rejected=rejected)

    guard = BotInboundGuard("dana")
    guard.set_policy(policy)
    await guard.handle(bot(), sink)
    assert calls == ["accepted after 1"]


async def test_downstream_failure_runs_on_rejected_and_propagates(bot: MessageFactory) -> None:
    calls: list[str] = []

    async def accepted() -> None:
        calls.append("accepted")

    async def rejected() -> None:
        calls.append("rejected")

    async def policy(msg: Inbound) -> Admit | Drop:
        return Admit("slack:bot:B0ELI", on_accepted=accepted, on_rejected=rejected)

    guard, sink = BotInboundGuard("dana"), Sink()
    sink.fail = True
    guard.set_policy(policy)
    with pytest.raises(RuntimeError, match="router down"):
        await guard.handle(bot(), sink)
    assert calls == ["rejected"]


async def test_human_downstream_failure_propagates(human: MessageFactory) -> None:
    sink = Sink()
    sink.fail = True
    with pytest.raises(RuntimeError):
        await BotInboundGuard("dana").handle(human(), sink)
