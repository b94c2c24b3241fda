"""The owner's Home (docs/agent-surface.md) end to end: the fleet publishes each person's
Home tab through the emulator's ``views.publish``, and the buttons there (real
``block_actions`` through the emulator and the fleet's socket) do what the CLI and the
owners' DMs do; a forged click by someone who is no owner changes nothing and is logged."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from nanoslack.emulator import Emulator
from nanoslack.logs import configure_logging
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import dm_buttons, message_text
from tests.tools.mcp_helpers import echo_server, write_config

# Republished fast in tests; the coalescing itself is tested with its clock injected.
FAST_HOME = {"NANOSLACK_HOME_INTERVAL": "0.2"}


def _buttons(emu: Emulator, user: str, app: str = "dana") -> dict[str, list[str | None]]:
    """The buttons of the user's Home view of the app: action id → values."""
    view = emu.home_view(app, user) or {}
    found: dict[str, list[str | None]] = {}
    for block in view.get("blocks") or []:
        elements = [*(block.get("elements") or []), block.get("accessory") or {}]
        for el in elements:
            if isinstance(el, dict) and el.get("type") == "button":
                found.setdefault(str(el["action_id"]), []).append(el.get("value"))
    return found


def _text(emu: Emulator, user: str, app: str = "dana") -> str:
    return json.dumps((emu.home_view(app, user) or {}).get("blocks") or [], ensure_ascii=False)


def _events(out: io.StringIO, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def _teammates(room: Room) -> Path:
    teammates = room.tmp / "teammates"
    (teammates / "dana").mkdir(parents=True, exist_ok=True)
    (teammates / "dana" / "SOUL.md").write_text(
        "---\nrole: planner\ndescription: Plans the team's week\n---\nYou are Dana.\n"
    )
    write_config(
        teammates / "dana" / "mcp.json", {"echo": echo_server(tools={"echo": {"approval": "owner"}})}
    )
    return teammates


async def test_an_owners_home_shows_a_halted_room_whose_resume_resumes_it_and_a_forged_click_is_refused(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    mallory = emu.add_user("mallory").id
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    await fleet_factory(["dana"], SLACK_OWNER=alice, NANOSLACK_TEAMMATES=str(_teammates(room)), **FAST_HOME)
    await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} hello")
    await emu.wait_for(lambda: room.sql("SELECT count(*) FROM messaging_groups")[0][0] >= 1, timeout=10)
    await emu.post_as_user(alice, room.channel, "stop")
    await emu.wait_for(lambda: room.sql("SELECT room FROM room_halts") == [(room.channel,)], timeout=10)

    await emu.open_app_home(alice, "dana")
    await emu.wait_for(lambda: _buttons(emu, alice).get("nanoslack_resume") == [room.channel], timeout=10)
    assert "halted" in _text(emu, alice) and "Today's spend" in _text(emu, alice)

    # Someone who is no owner sees the teammate's description, and their forged click on the
    # owner's button (a payload naming the room) is refused and logged.
    await emu.open_app_home(mallory, "dana")
    await emu.wait_for(lambda: "Plans the team's week" in _text(emu, mallory), timeout=10)
    assert "Messages" in _text(emu, mallory) and _buttons(emu, mallory) == {}
    await emu.click_home_button(mallory, "dana", "nanoslack_resume", value=room.channel)
    await emu.wait_for(lambda: _events(out, "resume click refused"), timeout=10)
    [refused] = _events(out, "resume click refused")
    assert (refused["user"], refused["reason"]) == (mallory, "not an owner")
    assert room.sql("SELECT room FROM room_halts") == [(room.channel,)]

    # The owner's Resume resumes the room, as `resume` there or the DM's button does.
    await emu.click_home_button(alice, "dana", "nanoslack_resume")
    await emu.wait_for(lambda: room.sql("SELECT room FROM room_halts") == [], timeout=10)
    await emu.wait_for(
        lambda: any("Resumed by" in (m.get("text") or "") for m in emu.all_messages(room.channel)), timeout=10
    )
    # Republished: the room runs again, and the halt's ask in the DM is closed.
    await emu.wait_for(lambda: "nanoslack_resume" not in _buttons(emu, alice), timeout=10)
    assert "running" in _text(emu, alice)
    assert not dm_buttons(emu, alice, "nanoslack_resume")


async def test_a_tool_call_allowed_from_the_home_proceeds_as_from_the_dm(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    fleet, _ = await fleet_factory(
        ["dana"], SLACK_OWNER=alice, NANOSLACK_TEAMMATES=str(_teammates(room)), **FAST_HOME
    )
    dana = fleet.instances["dana"].core
    await emu.open_app_home(alice, "dana")
    await emu.wait_for(lambda: "Nothing waits" in _text(emu, alice), timeout=10)

    # The waiting tool call.
    call = asyncio.create_task(
        dana.tool_approvals.approve(turn_id=1, tool="echo_echo", arguments={"text": "hi"})
    )
    await emu.wait_for(lambda: "nanoslack_tool_allow" in _buttons(emu, alice), timeout=10)
    assert "echo_echo" in _text(emu, alice)
    (dm,) = dm_buttons(emu, alice, "nanoslack_tool_allow")
    assert _buttons(emu, alice)["nanoslack_tool_allow"] == [dm["value"]]

    await emu.click_home_button(alice, "dana", "nanoslack_tool_allow")
    assert await asyncio.wait_for(call, 10) is None  # allowed: the call goes on
    # As from the DM: every owner's DM says who decided, and the Home has nothing waiting.
    await emu.wait_for(lambda: f"Allowed by <@{alice}>" in message_text(emu, dm), timeout=10)
    await emu.wait_for(lambda: "nanoslack_tool_allow" not in _buttons(emu, alice), timeout=10)


async def test_an_owners_home_runs_pauses_and_resumes_a_routine_as_the_cli_does(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    teammates = _teammates(room)
    (teammates / "dana" / "routines.toml").write_text(
        f'[[routine]]\nname = "standup"\nevery = "1h"\nchannel = "{room.channel}"\nprompt = "Say hi."\n'
    )
    fleet, _ = await fleet_factory(
        ["dana"], SLACK_OWNER=alice, NANOSLACK_TEAMMATES=str(teammates), **FAST_HOME
    )
    await emu.open_app_home(alice, "dana")
    await emu.wait_for(lambda: _buttons(emu, alice).get("nanoslack_routine_pause") == ["standup"], timeout=10)

    await emu.click_home_button(alice, "dana", "nanoslack_routine_pause")
    await emu.wait_for(lambda: room.sql("SELECT paused, paused_by FROM routines") == [(1, f"slack:{alice}")])
    await emu.wait_for(
        lambda: _buttons(emu, alice).get("nanoslack_routine_resume") == ["standup"], timeout=10
    )
    await emu.click_home_button(alice, "dana", "nanoslack_routine_resume")
    await emu.wait_for(lambda: room.sql("SELECT paused FROM routines") == [(0,)])
    await emu.click_home_button(alice, "dana", "nanoslack_routine_run")
    await emu.wait_for(lambda: room.sql("SELECT count(*) FROM routine_runs")[0][0] >= 1, timeout=15)
    assert fleet.instances["dana"]
