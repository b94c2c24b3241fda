"""The LLM back ends' tool loop in the real fleet (docs/agents.md): an ``openai``
agent against the model server of ``nanoslack.testing.llm_server``, its host tools served by the
fleet, its posts, steps and budgets as Slack and the database show them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from nanoslack.fleetproc import FleetProcess
from nanoslack.logs import configure_logging
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import LLMServer, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import dm_buttons, openai_env

SKILL = "# Review: look for failure paths\nThen say what you found.\n"


def _teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    (root / "_skills").mkdir(exist_ok=True)
    (root / "_skills" / "review.md").write_text(SKILL)
    return root


def _env(room: Room, llm: LLMServer, **extra: str) -> dict[str, str]:
    return openai_env(room.human.id, llm, _teammates(room), **extra)


def _dana_posts(room: Room) -> list[str]:
    bot_id = room.apps["dana"].bot_id
    found = [m for m in room.emu.all_messages(room.channel) if m.get("bot_id") == bot_id]
    return [str(m["text"]) for m in sorted(found, key=lambda m: float(m["ts"]))]


def _turns(room: Room) -> list[tuple[Any, ...]]:
    return room.sql("SELECT id, status FROM turns WHERE instance = 'dana' ORDER BY id")


def _steps(room: Room, turn_id: int) -> list[tuple[Any, ...]]:
    return room.sql("SELECT kind, name FROM turn_steps WHERE turn_id = ? ORDER BY step", turn_id)


def _events(out: io.StringIO, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


async def test_a_model_that_reads_a_skill_then_posts_posts_once_and_its_second_request_carries_the_skill(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(("read_skill", {"name": "review"})),
            openai_answer(send("Reviewed: the failure paths look fine.")),
            openai_text("Posted it."),
        )
        await fleet_factory(["dana"], **_env(room, llm))
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} review the plan?")
        await room.emu.wait_for(lambda: [s for _, s in _turns(room)] == ["done"], timeout=15)
        # Posted by the outbox after the turn committed.
        await room.emu.wait_for(lambda: _dana_posts(room) == ["Reviewed: the failure paths look fine."])
    assert len(llm.openai.requests) == 3
    assert llm.openai.requests[1].tool_results() == [SKILL]
    ((turn_id, _),) = _turns(room)
    assert _steps(room, turn_id) == [
        ("model", "gpt-test"),
        ("tool", "read_skill"),
        ("model", "gpt-test"),
        ("tool", "send_message"),
        ("model", "gpt-test"),
    ]


async def test_an_unknown_skills_result_names_the_skills_there_are(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(("read_skill", {"name": "deploy"})), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} deploy it?")
        await room.emu.wait_for(lambda: [s for _, s in _turns(room)] == ["silent"], timeout=15)

    (result,) = llm.openai.requests[1].tool_results()
    assert "no skill named 'deploy'" in result and "review" in result
    assert _dana_posts(room) == []


async def test_a_model_that_never_stops_ends_after_max_steps_posts_what_it_sent_and_the_fleet_goes_on(
    room: Room, fleet_factory: FleetFactory
) -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send("On it.")))
        llm.openai.default = openai_answer(("read_skill", {"name": "review"}))
        await fleet_factory(["dana"], **_env(room, llm, NANOSLACK_MAX_STEPS="3"))
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} keep digging")
        await room.emu.wait_for(lambda: [s for _, s in _turns(room)] == ["done"], timeout=15)
        assert len(llm.openai.requests) == 3
        await room.emu.wait_for(lambda: _dana_posts(room) == ["On it."])
        assert [(e["instance"], e["steps"]) for e in _events(out, "turn step limit reached")] == [("dana", 3)]

        # The fleet goes on: the next message is a fresh turn, answered.
        llm.openai.push(openai_answer(send("Found it.")), openai_text())
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} and now?")
        await room.emu.wait_for(lambda: _dana_posts(room) == ["On it.", "Found it."], timeout=15)
    await room.emu.wait_for(lambda: [s for _, s in _turns(room)] == ["done", "done"], timeout=5)


async def test_a_daily_cap_spent_by_the_first_step_stops_the_loop_before_the_second_call_and_asks_the_owners(
    room: Room, fleet_factory: FleetFactory
) -> None:
    owner = room.human.id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(("read_skill", {"name": "review"}), tokens=(40, 2)))
        await fleet_factory(["dana"], **_env(room, llm, NANOSLACK_DAILY_TOKENS="10"))
        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} first job")
        await room.emu.wait_for(lambda: dm_buttons(room.emu, owner, "nanoslack_budget_allow"), timeout=15)
        assert [s for _, s in _turns(room)] == ["budget"]
        assert len(llm.openai.requests) == 1  # the second call was never made
        ((turn_id, _),) = _turns(room)
        assert _steps(room, turn_id) == [("model", "gpt-test"), ("tool", "read_skill")]
        assert room.sql("SELECT tokens FROM turns WHERE id = ?", turn_id) == [(42,)]

        # Allow gives it one more budget: the next job is answered.
        (allow,) = dm_buttons(room.emu, owner, "nanoslack_budget_allow")
        llm.openai.push(openai_answer(send("On it."), tokens=(3, 2)), openai_text(tokens=(3, 2)))
        await room.emu.click_button(
            owner, allow["channel"], allow["ts"], "nanoslack_budget_allow", allow["value"]
        )
        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} second job")
        await room.emu.wait_for(lambda: "On it." in _dana_posts(room), timeout=15)


async def test_a_nanoslack_run_process_runs_the_loop_against_the_model_server_by_its_url(room: Room) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(("read_skill", {"name": "review"})),
            openai_answer(send("Reviewed in a child process.")),
            openai_text(),
        )
        env_file = write_fleet_env(
            room.tmp / ".env",
            room.emu,
            [room.apps["dana"]],
            room.db,
            SLACK_A2A_ROOMS=room.channel,
            LOG_FORMAT="json",
            **_env(room, llm),
        )
        fleet = FleetProcess.start(env_file)
        try:
            await room.emu.wait_for(lambda: room.emu.connections(room.apps["dana"].app_id) >= 1, timeout=30)
            await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} review?")
            await room.emu.wait_for(lambda: _dana_posts(room) == ["Reviewed in a child process."], timeout=30)
            await fleet.wait_for_event("agent replied", instance="dana", posts=1, steps=3)
        finally:
            await fleet.stop()
    assert llm.openai.requests[1].tool_results() == [SKILL]
