"""CLI agents get the host tools too (docs/agents.md), end to end: the real fleet against the
emulator, both instances on the real ``command`` back end running ``mcp_agent`` (the
``mcp`` package's client over ``NANOSLACK_MCP_URL`` with the turn's bearer token)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tests.agents.mcp_agent import __file__ as MCP_AGENT
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.test_turns import is_turn_reply, settled, thread_posts

CUE = "[agent] A message just arrived from dana"


def install(room: Room, **plan: dict[str, Any]) -> dict[str, str]:
    """The fleet keys that run ``mcp_agent`` with ``plan`` for every instance."""
    plan_file = room.tmp / "plan.json"
    plan_file.write_text(json.dumps(plan))
    command = f"{shlex.quote(sys.executable)} {shlex.quote(MCP_AGENT)} {shlex.quote(str(plan_file))}"
    return {"NANOSLACK_AGENT": "command", "NANOSLACK_AGENT_COMMAND": command, "NANOSLACK_AGENT_TIMEOUT": "60"}


def dms_from(room: Room, bot_id: str, user: str) -> list[str]:
    """What a bot said to ``user`` in their direct message."""
    return [
        str(msg.get("text"))
        for conv in room.emu.conversations()
        if conv.kind == "im" and user in conv.members
        for msg in room.emu.conversation_messages(conv.id)
        if msg.get("bot_id") == bot_id
    ]


def mcp_turns(room: Room, instance: str) -> list[dict[str, Any]]:
    log = Path(room.tmp / "mcp_turns.jsonl")
    lines = log.read_text().splitlines() if log.exists() else []
    return [t for t in map(json.loads, lines) if t["instance"] == instance]


async def test_a_command_agent_hands_off_over_mcp_and_wakes_its_sibling(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, dana, eli = room.emu, room.apps["dana"], room.apps["eli"]
    keys = install(
        room,
        dana={
            "when": "plan the release",
            "calls": [
                ["read_skill", {"name": "nope"}],
                ["send_to_agent", {"to": "eli", "message": "review the release plan"}],
                ["send_message", {"text": "asked eli for a review"}],
                ["message_owner", {"text": "the release plan is drafted"}],
            ],
            "reply": "dana: plan drafted",
        },
        eli={"when": CUE, "reply": "eli: the plan looks right"},
    )
    await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id, NANOSLACK_A2A_ALLOW="dana>eli", **keys)

    parent = await emu.post_as_user(room.human.id, room.channel, f"<@{dana.bot_user_id}> plan the release")

    def replies(bot_id: str) -> list[str]:
        return [p["text"] for p in thread_posts(emu, room.channel, parent, bot_id) if is_turn_reply(p)]

    await emu.wait_for(lambda: replies(eli.bot_id) != [], timeout=60)
    await emu.wait_for(lambda: dms_from(room, dana.bot_id, room.human.id) != [], timeout=10)
    await emu.wait_for(lambda: settled(room), timeout=30)

    # dana's post through MCP came first, then its stdout's; eli answered in dana's thread;
    # the owner heard from dana in private.
    assert replies(dana.bot_id) == ["asked eli for a review", "dana: plan drafted"]
    assert replies(eli.bot_id) == ["eli: the plan looks right"]
    # (dana's other DM, later, asks whether eli may talk to dana: the gate, as for any new bot.)
    assert "the release plan is drafted" in dms_from(room, dana.bot_id, room.human.id)
    (dana_turn, *_) = mcp_turns(room, "dana")
    assert (
        dana_turn["results"][0]["is_error"] is True and "the skills are:" in dana_turn["results"][0]["text"]
    )
    assert "handed to eli" in dana_turn["results"][1]["text"]
    (eli_turn,) = [t for t in mcp_turns(room, "eli") if CUE in t["stdin"]]
    assert "review the release plan" in eli_turn["stdin"]
    assert room.sql("SELECT from_instance, to_instance, text FROM handoffs") == [
        ("dana", "eli", "review the release plan")
    ]
