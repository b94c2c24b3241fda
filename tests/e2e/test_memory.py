"""What an agent remembers (docs/memory.md), in the real fleet against the model server of
``tests.llm_server``: its own conversation replayed turn after turn, a request whose
beginning is the previous request's, cached tokens counted, notes and who may write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.conftest import FleetFactory, Room
from tests.llm_server import LLMServer, anthropic_answer, anthropic_text, openai_answer, openai_text, send


def _teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    for name in ("dana", "eli"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "SOUL.md").write_text(f"You are {name.title()}.\n")
    return root


def _env(room: Room, llm: LLMServer, **extra: str) -> dict[str, str]:
    return {
        "SLACK_OWNER": room.human.id,
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": "gpt-test",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "sk-test-0123456789",
        "NANOSLACK_TEAMMATES": str(_teammates(room)),
        **extra,
    }


def _statuses(room: Room, instance: str = "dana") -> list[str]:
    return [str(r[0]) for r in room.sql("SELECT status FROM turns WHERE instance = ? ORDER BY id", instance)]


def _texts(body: dict[str, Any]) -> str:
    """Everything a Chat Completions request shows the model (its tool calls too), as one string."""
    return json.dumps(body["messages"], ensure_ascii=False)


def _first_requests(llm: LLMServer) -> list[dict[str, Any]]:
    """The first request of each turn: the one whose last message is the turn's prompt."""
    return [r.json for r in llm.openai.requests if r.json["messages"][-1]["role"] == "user"]


async def _ask(room: Room, text: str, *, thread: str | None = None, turns: int) -> str:
    ts = await room.emu.post_as_user(room.human.id, room.channel, text, thread_ts=thread)
    await room.emu.wait_for(
        lambda: len(_statuses(room)) == turns and "running" not in _statuses(room), timeout=20
    )
    return ts


async def test_a_third_turn_in_a_thread_still_sees_the_question_that_started_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(send("I will keep it in mind.")),
            openai_text(),
            openai_answer(send("Second answer.")),
            openai_text(),
            openai_answer(send("It was ZEBRA-4471.")),
            openai_text(),
        )
        await fleet_factory(["dana"], **_env(room, llm))
        dana = room.mention("dana")
        top = await _ask(room, f"{dana} the codeword is ZEBRA-4471, keep it in mind", turns=1)
        await _ask(room, f"{dana} second question", thread=top, turns=2)
        await _ask(room, f"{dana} what was the codeword?", thread=top, turns=3)

    third = _first_requests(llm)[2]
    assert "ZEBRA-4471" in _texts(third)
    # What it did is there too: its own earlier send_message calls, in order.
    shown = _texts(third)
    assert shown.index("I will keep it in mind.") < shown.index("Second answer.")
    assert _statuses(room) == ["done", "done", "done"]


async def test_a_third_turn_in_a_dm_still_sees_the_first_message(
    room: Room, fleet_factory: FleetFactory
) -> None:
    im = room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im")
    async with LLMServer() as llm:
        llm.openai.push(*(a for i in range(3) for a in (openai_answer(send(f"answer {i}")), openai_text())))
        await fleet_factory(["dana"], **_env(room, llm))
        for i, text in enumerate(("my locker number is 8812", "nice weather", "what is my locker number?")):
            await room.emu.post_as_user(room.human.id, im.id, text)
            await room.emu.wait_for(
                lambda n=i + 1: len(_statuses(room)) == n and "running" not in _statuses(room), timeout=20
            )
    third = _first_requests(llm)[2]
    assert "8812" in _texts(third)


async def test_the_second_turns_request_starts_with_the_first_turns_request_byte_for_byte(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(send("One."), tokens=(100, 3)),
            openai_text(tokens=(110, 1), cached=100),
            openai_answer(send("Two."), tokens=(150, 3), cached=110),
            openai_text(tokens=(160, 1), cached=150),
        )
        await fleet_factory(["dana"], **_env(room, llm))
        dana = room.mention("dana")
        top = await _ask(room, f"{dana} first", turns=1)
        await _ask(room, f"{dana} second", thread=top, turns=2)
        first, second = _first_requests(llm)
        assert first["messages"][0]["role"] == "system"
        assert second["messages"][0] == first["messages"][0]
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assert second["tools"] == first["tools"]
        # Cached tokens are read from the usage, per step, and exported.
        cached = room.sql("SELECT cached_tokens FROM turn_steps WHERE kind = 'model' ORDER BY turn_id, step")
        assert [c for (c,) in cached] == [0, 100, 110, 150]


async def test_the_anthropic_back_end_marks_cache_breakpoints_on_the_system_prompt_tools_and_history(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.anthropic.push(anthropic_answer(send("Hi.")), anthropic_text())
        await fleet_factory(
            ["dana"],
            **{
                **_env(room, llm),
                "NANOSLACK_AGENT": "anthropic",
                "NANOSLACK_MODEL": "claude-test",
                "ANTHROPIC_BASE_URL": llm.anthropic_url,
                "ANTHROPIC_API_KEY": "sk-ant-test-0123456789",
            },
        )
        await _ask(room, f"{room.mention('dana')} hello", turns=1)
    body = llm.anthropic.requests[0].json
    assert any("cache_control" in block for block in body["system"])
    assert "cache_control" in body["tools"][-1]
    last = body["messages"][-1]["content"]
    assert isinstance(last, list) and "cache_control" in last[-1]
