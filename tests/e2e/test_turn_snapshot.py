"""What a turn shows its agent is what it answers, however long it waited for a slot."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.e2e.conftest import Room
from tests.e2e.turn_agent import TurnAgent


def _turn_task_waiting(instance: str) -> bool:
    """A turn task of ``instance`` exists (the fleet runs on this loop): with the only
    slot held elsewhere, it is waiting for it."""
    return any(t.get_name() == f"{instance}-turn" and not t.done() for t in asyncio.all_tasks())


def _pending_or_running(room: Room) -> bool:
    rows = room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
    )
    return rows != [(0,)]


async def _second_mention_while_the_first_waits_for_a_slot(room: Room, fleet_factory: Any) -> TurnAgent:
    """eli's turn for Q0002 waits for the only slot (dana's held turn has it) while
    Q0003 is recorded in the same thread; then dana lets go and everything settles."""
    program = TurnAgent.install(room.tmp)
    program.reply("eli", "on it")
    program.hold("dana")  # dana's turn takes the only slot and keeps it
    alice = room.human.id
    await fleet_factory(["dana", "eli"], SLACK_OWNER=alice, NANOSLACK_MAX_TURNS="1", **program.env())

    await room.emu.post_as_user(alice, room.channel, f"{room.mention('dana')} Q0001 take your time")
    await room.emu.wait_for(lambda: program.calls("dana"), timeout=10)
    first = await room.emu.post_as_user(alice, room.channel, f"{room.mention('eli')} Q0002 please")
    await room.emu.wait_for(
        lambda: (
            room.sql("SELECT status FROM messages WHERE instance = 'eli' AND ts = ?", first) == [("pending",)]
        )
    )
    # The race needs eli's turn for Q0002 waiting for the slot (dana holds the only
    # one): a turn is a task of its own from the moment the scheduler takes its thread.
    await room.emu.wait_for(lambda: _turn_task_waiting("eli"), timeout=10)
    second = await room.emu.post_as_user(
        alice, room.channel, f"{room.mention('eli')} Q0003 also", thread_ts=first
    )
    await room.emu.wait_for(
        lambda: (
            room.sql("SELECT status FROM messages WHERE instance = 'eli' AND ts = ?", second)
            == [("pending",)]
        )
    )
    program.release("dana")
    await room.emu.wait_for(lambda: not _pending_or_running(room), timeout=20)
    return program


async def test_a_second_mention_recorded_while_the_first_turn_waits_for_a_slot_is_answered_exactly_once(
    room: Room, fleet_factory: Any
) -> None:
    program = await _second_mention_while_the_first_waits_for_a_slot(room, fleet_factory)
    prompts = [call["stdin"] for call in program.calls("eli")]
    assert [sum("Q0002" in p for p in prompts), sum("Q0003" in p for p in prompts)] == [1, 1], prompts
    # Every turn consumed exactly what it showed: nothing left to answer twice.
    shown = room.sql("SELECT sum(messages) FROM turns WHERE instance = 'eli'")
    assert shown == [(2,)]


async def test_what_arrives_while_a_turn_waits_for_its_slot_is_answered_by_that_turn(
    room: Room, fleet_factory: Any
) -> None:
    """The turn reads its messages once the slot is its own: one turn answers both,
    not one turn each a slot apart."""
    program = await _second_mention_while_the_first_waits_for_a_slot(room, fleet_factory)
    (prompt,) = [call["stdin"] for call in program.calls("eli")]
    assert "Q0002" in prompt and "Q0003" in prompt
    assert room.sql("SELECT messages FROM turns WHERE instance = 'eli'") == [(2,)]
