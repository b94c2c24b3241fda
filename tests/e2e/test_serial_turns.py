"""One turn at a time per teammate, when its SOUL.md says ``serial: true`` (docs/agents.md,
"Turns"), in the real fleet against the model server of ``nanoslack.testing.llm_server``.

The model is held: each turn's first call waits until the test releases it, so which turns
run at once is read from the server's own record of its requests (``LLMServer.timeline``),
never from a clock."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from nanoslack.testing.llm_server import Answer, LLMServer, Request, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env

WORDS = ("alpha", "bravo", "charlie")


class HeldModel:
    """Each turn's first model call waits for the test (``release``); the call after its
    tool result (the turn's last) answers at once."""

    def __init__(self) -> None:
        self.holds: list[asyncio.Event] = []
        self.asked: list[str] = []  # the word each held call was about, in arrival order

    def __call__(self, request: Request) -> Answer:
        messages = request.json["messages"]
        if messages[-1]["role"] == "tool":
            return openai_text()
        said = str(messages[-1]["content"])
        self.asked.append(next((w for w in WORDS if w in said), said))
        hold = asyncio.Event()
        self.holds.append(hold)
        return dataclasses.replace(openai_answer(send("on it")), hold=hold)


def _teammates(room: Room, *, serial: bool) -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    front = "---\nrole: release planner\nserial: true\n---\n" if serial else ""
    (root / "dana" / "SOUL.md").write_text(f"{front}You are Dana.\n")
    return root


def _done(room: Room) -> int:
    return len(room.sql("SELECT id FROM turns WHERE instance = 'dana' AND status = 'done'"))


async def _start(room: Room, fleet_factory: FleetFactory, llm: LLMServer, *, serial: bool) -> None:
    env = openai_env(room.human.id, llm, _teammates(room, serial=serial), NANOSLACK_WORKING_REACTION="")
    await fleet_factory(["dana"], **env)


async def _mention(room: Room, word: str) -> None:
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} {word}")


async def test_a_serial_teammate_runs_one_turn_at_a_time_oldest_waiting_thread_first_and_acks_go_on(
    room: Room, fleet_factory: FleetFactory
) -> None:
    model = HeldModel()
    app = room.apps["dana"].app_id
    async with LLMServer() as llm:
        llm.openai.default = model
        await _start(room, fleet_factory, llm, serial=True)
        await _mention(room, "alpha")
        await room.emu.wait_for(lambda: len(model.holds) == 1, timeout=20)
        before = room.emu.stats(app).delivered
        await _mention(room, "bravo")  # two new threads, while alpha's turn waits on the model
        await _mention(room, "charlie")
        stats = room.emu.stats
        # Acked while alpha's turn still runs: the slot holds turns, never the socket.
        await room.emu.wait_for(
            lambda: stats(app).delivered >= before + 2 and stats(app).acked == stats(app).delivered,
            timeout=20,
        )
        pending = room.sql("SELECT text FROM messages WHERE instance = 'dana' AND status = 'pending'")
        # Recorded (and acked) while alpha's own message waits for its turn to be recorded.
        assert sorted(str(t).split()[-1] for (t,) in pending) == ["alpha", "bravo", "charlie"]
        assert not model.holds[0].is_set() and _done(room) == 0
        for n in (1, 2, 3):
            await room.emu.wait_for(lambda n=n: len(model.holds) == n, timeout=20)
            model.holds[n - 1].set()
        await room.emu.wait_for(lambda: _done(room) == 3, timeout=20)
    assert model.asked == ["alpha", "bravo", "charlie"]  # the thread that waited longest first
    assert llm.most_in_flight() == 1  # no two of dana's turns ever ran at once
    assert len(llm.requests) == 6


async def test_without_serial_two_threads_of_one_teammate_run_at_once(
    room: Room, fleet_factory: FleetFactory
) -> None:
    model = HeldModel()
    async with LLMServer() as llm:
        llm.openai.default = model
        await _start(room, fleet_factory, llm, serial=False)
        await _mention(room, "alpha")
        await room.emu.wait_for(lambda: len(model.holds) == 1, timeout=20)
        await _mention(room, "bravo")
        # bravo's turn reaches the model while alpha's is still held there.
        await room.emu.wait_for(lambda: len(model.holds) == 2, timeout=20)
        assert llm.most_in_flight() == 2
        for hold in model.holds:
            hold.set()
        await room.emu.wait_for(lambda: _done(room) == 2, timeout=20)
