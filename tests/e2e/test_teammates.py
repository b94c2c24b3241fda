"""Teammates know each other (docs/agents.md, "Teammates"): each turn's opening lists the
teammates the instance may reach with their roles, marking those in the conversation; a
change reaches a thread as a ``[Teammates changed]`` line and its opening stays byte for byte
(docs/memory.md), in the real fleet against the model server of ``nanoslack.testing.llm_server``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nanoslack.testing.llm_server import LLMServer, openai_text
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env


def _crew(room: Room) -> Path:
    root = room.tmp / "teammates"
    souls = {
        "dana": "---\nrole: release planner\n---\nYou are Dana.\n",
        "eli": "# The reviewer who reads every diff\nYou are Eli.\n",  # no front matter: its first line
        "fay": "---\nrole: designer\n---\nYou are Fay.\n",  # run by another process
    }
    for name, soul in souls.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "SOUL.md").write_text(soul, encoding="utf-8")
    return root


def _danas_turns(llm: LLMServer) -> list[list[dict[str, Any]]]:
    """The messages of the first request of each of dana's turns."""
    requests = [r.json["messages"] for r in llm.openai.requests]
    return [m for m in requests if m[-1]["role"] == "user" and m[0]["content"].startswith("You are Dana.")]


async def _turn(room: Room, channel: str, text: str, n: int) -> None:
    await room.emu.post_as_user(room.human.id, channel, text)

    def done() -> bool:
        rows = room.sql("SELECT status FROM turns WHERE instance = 'dana'")
        return len(rows) == n and all(status != "running" for (status,) in rows)

    await room.emu.wait_for(done, timeout=20)


async def test_a_dm_knows_its_teammates_and_a_room_marks_who_is_here_and_a_new_role_is_a_line(
    room: Room, fleet_factory: FleetFactory
) -> None:
    im = room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im").id
    async with LLMServer() as llm:
        llm.openai.default = openai_text()
        env = openai_env(room.human.id, llm, _crew(room), NANOSLACK_A2A_ALLOW="dana>eli,dana>fay")
        await fleet_factory(["dana", "eli"], **env)
        await _turn(room, im, "who can review my change?", 1)
        await _turn(room, room.channel, f"{room.mention('dana')} plan the release", 2)
        soul = room.tmp / "teammates" / "fay" / "SOUL.md"
        soul.write_text("---\nrole: design lead\n---\nYou are Fay.\n", encoding="utf-8")
        await _turn(room, im, "and who designs it?", 3)
        await _turn(room, im, "thanks", 4)

    dm_first, in_room, dm_changed, dm_after = _danas_turns(llm)
    listed = "[Teammates]\neli — The reviewer who reads every diff\nfay — designer"
    assert listed in dm_first[0]["content"]  # in a DM, nobody is here, the siblings are known
    here = "[Teammates]\neli — The reviewer who reads every diff (here)\nfay — designer"
    assert here in in_room[0]["content"]
    # The DM's opening is the same bytes; the new role comes as a line of the new part, once.
    assert dm_changed[0] == dm_first[0] and dm_after[0] == dm_first[0]
    assert "[Teammates changed] ~ fay — design lead" in dm_changed[-1]["content"]
    assert "[Teammates changed]" not in dm_after[-1]["content"]
    assert "[Teammates changed]" not in json.dumps(in_room)
