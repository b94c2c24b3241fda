"""Tools inside real turns (docs/agents.md): an MCP tool's result reaches the model's next request,
a server that cannot start leaves the turn working without it, an owner's Deny is a tool's
result, and a SIGKILL in the middle of a tool loop leaves its post and its handoff exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import sql, write_fleet_env
from nanoslack.testing.llm_server import Answer, LLMServer, Request, openai_answer, openai_text, send
from nanoslack.tools.approvals import DENIED
from tests.e2e.conftest import FleetFactory, Room
from tests.tools.mcp_helpers import echo_server, write_config


def _env(llm: LLMServer, owner: str, teammates: Path, **extra: str) -> dict[str, str]:
    return {
        "SLACK_OWNER": owner,
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": "gpt-test",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "sk-test-0123456789",
        "NANOSLACK_TEAMMATES": str(teammates),
        **extra,
    }


def _teammates(room_tmp: Path, servers: dict[str, Any]) -> Path:
    teammates = room_tmp / "teammates"
    write_config(teammates / "dana" / "mcp.json", servers)
    return teammates


def _tools_offered(request: Request) -> list[str]:
    return sorted(t["function"]["name"] for t in (request.json or {}).get("tools", []))


def _posts(emu: Emulator, channel: str, bot_id: str) -> list[str]:
    found = [m for m in emu.all_messages(channel) if m.get("bot_id") == bot_id]
    return [str(m["text"]) for m in sorted(found, key=lambda m: float(m["ts"]))]


async def test_an_mcp_tools_result_reaches_the_models_next_request_and_a_broken_server_leaves_it_working(
    room: Room, fleet_factory: FleetFactory
) -> None:
    teammates = _teammates(room.tmp, {"echo": echo_server()})
    write_config(teammates / "_mcp.json", {"broken": {"command": str(teammates / "no-such-server")}})
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(("echo_echo", {"text": "ping"})),
            openai_answer(send("The echo says pong.")),
            openai_text(),
        )
        await fleet_factory(["dana"], **_env(llm, room.human.id, teammates))
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} ask the echo")
        await room.emu.wait_for(
            lambda: _posts(room.emu, room.channel, room.apps["dana"].bot_id) == ["The echo says pong."],
            timeout=20,
        )
    first, second = llm.openai.requests[:2]
    assert "echo_echo" in _tools_offered(first) and not [
        t for t in _tools_offered(first) if t.startswith("broken")
    ]
    assert second.tool_results() == ["echo: ping"]
    assert room.sql("SELECT name, error FROM turn_steps WHERE kind = 'tool'") == [
        ("echo_echo", None),
        ("send_message", None),
    ]


async def test_an_owner_approval_tool_waits_for_the_click_and_a_deny_is_the_models_result(
    room: Room, fleet_factory: FleetFactory
) -> None:
    owner = room.human.id
    teammates = _teammates(room.tmp, {"echo": echo_server(tools={"echo": {"approval": "owner"}})})
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(("echo_echo", {"text": "rm -rf /"})),
            openai_answer(send("Understood, I won't.")),
            openai_text(),
        )
        await fleet_factory(["dana"], **_env(llm, owner, teammates))
        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} clean up")

        def deny_button() -> dict[str, Any] | None:
            for conv in room.emu.conversations():
                if conv.kind == "im" and owner in conv.members:
                    for msg in room.emu.conversation_messages(conv.id):
                        for block in msg.get("blocks") or []:
                            for el in block.get("elements") or []:
                                if el.get("action_id") == "nanoslack_tool_deny":
                                    return {"channel": conv.id, "ts": msg["ts"], "value": el["value"]}
            return None

        button = await room.emu.wait_for(deny_button, timeout=15)
        assert len(llm.openai.requests) == 1  # the loop waits for the owner
        await room.emu.click_button(
            owner, button["channel"], button["ts"], "nanoslack_tool_deny", button["value"]
        )
        await room.emu.wait_for(
            lambda: _posts(room.emu, room.channel, room.apps["dana"].bot_id) == ["Understood, I won't."],
            timeout=20,
        )
    (result,) = llm.openai.requests[1].tool_results()
    assert DENIED in result  # the refusal, as the model reads a failed tool


def _by_instance(dana: list[Answer], eli: list[Answer]) -> Any:
    """One model serving two instances: each request is answered from its own script."""
    queues = {"dana": list(dana), "eli": list(eli)}

    def answer(request: Request) -> Answer:
        system = str((request.json or {}).get("messages", [{}])[0].get("content", ""))
        who = "dana" if system.startswith("You are dana") else "eli"  # the teammates list names the other
        return queues[who].pop(0) if queues[who] else openai_text()

    return answer


async def test_a_sigkill_during_the_second_model_call_leaves_the_turns_post_and_handoff_exactly_once(
    emu: Emulator, tmp_path: Path
) -> None:
    alice = emu.add_user("alice")
    apps = {n: emu.add_app(n) for n in ("dana", "eli")}
    channel = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps.values())], kind="mpim").id
    teammates = tmp_path / "teammates"
    for name in apps:
        (teammates / name).mkdir(parents=True)
        (teammates / name / "SOUL.md").write_text(f"You are {name}.\n")
    db = tmp_path / "data" / "nanoslack.db"
    step1 = openai_answer(
        send("Working on it."), ("send_to_agent", {"to": "eli", "message": "build the parser"})
    )
    step2_slow = Answer(delay=30.0, json=openai_text().json)  # the fleet dies while it waits
    step2 = openai_answer(("read_skill", {"name": "nothing"}))
    async with LLMServer() as llm:
        env = write_fleet_env(
            tmp_path / ".env",
            emu,
            list(apps.values()),
            db,
            SLACK_A2A_ROOMS=channel,
            NANOSLACK_A2A_ALLOW="dana>eli",
            LOG_FORMAT="json",
            **_env(llm, alice.id, teammates),
        )
        eli = [openai_answer(send("eli: parser built.")), openai_text()]
        llm.openai.default = _by_instance([step1, step2_slow], eli)
        fleet = FleetProcess.start(env)
        await fleet.wait_for_event("fleet started")
        await emu.post_as_user(alice.id, channel, f"<@{apps['dana'].bot_user_id}> ship the parser")
        await emu.wait_for(lambda: len(llm.openai.requests) == 2, timeout=20)  # in the second call
        await fleet.kill()

        # The same turn again, to its end this time: three model calls.
        llm.openai.default = _by_instance([step1, step2, openai_text()], eli)
        fleet = FleetProcess.start(env)
        try:
            await emu.wait_for(
                lambda: "eli: parser built." in _posts(emu, channel, apps["eli"].bot_id), timeout=30
            )
            await emu.wait_for(
                lambda: "Working on it." in _posts(emu, channel, apps["dana"].bot_id), timeout=30
            )
            await asyncio.sleep(0)
        finally:
            assert await fleet.stop() == 0
    assert _posts(emu, channel, apps["dana"].bot_id) == ["Working on it."]
    assert _posts(emu, channel, apps["eli"].bot_id) == ["eli: parser built."]
    assert sql(db, "SELECT from_instance, to_instance FROM handoffs") == [("dana", "eli")]
    assert sql(db, "SELECT status FROM turns WHERE instance = 'dana' ORDER BY id") == [
        ("abandoned",),
        ("done",),
    ]
