"""Routines an agent sets (docs/routines.md): asked by its owner, the agent calls
``schedule_routine``; the routine is kept in the store (``source = agent``), listed by
``nanoslack routines`` and run on its schedule by the routine clock, each due time once,
across two fleets on one PostgreSQL database too. The fleets read a clock that runs 300
times as fast as real time (5 minutes a second) once the test lets it go."""

from __future__ import annotations

import asyncio
import io
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg

from nanoslack.config import load_settings
from nanoslack.emulator import App, Emulator, User
from nanoslack.ops import routines as routines_cli
from nanoslack.services import TurnOptions
from nanoslack.slack.fleet import Fleet
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import LLMServer, Request, openai_answer, openai_text, send
from tests.e2e.conftest import FAST_SOCKET, Room
from tests.e2e.helpers import SimClock, openai_env

SPEED = 300.0
EVERY = 300  # "5m", the shortest an agent may set
PROMPT = "Check the build and post its state."
SCHEDULE = ("schedule_routine", {"name": "build-check", "every": "5m", "prompt": PROMPT})


def _clock() -> SimClock:
    """Standing a minute past a 5-minute time: a routine set then is first due 4 minutes on."""
    return SimClock(math.ceil(time.time() / EVERY) * EVERY + 60.0, SPEED)


def _routine_model(request: Request) -> Any:
    """The model in a routine's turn (and any unscripted one): posts, then is done."""
    messages = (request.json or {}).get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return openai_text()
    return openai_answer(send("The build is green."))


def _offered(request: Request) -> list[str]:
    return [t["function"]["name"] for t in (request.json or {}).get("tools", [])]


def _routine_requests(llm: LLMServer) -> list[Request]:
    """The first model request of each routine turn."""
    return [
        r
        for r in llm.openai.requests
        if '[Routine \\"build-check\\"]' in r.body.decode() and r.json["messages"][-1]["role"] != "tool"
    ]


def _listing(db: str, env_file: Path) -> str:
    out = io.StringIO()
    assert routines_cli.main(["--db", db, "--env-file", str(env_file)], out=out) == 0
    return out.getvalue()


def _started(env_file: Path, clock: SimClock) -> Fleet:
    """A fleet whose routine clocks read ``clock``."""
    return Fleet(
        load_settings(env_file, environ={}),
        socket=FAST_SOCKET,
        turns=TurnOptions(clock_tick=0.02, clock_time=clock),
    )


@asynccontextmanager
async def _fleet(env_file: Path, clock: SimClock) -> AsyncIterator[Fleet]:
    fleet = _started(env_file, clock)
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.stop()


def _each_due_time_once(rows: Sequence[tuple[Any, ...]], llm: LLMServer) -> list[float]:
    """The due times, each on the 5-minute grid, one row each and none left out; every row
    with a turn reached the model once."""
    dues = [float(r[0]) for r in rows]
    assert dues == [dues[0] + EVERY * i for i in range(len(dues))], "a due time has no row, or two"
    assert dues[0] % EVERY == 0
    turns = [r[1] for r in rows if r[1] is not None]
    assert len(turns) == len(set(turns)) == len(_routine_requests(llm))
    return dues


async def test_a_routine_the_owner_asks_for_in_a_dm_is_listed_as_the_agents_and_runs_every_5_minutes(
    room: Room,
) -> None:
    alice, dana = room.human.id, room.apps["dana"]
    bob = room.emu.add_user("bob")
    shared = room.emu.create_conversation([alice, bob.id, dana.bot_user_id]).id
    dm = room.emu.create_conversation([alice, dana.bot_user_id], kind="im").id
    clock = _clock()
    async with LLMServer() as llm:
        llm.openai.push(
            openai_text(),  # alice's first mention makes the conversation dana's
            openai_answer(SCHEDULE),  # bob's turn tries it
            openai_text(),
            openai_answer(SCHEDULE),  # alice's, in her DM with dana
            openai_text("Done: I will check the build every 5 minutes."),
        )
        llm.openai.default = _routine_model
        env_file = write_fleet_env(
            room.tmp / ".env", room.emu, [dana], room.db, **openai_env(alice, llm, room.tmp / "teammates")
        )
        async with _fleet(env_file, clock):
            await room.emu.post_as_user(alice, shared, f"{room.mention('dana')} hi")
            await room.emu.wait_for(lambda: len(llm.openai.requests) == 1, timeout=20)
            room.sql(
                "UPDATE messaging_groups SET unknown_sender_policy = 'public' WHERE platform_id = ?",
                f"slack:{shared}",
            )
            # A stranger cannot give dana a standing instruction: refused as the tool's result.
            await room.emu.post_as_user(bob.id, shared, f"{room.mention('dana')} check my build every 5m")
            await room.emu.wait_for(lambda: len(llm.openai.requests) == 3, timeout=20)
            (refusal,) = llm.openai.requests[2].tool_results()
            assert "not scheduled: only your owners can ask you to set up or cancel a routine" in refusal
            assert room.sql("SELECT count(*) FROM routines") == [(0,)]

            await room.emu.post_as_user(alice, dm, "check the build every 5 minutes, please")
            await room.emu.wait_for(lambda: len(llm.openai.requests) == 5, timeout=20)
            assert "schedule_routine" in _offered(llm.openai.requests[3])
            assert (
                llm.openai.requests[4]
                .tool_results()[0]
                .startswith(f"routine build-check created: every 5m, posting in {dm}")
            )
            assert room.sql("SELECT name, source, schedule, channel, prompt FROM routines") == [
                ("build-check", "agent", "every 5m", dm, PROMPT)
            ]
            listed = [line.split()[:5] for line in _listing(str(room.db), env_file).splitlines()]
            assert ["dana", "build-check", "agent", "every", "5m"] in listed, listed

            clock.go()
            await room.emu.wait_for(
                lambda: (
                    room.sql(
                        "SELECT count(*) FROM routine_runs WHERE routine = 'build-check' AND status = 'done'"
                    )[0][0]
                    >= 3
                ),
                timeout=30,
            )
        rows = room.sql(
            "SELECT due_at, turn_id FROM routine_runs WHERE routine = 'build-check' ORDER BY due_at"
        )
    dues = _each_due_time_once(rows, llm)
    assert dues[0] == clock.start - 60.0 + EVERY  # the first 5-minute time after it was set
    posts = [m for m in room.emu.conversation_messages(dm) if m.get("user") == dana.bot_user_id]
    assert sum("The build is green." in (m.get("text") or m.get("markdown_text") or "") for m in posts) >= 3
    # Each run is the routine's turn, tagged as such, with the prompt the agent wrote.
    first = _routine_requests(llm)[0].body.decode()
    assert PROMPT in first


async def _until_runs(rows: Any, n: int) -> None:
    deadline = time.monotonic() + 45
    while len([r for r in rows() if r[2] == "done"]) < n:
        assert time.monotonic() < deadline, rows()
        await asyncio.sleep(0.05)


async def test_an_agents_routine_runs_each_due_time_once_across_two_fleets_on_postgresql(
    emu: Emulator, tmp_path: Path, pg_url: str
) -> None:
    alice: User = emu.add_user("alice")
    dana: App = emu.add_app("dana")
    dm = emu.create_conversation([alice.id, dana.bot_user_id], kind="im").id
    clock = _clock()

    def rows() -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url.replace("+psycopg", ""), autocommit=True) as conn:
            found = conn.execute(
                "SELECT due_at, turn_id, status FROM routine_runs WHERE routine = 'build-check'"
                " ORDER BY due_at"
            ).fetchall()
        return list(found)

    async with LLMServer() as llm:
        llm.openai.push(openai_answer(SCHEDULE), openai_text("Set."))
        llm.openai.default = _routine_model
        envs = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            keys = openai_env(alice.id, llm, tmp_path / "teammates")
            envs.append(
                write_fleet_env(
                    tmp_path / name / ".env",
                    emu,
                    [dana],
                    tmp_path / name / "unused.db",
                    DATABASE_URL=pg_url,
                    NANOSLACK_LEASE_SECONDS="3",
                    NANOSLACK_LEASE_HEARTBEAT="1",
                    **keys,
                )
            )
        fleets = [_started(env, clock) for env in envs]
        running = list(fleets)
        try:
            for fleet in fleets:
                await fleet.start()
            await emu.wait_for(lambda: sum("dana" in f.instances for f in fleets) == 1, timeout=20)
            await emu.post_as_user(alice.id, dm, "check the build every 5 minutes, please")
            await emu.wait_for(lambda: len(llm.openai.requests) == 2, timeout=20)
            assert "created" in llm.openai.requests[1].tool_results()[0]
            clock.go()
            await _until_runs(rows, 3)
            # The fleet holding dana stops: the other takes dana over and runs the routine the
            # first one's turn set (it is in the shared store), without running a due time again.
            holder = next(f for f in fleets if "dana" in f.instances)
            running.remove(holder)
            await holder.stop()
            before = len([r for r in rows() if r[2] == "done"])
            await _until_runs(rows, before + 3)
            assert ["dana"] == [name for f in running for name in f.instances]
        finally:
            for fleet in running:
                await fleet.stop()
        listing = _listing(pg_url, envs[1])
    assert ["dana", "build-check", "agent"] in [line.split()[:3] for line in listing.splitlines()]
    _each_due_time_once([r[:2] for r in rows()], llm)
