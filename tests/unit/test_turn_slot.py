"""An instance's turn slot (docs/agents.md, "Turns"): with ``serial`` one turn holds it at a
time, handed on in the order the turns came; without, nobody waits."""

from __future__ import annotations

import asyncio

from nanoslack.turns.slot import TurnSlot


async def _hold(slot: TurnSlot, name: str, log: list[str], release: asyncio.Event) -> None:
    async with slot.turn():
        log.append(f"{name} in")
        await release.wait()
        log.append(f"{name} out")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_serial_slot_lets_one_turn_in_at_a_time_in_the_order_they_came() -> None:
    slot, log = TurnSlot(lambda: True), []
    gates = {name: asyncio.Event() for name in "abc"}
    tasks = [asyncio.create_task(_hold(slot, name, log, gates[name])) for name in "abc"]
    await _settle()
    assert (log, slot.waiting) == (["a in"], 2)
    gates["c"].set()  # c is ready first, yet b came before it
    gates["a"].set()
    await _settle()
    assert log == ["a in", "a out", "b in"]
    gates["b"].set()
    await asyncio.gather(*tasks)
    assert log == ["a in", "a out", "b in", "b out", "c in", "c out"]


async def test_a_turn_cancelled_while_waiting_leaves_the_line_and_the_next_one_goes() -> None:
    slot, log = TurnSlot(lambda: True), []
    gates = {name: asyncio.Event() for name in "abc"}
    a, b, c = (asyncio.create_task(_hold(slot, name, log, gates[name])) for name in "abc")
    await _settle()
    b.cancel()  # a halted room's turn, still waiting
    await _settle()
    assert slot.waiting == 1
    gates["a"].set()
    gates["c"].set()
    await asyncio.gather(a, c)
    assert log == ["a in", "a out", "c in", "c out"]


async def test_a_slot_that_is_not_serial_holds_nobody_back() -> None:
    slot, log = TurnSlot(), []
    gate = asyncio.Event()
    tasks = [asyncio.create_task(_hold(slot, name, log, gate)) for name in "ab"]
    await _settle()
    assert log == ["a in", "b in"]
    gate.set()
    await asyncio.gather(*tasks)
