"""An owner's Allow/Deny on a tool call (``nanoslack.tools.approvals``): a turn's toolbox,
a real MCP server marked ``"approval": "owner"``, the owner asks in a real store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nanoslack.agents import ToolResult
from nanoslack.asks import TOOL, Answer, OwnerAsks
from nanoslack.config import ToolSettings
from nanoslack.store import AskRow, Store
from nanoslack.tools import HostContext, HostTools, TurnBudget, TurnEffects, TurnToolbox
from nanoslack.tools.approvals import DENIED, OwnerToolApprover
from nanoslack.tools.mcp import TeammateMcp

from .mcp_helpers import echo_server, teammate_mcp, until, write_config

OWNERS = ("U0ANN", "U0BOB")


def _turn(store: Store) -> int:
    return store.turns.start(
        instance="dana",
        channel="C0ROOM",
        thread_key="1.0",
        reply_thread_ts="1.0",
        sender_id="slack:U0ANN",
        through_ts="1.0",
        messages=1,
        wrapping_up=False,
    )


def _toolbox(store: Store, turn_id: int, mcp: TeammateMcp, approver: OwnerToolApprover) -> TurnToolbox:
    host = HostTools(
        HostContext(
            instance="dana",
            skills_dir=Path("/nonexistent"),
            owners=OWNERS,
            is_dm=False,
            handoff_depth=0,
            may_hand_off=ToolSettings().may_hand_off,
        ),
        TurnEffects(),
    )
    return TurnToolbox(
        turn_id=turn_id,
        instance="dana",
        store=store,
        host=host,
        budget=TurnBudget("dana", "C0ROOM", turn_id, store),
        max_steps=12,
        mcp=mcp,
        approver=approver,
    )


def _asks(store: Store, owners: tuple[str, ...] = OWNERS) -> OwnerAsks:
    return OwnerAsks(store, instance="dana", owners=owners)


def _open_tool_ask(store: Store) -> AskRow | None:
    for row in store.outbox.queued("dana"):
        ask = store.asks.get(row.ask_id) if row.purpose == "ask" and row.ask_id is not None else None
        if ask is not None and ask.kind == TOOL.name and ask.is_open:
            return ask
    return None


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[TeammateMcp]:
    teammates = tmp_path / "teammates"
    write_config(
        teammates / "dana" / "mcp.json", {"echo": echo_server(tools={"echo": {"approval": "owner"}})}
    )
    mcp = teammate_mcp(teammates)
    await mcp.start()
    yield mcp
    await mcp.stop()


async def _waiting_ask(store: Store) -> AskRow:
    found: list[AskRow] = []

    def asked() -> bool:
        ask = _open_tool_ask(store)
        found.extend([ask] if ask is not None else [])
        return ask is not None

    await until(asked, what="the tool ask opened")
    return found[0]


async def test_an_owner_tool_waits_for_an_allow_then_runs(store: Store, guarded: TeammateMcp) -> None:
    approver = OwnerToolApprover(store, _asks(store), timeout=30)
    turn_id = _turn(store)
    toolbox = _toolbox(store, turn_id, guarded, approver)

    call = asyncio.create_task(toolbox.call("echo_echo", {"text": "ship it"}))
    ask = await _waiting_ask(store)
    ref = ask.ref
    assert "`echo_echo`" in ask.question and "ship it" in (ask.detail or "")
    dms = store.outbox.asking(ask.id)
    assert sorted(dm.dm_user or "" for dm in dms) == sorted(OWNERS)  # one DM per owner
    assert not call.done()

    assert approver.answer(Answer(choice="tool_allow", ref=ref, by_user="U0BOB"))
    result = await asyncio.wait_for(call, 10)

    assert result == ToolResult("echo: ship it")
    closed = store.asks.latest(TOOL.name, ref)
    assert closed is not None and closed.choice == "tool_allow" and "Allowed by" in (closed.verdict or "")
    # A second owner's click is too late and changes nothing.
    assert not approver.answer(Answer(choice="tool_deny", ref=ref, by_user="U0ANN"))
    # An unguarded tool of the same server runs at once.
    assert (await toolbox.call("echo_pid", {})).text.isdigit()


async def test_a_denied_call_is_not_made_and_its_result_says_so(store: Store, guarded: TeammateMcp) -> None:
    approver = OwnerToolApprover(store, _asks(store), timeout=30)
    turn_id = _turn(store)
    toolbox = _toolbox(store, turn_id, guarded, approver)

    call = asyncio.create_task(toolbox.call("echo_echo", {"text": "drop the table"}))
    ask = await _waiting_ask(store)
    approver.answer(Answer(choice="tool_deny", ref=ask.ref, by_user="U0ANN"))
    result = await asyncio.wait_for(call, 10)

    assert result == ToolResult(DENIED, is_error=True)
    (step,) = store.steps.of(turn_id)
    assert step.name == "echo_echo" and step.error == DENIED


async def test_no_answer_in_time_is_the_result_and_every_dm_says_so(store: Store) -> None:
    approver = OwnerToolApprover(store, _asks(store), timeout=1.0, poll=0.05)
    call = asyncio.create_task(
        approver.approve(turn_id=_turn(store), tool="echo_echo", arguments={"text": "x"})
    )
    ask = await _waiting_ask(store)
    for dm in store.outbox.asking(ask.id):  # as the poster would: the DMs are out
        store.outbox.mark_sent(dm.id, f"D{dm.dm_user}", f"{dm.id}.000100")

    result = await asyncio.wait_for(call, 10)

    assert result == ToolResult("no answer from the owners within 1 s: the call was not made", is_error=True)
    expired = store.asks.get(ask.id)
    assert expired is not None and not expired.is_open and expired.choice == "expired"
    updates = [row for row in store.outbox.queued("dana") if row.kind == "update"]
    assert len(updates) == len(OWNERS)
    assert all("No answer within 1 s" in row.text for row in updates)


async def test_an_answer_given_another_way_is_seen_from_the_store(store: Store) -> None:
    approver = OwnerToolApprover(store, _asks(store), timeout=30, poll=0.05)
    call = asyncio.create_task(approver.approve(turn_id=_turn(store), tool="echo_echo", arguments={}))
    ask = await _waiting_ask(store)

    # Another process (or the operator) answers: not through this approver.
    assert _asks(store).close(
        TOOL, ask.ref, choice="tool_allow", by_user="U0ANN", verdict="Allowed by <@U0ANN>."
    )

    assert await asyncio.wait_for(call, 10) is None


async def test_without_owners_a_guarded_call_is_refused(store: Store) -> None:
    approver = OwnerToolApprover(store, _asks(store, owners=()), timeout=30)

    result = await approver.approve(turn_id=_turn(store), tool="echo_echo", arguments={})

    assert result is not None and result.is_error and "SLACK_OWNER" in result.text
