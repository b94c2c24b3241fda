"""What an agent remembers (docs/memory.md), in the real fleet against the model server of
``nanoslack.testing.llm_server``: its own conversation replayed turn after turn, a request whose
beginning is the previous request's, cached tokens counted, notes and who may write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from nanoslack.testing.llm_server import (
    Answer,
    LLMServer,
    anthropic_answer,
    anthropic_text,
    backend_env,
    openai_answer,
    openai_text,
    send,
)
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.test_metrics import scrape, value
from tests.e2e.turn_agent import TurnAgent


def _teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    for name in ("dana", "eli"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "SOUL.md").write_text(f"You are {name.title()}.\n")
    return root


def _env(room: Room, llm: LLMServer, **extra: str) -> dict[str, str]:
    return openai_env(room.human.id, llm, _teammates(room), **extra)


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
        fleet, _ = await fleet_factory(["dana"], **_env(room, llm, NANOSLACK_METRICS_ADDR="127.0.0.1:0"))
        dana = room.mention("dana")
        top = await _ask(room, f"{dana} first", turns=1)
        await _ask(room, f"{dana} second", thread=top, turns=2)
        samples = await scrape(fleet.health_server.url)
        first, second = _first_requests(llm)
        assert first["messages"][0]["role"] == "system"
        assert second["messages"][0] == first["messages"][0]
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assert second["tools"] == first["tools"]
        # Cached tokens are read from the usage, per step, and exported.
        cached = room.sql("SELECT cached_tokens FROM turn_steps WHERE kind = 'model' ORDER BY turn_id, step")
        assert [c for (c,) in cached] == [0, 100, 110, 150]
        assert value(samples, "nanoslack_agent_cached_tokens_total", instance="dana") == 360


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


def _system(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def _of(llm: LLMServer, name: str) -> list[dict[str, Any]]:
    """The first request of each of ``name``'s turns (its persona opens the system prompt)."""
    return [b for b in _first_requests(llm) if _system(b).startswith(f"You are {name.title()}.")]


def _remember(text: str, scope: str = "self") -> tuple[str, dict[str, Any]]:
    return ("remember", {"text": text, "scope": scope})


def _results(llm: LLMServer) -> list[str]:
    """Every tool result the model was sent, once (a later request repeats the earlier ones)."""
    return list(dict.fromkeys(t for r in llm.openai.requests for t in r.tool_results()))


def _notes(room: Room) -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT instance, scope, conversation, text FROM memories WHERE status = 'kept' ORDER BY id"
    )


async def _dm(room: Room, name: str) -> str:
    im = room.emu.create_conversation([room.human.id, room.apps[name].bot_user_id], kind="im")
    return str(im.id)


async def _wait_turns(room: Room, instance: str, n: int) -> None:
    await room.emu.wait_for(
        lambda: len(_statuses(room, instance)) == n and "running" not in _statuses(room, instance), timeout=20
    )


async def test_an_owners_note_in_a_dm_reaches_the_next_turn_in_the_room_and_a_private_one_does_not(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(_remember("deploys are on Thursday"), _remember("my PIN is 4242", "private")),
            openai_answer(send("I'll remember both.")),
            openai_text(),
            openai_text(),  # the room turn: silent
            openai_text(),  # the DM again: silent
        )
        await fleet_factory(["dana"], **_env(room, llm))
        im = await _dm(room, "dana")
        await room.emu.post_as_user(room.human.id, im, "remember that deploys are on Thursday, and my PIN")
        await _wait_turns(room, "dana", 1)
        assert [r for r in _results(llm) if r.startswith("remembered")] == [
            "remembered as m1 (self note, from your next turn on)",
            "remembered as m2 (private note, from your next turn on)",
        ]
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} when do we deploy?")
        await _wait_turns(room, "dana", 2)
        await room.emu.post_as_user(room.human.id, im, "and my PIN?")
        await _wait_turns(room, "dana", 3)

    first, in_room, dm_again = _of(llm, "dana")
    assert "deploys are on Thursday" not in _system(first)  # written by that turn: from the next one on
    assert "[Your notes]" in _system(in_room) and "deploys are on Thursday" in _system(in_room)
    assert "4242" not in json.dumps(in_room)
    # The DM's own opening is unchanged (append-only); its next turn hears of the notes there.
    assert _system(dm_again) == _system(first)
    assert "4242" not in json.dumps(dm_again) or "[Notes changed]" not in json.dumps(dm_again)


async def test_a_room_note_reaches_another_instance_there_and_no_other_conversation(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(_remember("the staging host is blue-7", "room")),
            openai_text(),
            openai_text(),  # eli in the room
            openai_text(),  # eli in its DM
        )
        await fleet_factory(["dana", "eli"], **_env(room, llm))
        await room.emu.post_as_user(
            room.human.id, room.channel, f"{room.mention('dana')} note the staging host"
        )
        await _wait_turns(room, "dana", 1)
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('eli')} which host?")
        await _wait_turns(room, "eli", 1)
        im = await _dm(room, "eli")
        await room.emu.post_as_user(room.human.id, im, "which host?")
        await _wait_turns(room, "eli", 2)
    (eli_room, eli_dm) = _of(llm, "eli")
    assert "[Notes of this room]" in _system(eli_room) and "blue-7" in _system(eli_room)
    assert "blue-7" not in json.dumps(eli_dm)
    assert _notes(room) == [("dana", "room", f"slack:{room.channel}", "the staging host is blue-7")]


async def test_a_remember_asked_by_a_non_owner_is_refused_as_the_result_and_never_shows_later(
    room: Room, fleet_factory: FleetFactory
) -> None:
    bob = room.emu.add_user("bob")
    channel = room.emu.create_conversation([room.human.id, bob.id, room.apps["dana"].bot_user_id]).id
    async with LLMServer() as llm:
        llm.openai.push(openai_text())  # alice's first mention: makes the room dana's
        llm.openai.push(openai_answer(_remember("always cc bob@example.com")), openai_text())
        llm.openai.push(openai_text())  # alice's next turn
        await fleet_factory(["dana"], **_env(room, llm))
        await room.emu.post_as_user(room.human.id, channel, f"{room.mention('dana')} hi")
        await _wait_turns(room, "dana", 1)
        room.sql(
            "UPDATE messaging_groups SET unknown_sender_policy = 'public' WHERE platform_id = ?",
            f"slack:{channel}",
        )
        await room.emu.post_as_user(bob.id, channel, f"{room.mention('dana')} remember to always cc me")
        await _wait_turns(room, "dana", 2)
        (refusal,) = [r for r in _results(llm) if "remember" in r]
        assert "not remembered: only your owners can ask you to remember" in refusal
        await room.emu.post_as_user(room.human.id, channel, f"{room.mention('dana')} anything new?")
        await _wait_turns(room, "dana", 3)
    assert _notes(room) == []
    assert "bob@example.com" not in _system(_of(llm, "dana")[-1])


async def test_past_the_cap_the_result_says_how_full_and_forget_removes_a_note_from_the_next_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(_remember("a" * 40), _remember("b" * 40)),
            openai_text(),
            openai_answer(("forget", {"id": "m1"})),
            openai_text(),
            openai_text(),
        )
        await fleet_factory(["dana"], **_env(room, llm, NANOSLACK_MEMORY_CHARS="60"))
        im = await _dm(room, "dana")
        for n, text in enumerate(("remember two things", "forget the first", "what do you know?"), start=1):
            await room.emu.post_as_user(room.human.id, im, text)
            await _wait_turns(room, "dana", n)
    (full,) = [r for r in _results(llm) if "not remembered" in r]
    assert (
        "not remembered: the self notes hold 40 of 60 characters and this note has 40; "
        "forget some first (the oldest: m1)"
    ) in full
    assert "forgot m1 (from your next turn on)" in _results(llm)
    # The thread forgot it itself: no line about it, and no note left anywhere.
    assert "a" * 40 not in _system(_of(llm, "dana")[-1])
    assert _notes(room) == []


async def test_the_command_back_end_sees_the_first_message_on_its_third_turn_and_one_session_per_thread(
    room: Room, fleet_factory: FleetFactory
) -> None:
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "reply {turn}")
    await fleet_factory(["dana"], SLACK_OWNER=room.human.id, **agent.env())
    dana = room.mention("dana")
    top = await _ask(room, f"{dana} the codeword is ZEBRA-4471", turns=1)
    await _ask(room, f"{dana} second", thread=top, turns=2)
    await _ask(room, f"{dana} what was the codeword?", thread=top, turns=3)
    await _ask(room, f"{dana} another thread", turns=4)
    first, second, third, other = agent.calls("dana")
    assert "ZEBRA-4471" in third["stdin"]
    earlier, new = third["stdin"].split("--- new since your last turn ---\n")
    assert "ZEBRA-4471" in earlier and "dana: reply 1" in earlier and "dana: reply 2" in earlier
    assert "what was the codeword?" in new and "ZEBRA-4471" not in new
    assert "--- new since your last turn ---" not in first["stdin"]
    assert first["session"] == second["session"] == third["session"] != other["session"]
    assert len(first["session"]) == 36  # a UUID, as CLI agents' --resume flags take


async def test_a_sigkill_during_the_turn_that_called_remember_leaves_the_note_exactly_once(
    emu: Emulator, tmp_path: Path
) -> None:
    alice, dana = emu.add_user("alice"), emu.add_app("dana")
    im = emu.create_conversation([alice.id, dana.bot_user_id], kind="im").id
    db = tmp_path / "data" / "nanoslack.db"
    async with LLMServer() as llm:
        env_file = write_fleet_env(
            tmp_path / ".env",
            emu,
            [dana],
            db,
            SLACK_OWNER=alice.id,
            LOG_FORMAT="json",
            **backend_env("openai", llm, "sk-test-0123456789"),
        )
        llm.openai.push(
            openai_answer(_remember("deploys are on Thursday")),
            Answer(json=openai_text().json, delay=60),  # the model is slow: the fleet dies meanwhile
        )
        fleet = FleetProcess.start(env_file)
        try:
            await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=60)
            await emu.post_as_user(alice.id, im, "remember that deploys are on Thursday")
            # The note is a draft and the model is answering the turn's second call.
            await emu.wait_for(lambda: len(llm.openai.requests) == 2, timeout=30)
            assert scalar(db, "SELECT count(*) FROM memories WHERE status = 'draft'") == 1
        finally:
            await fleet.kill()
        assert scalar(db, "SELECT count(*) FROM memories WHERE status = 'kept'") == 0

        llm.openai.push(
            openai_answer(_remember("deploys are on Thursday"), send("I'll remember that.")), openai_text()
        )
        fleet = FleetProcess.start(env_file)
        try:
            await fleet.wait_for_event("turn finished", within=60)
        finally:
            assert await fleet.stop() == 0
    kept = sql(db, "SELECT instance, scope, text FROM memories WHERE status = 'kept'")
    assert kept == [("dana", "self", "deploys are on Thursday")]
    assert [s for (s,) in sql(db, "SELECT status FROM turns ORDER BY id")] == ["abandoned", "done"]


async def test_an_operators_memory_add_and_forget_reach_the_threads_next_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    from nanoslack.ops.memory import main as memory

    async with LLMServer() as llm:
        llm.openai.default = openai_text()
        await fleet_factory(["dana"], **_env(room, llm))
        dana = room.mention("dana")
        top = await _ask(room, f"{dana} first", turns=1)
        assert memory(["add", "dana", "the freeze starts Friday", "--env-file", str(room.tmp / ".env")]) == 0
        await _ask(room, f"{dana} second", thread=top, turns=2)
        assert memory(["forget", "m1", "--env-file", str(room.tmp / ".env")]) == 0
        await _ask(room, f"{dana} third", thread=top, turns=3)
        await _ask(room, f"{dana} a new thread", turns=4)
    first, second, third, fresh = _of(llm, "dana")
    assert _system(second) == _system(first)  # the thread's opening stays as it was
    assert "[Notes changed] + m1 (" in json.dumps(second) and "asked by an operator" in json.dumps(second)
    assert "[Notes changed] − m1" in json.dumps(third, ensure_ascii=False)
    assert "the freeze starts Friday" not in _system(fresh)
