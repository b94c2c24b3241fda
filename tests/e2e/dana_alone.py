"""What the tests of dana alone on the model server's ``openai`` back end share
(test_edits, test_files_in): her persona, her fleet, the answers the model gives, her turns
as the store records them, and each turn's first request."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from nanoslack.slack.fleet import Fleet
from nanoslack.testing.llm_server import LLMServer, Request, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Recorder, Room
from tests.e2e.helpers import openai_env


def teammates(room: Room) -> Path:
    """A teammates folder with dana's persona only."""
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana.\n")
    return root


async def start_dana(
    room: Room, fleet_factory: FleetFactory, llm: LLMServer, **env: str
) -> tuple[Fleet, Recorder]:
    """A fleet of dana alone, owned by the room's person, on the model server ``llm``."""
    started: tuple[Fleet, Recorder] = await fleet_factory(
        ["dana"], **openai_env(room.human.id, llm, teammates(room), **env)
    )
    return started


def push_answers(llm: LLMServer, turns: int, hold: asyncio.Event | None = None) -> None:
    """Each of ``turns`` turns sends "answer <i>" and ends; ``hold`` holds the first one's
    first request until it is set."""
    for i in range(turns):
        first = openai_answer(send(f"answer {i}"))
        llm.openai.push(dataclasses.replace(first, hold=hold) if i == 0 else first, openai_text())


@asynccontextmanager
async def dana_answering(
    room: Room,
    fleet_factory: FleetFactory,
    *,
    turns: int,
    hold: asyncio.Event | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[LLMServer]:
    """The model server, with answers for ``turns`` turns (``push_answers``), and a fleet of
    dana alone on it, with ``env`` added to its keys."""
    async with LLMServer() as llm:
        push_answers(llm, turns, hold)
        await start_dana(room, fleet_factory, llm, **(env or {}))
        yield llm


def statuses(room: Room) -> list[str]:
    """dana's turns' statuses, oldest first."""
    return [str(r[0]) for r in room.sql("SELECT status FROM turns WHERE instance = 'dana' ORDER BY id")]


async def turns_done(room: Room, n: int) -> None:
    """dana has had ``n`` turns and none of them still runs."""
    await room.emu.wait_for(lambda: len(statuses(room)) == n and "running" not in statuses(room), timeout=20)


def first_requests(llm: LLMServer) -> list[Request]:
    """Each turn's first request (the one whose last message is the user prompt), in order."""
    return [r for r in llm.openai.requests if r.json["messages"][-1]["role"] == "user"]
