"""A teammate's MCP servers in a running fleet (docs/agents.md): started with the fleet from
``teammates/<name>/mcp.json``, ``${VAR}`` read from the fleet's ``.env``, and a tool
marked ``"approval": "owner"`` put to every owner as a DM whose Deny click (a real
block_actions through the emulator and bolt) is the call's result."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nanoslack.tools.approvals import DENIED
from tests.e2e.conftest import Room
from tests.e2e.helpers import dm_buttons, message_text
from tests.tools.mcp_helpers import echo_server, write_config

SECRET = "echo-secret-5521"


def _teammates(room: Room) -> Path:
    teammates = room.tmp / "teammates"
    write_config(
        teammates / "dana" / "mcp.json",
        {"echo": echo_server(env={"API_TOKEN": "${ECHO_SECRET}"}, tools={"echo": {"approval": "owner"}})},
    )
    write_config(teammates / "_mcp.json", {"broken": {"command": str(teammates / "no-such-server")}})
    return teammates


async def test_a_fleet_starts_its_mcp_servers_and_reads_their_variables_from_the_env(
    room: Room, fleet_factory
) -> None:
    teammates = _teammates(room)
    fleet, _ = await fleet_factory(
        ["dana", "eli"], NANOSLACK_TEAMMATES=str(teammates), ECHO_SECRET=SECRET, SLACK_OWNER=room.human.id
    )
    dana, eli = fleet.instances["dana"].core, fleet.instances["eli"].core

    assert dana.mcp.connected("echo") and not dana.mcp.connected("broken")
    assert {s.origin for s in dana.mcp.tools()} == {"mcp:echo"}
    assert eli.mcp.servers == ("broken",) and eli.mcp.tools() == []
    # The server got the value from .env; what comes back to a model is masked.
    assert (await dana.mcp.call("echo_env", {"name": "API_TOKEN"})).text == "***"
    pid = int((await dana.mcp.call("echo_pid", {})).text)

    await fleet.stop()

    assert not dana.mcp.connected("echo")
    assert not _alive(pid)


async def test_an_owner_tool_waits_for_the_owners_click_and_deny_is_its_result(
    room: Room, fleet_factory
) -> None:
    alice, bob = room.human.id, room.emu.add_user("bob").id
    fleet, _ = await fleet_factory(
        ["dana", "eli"],
        NANOSLACK_TEAMMATES=str(_teammates(room)),
        ECHO_SECRET=SECRET,
        SLACK_OWNER=f"{alice},{bob}",
    )
    dana = fleet.instances["dana"].core
    assert dana.mcp.needs_approval("echo_echo") and not dana.mcp.needs_approval("echo_pid")

    call = asyncio.create_task(
        dana.tool_approvals.approve(turn_id=1, tool="echo_echo", arguments={"text": "rm -rf"})
    )
    await room.emu.wait_for(
        lambda: (
            dm_buttons(room.emu, alice, "nanoslack_tool_deny")
            and dm_buttons(room.emu, bob, "nanoslack_tool_deny")
        ),
        timeout=10,
    )
    assert not call.done()
    (alices,) = dm_buttons(room.emu, alice, "nanoslack_tool_deny")
    (bobs,) = dm_buttons(room.emu, bob, "nanoslack_tool_allow")
    assert "echo_echo" in message_text(room.emu, alices) and "rm -rf" in message_text(room.emu, alices)

    # Someone who is not an owner cannot decide it.
    mallory = room.emu.add_user("mallory").id
    await room.emu.click_button(mallory, bobs["channel"], bobs["ts"], "nanoslack_tool_allow", bobs["value"])
    await room.emu.click_button(
        alice, alices["channel"], alices["ts"], "nanoslack_tool_deny", alices["value"]
    )

    result = await asyncio.wait_for(call, 10)
    assert result is not None and (result.text, result.is_error) == (DENIED, True)
    await room.emu.wait_for(lambda: f"Denied by <@{alice}>" in message_text(room.emu, bobs), timeout=10)
    await room.emu.wait_for(lambda: not dm_buttons(room.emu, bob, "nanoslack_tool_allow"), timeout=10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
