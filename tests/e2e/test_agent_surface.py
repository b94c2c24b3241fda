"""Slack's agent surface in the real fleet (docs/agent-surface.md): the status line of a
DM turn, streamed DM replies (exactly once, across a SIGKILL too, split at Slack's
stream limit), rooms posted whole, the fallback of an app without ``assistant:write``,
and the assistant pane's prompts.

Real bolt and slack-sdk clients against the emulator; the model is ``nanoslack.testing.llm_server``
and a slow tool is the echo MCP server's ``slow``."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator.state import DEFAULT_SCOPES
from nanoslack.fleetproc import FleetProcess
from nanoslack.logs import configure_logging
from nanoslack.slack.surface import THINKING, using
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import LLMServer, backend_env, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.turn_agent import TurnAgent
from tests.tools.mcp_helpers import echo_server, write_config

SLOW_TOOL = "echo_slow"


def _teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    write_config(root / "dana" / "mcp.json", {"echo": echo_server()})
    return root


def _env(room: Room, llm: LLMServer, **extra: str) -> dict[str, str]:
    return openai_env(room.human.id, llm, _teammates(room), **extra)


def _im(room: Room, name: str = "dana") -> str:
    return room.emu.create_conversation([room.human.id, room.apps[name].bot_user_id], kind="im").id


def _bot_messages(room: Room, channel: str, name: str = "dana") -> list[dict[str, Any]]:
    bot_id = room.apps[name].bot_id
    return [m for m in room.emu.all_messages(channel) if m.get("bot_id") == bot_id]


def _turns(room: Room) -> list[str]:
    return [str(s) for (s,) in room.sql("SELECT status FROM turns WHERE instance = 'dana' ORDER BY id")]


def _events(out: io.StringIO, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def _slow(answer: Any, seconds: float) -> Any:
    return dataclasses.replace(answer, delay=seconds)


async def test_a_dm_turn_shows_thinking_then_the_tool_and_the_status_is_cleared_after_a_silent_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    async with LLMServer() as llm:
        llm.openai.push(
            _slow(openai_answer((SLOW_TOOL, {"seconds": 1.0})), 0.5),
            _slow(openai_text("nothing to say"), 0.5),
        )
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, "anything new?")
        await emu.wait_for(lambda: emu.status_of(im, ts) == THINKING, timeout=10)
        await emu.wait_for(lambda: emu.status_of(im, ts) == using(SLOW_TOOL), timeout=10)
        await emu.wait_for(lambda: _turns(room) == ["silent"], timeout=15)
        await emu.wait_for(lambda: emu.statuses_sent(im)[-1:] == [(ts, "")], timeout=5)
    sent = [s for t, s in emu.statuses_sent(im) if t == ts]
    assert sent == [THINKING, using(SLOW_TOOL), THINKING, ""]
    assert emu.status_of(im, ts) == ""
    assert _bot_messages(room, im) == []
    # A DM shows the status line, not the working reaction.
    assert not [c for c in emu.api_calls if c.method == "reactions.add"]


@pytest.mark.emulator(status_timeout=1.0)
async def test_a_long_tool_call_keeps_the_status_shown_past_slacks_timeout(
    room: Room, fleet_factory: FleetFactory
) -> None:
    """The emulator clears a status after 1 s (Slack: 2 min); the fleet re-sends it every
    0.3 s (NANOSLACK_STATUS_REFRESH; 90 s by default), so a 3 s tool (Slack: 3 min) never
    loses it."""
    emu = room.emu
    async with LLMServer() as llm:
        llm.openai.push(openai_answer((SLOW_TOOL, {"seconds": 3.0})), openai_text())
        await fleet_factory(["dana"], **_env(room, llm, NANOSLACK_STATUS_REFRESH="0.3"))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, "run the long job")
        await emu.wait_for(lambda: emu.status_of(im, ts) == using(SLOW_TOOL), timeout=10)
        seen: list[str] = []

        def tool_done() -> bool:
            seen.append(emu.status_of(im, ts))
            return len(llm.openai.requests) >= 2

        await emu.wait_for(tool_done, timeout=15, interval=0.05)
        await emu.wait_for(lambda: _turns(room) == ["silent"], timeout=10)
    # The last look may come after the turn ended (the model's second answer is instant).
    assert "" not in seen[:-1], "the status went missing while the tool ran"
    assert seen.count(using(SLOW_TOOL)) > len(seen) // 2
    resent = [s for t, s in emu.statuses_sent(im) if t == ts and s == using(SLOW_TOOL)]
    assert len(resent) >= 4  # 3 s of tool at one send per 0.3 s, with room for a busy machine


async def test_a_dm_reply_is_one_streamed_message_with_the_models_text_and_the_turns_metadata(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    answer = "Here is the plan:\n\n" + "\n".join(
        f"{i}. step {i} of the plan, in detail" for i in range(1, 80)
    )
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send(answer)), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, "plan my week")
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(lambda: not any(emu.is_streaming(im, m["ts"]) for m in _bot_messages(room, im)))
        await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 1, timeout=10)
    [reply] = _bot_messages(room, im)
    assert reply["text"] == answer
    assert reply["thread_ts"] == ts  # Slack streams only replies: the waking message's thread
    ((turn_id,),) = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    assert reply["metadata"]["event_type"] == "nanoslack_turn"
    assert reply["metadata"]["event_payload"]["turn"] == turn_id
    calls = emu.stream_calls(im)
    assert calls["chat.startStream"] == 1 and calls["chat.appendStream"] >= 1
    assert not [c for c in emu.api_calls if c.method == "chat.postMessage" and c.params.get("channel") == im]
    (start,) = [c for c in emu.api_calls if c.method == "chat.startStream"]
    assert start.params["recipient_user_id"] == room.human.id
    assert start.params["recipient_team_id"] == "T0EMULATOR"


async def test_a_20000_character_answer_is_streamed_as_two_messages_without_loss(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(230)]
    answer = "\n\n".join(p.strip() for p in paragraphs)
    assert len(answer) >= 20_000
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send(answer)), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        await emu.post_as_user(room.human.id, im, "tell me everything")
        await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 2, timeout=20)
    texts = [m["text"] for m in sorted(_bot_messages(room, im), key=lambda m: float(m["ts"]))]
    assert len(texts) == 2
    assert all(len(t) <= 12_000 for t in texts)
    assert "\n\n".join(texts) == answer
    assert emu.stream_calls(im)["chat.startStream"] == 2


async def test_a_room_reply_is_posted_whole_with_no_stream_calls(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    answer = "A whole answer for the room. " * 100
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send(answer)), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        await emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} status?")
        await emu.wait_for(lambda: _bot_messages(room, room.channel), timeout=15)
    [reply] = _bot_messages(room, room.channel)
    assert reply["text"] == answer.strip()
    assert emu.stream_calls(room.channel) == {
        "chat.startStream": 0,
        "chat.appendStream": 0,
        "chat.stopStream": 0,
    }
    assert not [c for c in emu.api_calls if c.method == "assistant.threads.setStatus"]


async def test_an_app_without_assistant_write_gets_plain_posts_and_one_log_line(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    room.apps["gus"] = emu.add_app("gus", scopes=sorted(DEFAULT_SCOPES - {"assistant:write"}))
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    agent = TurnAgent.install(room.tmp)
    agent.reply("gus", "answer {turn}")
    await fleet_factory(["gus"], SLACK_OWNER=room.human.id, **agent.env())
    im = _im(room, "gus")
    for n in (1, 2):
        await emu.post_as_user(room.human.id, im, f"question {n}")
        await emu.wait_for(lambda n=n: len(_bot_messages(room, im, "gus")) == n, timeout=15)
    texts = [(m["text"], m.get("thread_ts")) for m in _bot_messages(room, im, "gus")]
    assert texts == [("answer 1", None), ("answer 2", None)]  # today's plain, top-level posts
    refused = _events(out, "agent surface refused")
    # Sessions need the scope too (docs/agent-surface.md, "Sessions and Stop"): each part once.
    assert sorted((e["instance"], e["part"], e["reason"]) for e in refused) == [
        ("gus", "session", "missing_scope"),
        ("gus", "stream", "missing_scope"),
    ]
    assert emu.stream_calls(im)["chat.startStream"] == 1  # tried once, then never again


async def test_a_sigkill_mid_stream_and_a_restart_leave_one_message_with_the_whole_answer(
    room: Room,
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent = TurnAgent.install(room.tmp)
    answer = "\n".join(f"line {i}: the answer goes on and on" for i in range(150))
    agent.reply("dana", answer)
    env_file = write_fleet_env(
        room.tmp / ".env", emu, [dana], room.db, SLACK_OWNER=alice, LOG_FORMAT="json", **agent.env()
    )
    im = _im(room)
    partial = await _killed_mid_stream(room, env_file, im, "stream.appended", answer)
    second = FleetProcess.start(env_file)
    try:
        await second.wait_for_event("post recovered: stream finished", within=30)
    finally:
        assert await second.stop() == 0
    _assert_one_whole_message(room, im, partial, answer)


async def _drafted_killed_at_and_restarted(room: Room, failpoint: str) -> tuple[str, dict[str, Any], str]:
    """A DM answer drafted live while the model writes slowly, the fleet SIGKILLed at
    ``failpoint`` and started again: (the DM, what Slack showed at the kill, the answer)."""
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    answer = "\n".join(f"line {i}: the answer goes on and on" for i in range(60))
    async with LLMServer() as llm:
        slow = dataclasses.replace(openai_answer(send(answer)), chunk_chars=16, chunk_delay=0.02)
        llm.openai.push(slow, slow, openai_text())
        env = backend_env("openai", llm, "sk-test-0123456789")
        env_file = write_fleet_env(
            room.tmp / ".env", emu, [dana], room.db, SLACK_OWNER=alice, LOG_FORMAT="json", **env
        )
        im = _im(room)
        partial = await _killed_mid_stream(room, env_file, im, failpoint, answer)
        second = FleetProcess.start(env_file)
        try:
            # A restart on a busy machine takes a while: the turn runs again once it is up.
            await second.wait_for_event("posted", within=120)
        finally:
            assert await second.stop() == 0
    return im, partial, answer


async def _killed_mid_stream(
    room: Room, env_file: Path, im: str, failpoint: str, answer: str
) -> dict[str, Any]:
    """A fleet killed after the first append at ``failpoint``: the partial message it left."""
    emu = room.emu
    first = FleetProcess.start(env_file, failpoints=f"{failpoint}=kill@1")
    await emu.wait_for(lambda: emu.connections(room.apps["dana"].app_id) >= 1, timeout=60)
    await emu.post_as_user(room.human.id, im, "the long answer, please")
    assert await first.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
    [partial] = _bot_messages(room, im)
    assert emu.is_streaming(im, partial["ts"]) and len(partial["text"]) < len(answer)
    return partial


def _assert_one_whole_message(room: Room, im: str, partial: dict[str, Any], answer: str) -> None:
    emu = room.emu
    [whole] = _bot_messages(room, im)
    assert whole["ts"] == partial["ts"] and whole["text"] == answer
    assert whole["metadata"]["event_type"] == "nanoslack_turn"
    assert not emu.is_streaming(im, whole["ts"])
    assert emu.stream_calls(im)["chat.startStream"] == 1


# A turn's two posts: the first is drafted live (one line: nothing to append), the second
# is never drafted, so it takes the stream path of a whole post.
FIRST_POST = "On it."
SECOND_POST = "\n".join(f"line {i}: the second answer goes on and on" for i in range(150))


def _two_posts_env(room: Room) -> Path:
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", f"{FIRST_POST}\n---\n{SECOND_POST}")
    dana = room.apps["dana"]
    return write_fleet_env(
        room.tmp / ".env",
        room.emu,
        [dana],
        room.db,
        SLACK_OWNER=room.human.id,
        LOG_FORMAT="json",
        **agent.env(),
    )


def _replies_sent(room: Room) -> bool:
    rows = room.sql("SELECT status FROM outbox WHERE instance = 'dana' AND purpose = 'reply'")
    return len(rows) == 2 and all(status == "sent" for (status,) in rows)


async def _killed_at(room: Room, env_file: Path, im: str, failpoint: str) -> None:
    emu = room.emu
    first = FleetProcess.start(env_file, failpoints=f"{failpoint}=kill@1")
    await emu.wait_for(lambda: emu.connections(room.apps["dana"].app_id) >= 1, timeout=60)
    await emu.post_as_user(room.human.id, im, "the long answer, please")
    assert await first.wait(30) == -signal.SIGKILL, "the failpoint did not fire"


async def _restarted_until_replies_sent(room: Room, env_file: Path) -> None:
    second = FleetProcess.start(env_file)
    try:
        # Sent either way: the stream it left finished, or (the bug) a second message posted.
        await room.emu.wait_for(lambda: _replies_sent(room), timeout=60)
    finally:
        assert await second.stop() == 0


def _assert_each_post_once_and_whole(room: Room, im: str) -> None:
    emu = room.emu
    messages = sorted(_bot_messages(room, im), key=lambda m: float(m["ts"]))
    assert [m["text"] for m in messages] == [FIRST_POST, SECOND_POST], "a post is missing, or twice"
    for m in messages:
        assert m["metadata"]["event_type"] == "nanoslack_turn" and not emu.is_streaming(im, m["ts"])
    assert emu.stream_calls(im)["chat.startStream"] == 2


async def test_a_sigkill_mid_stream_of_a_turns_second_post_and_a_restart_leave_each_post_once_and_whole(
    room: Room,
) -> None:
    env_file, im = _two_posts_env(room), _im(room)
    await _killed_at(room, env_file, im, "stream.appended")
    halves = [m for m in _bot_messages(room, im) if room.emu.is_streaming(im, m["ts"])]
    assert len(halves) == 1 and len(halves[0]["text"]) < len(SECOND_POST)
    await _restarted_until_replies_sent(room, env_file)
    _assert_each_post_once_and_whole(room, im)


async def test_a_sigkill_between_slacks_answer_to_a_stream_start_and_its_ts_stored_leaves_each_post_once(
    room: Room,
) -> None:
    env_file, im = _two_posts_env(room), _im(room)
    await _killed_at(room, env_file, im, "stream.started")
    assert [m for m in _bot_messages(room, im) if room.emu.is_streaming(im, m["ts"])]
    await _restarted_until_replies_sent(room, env_file)
    _assert_each_post_once_and_whole(room, im)


async def test_a_stream_slack_breaks_off_after_its_start_is_finished_as_one_message_not_posted_again(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", f"{FIRST_POST}\n---\n{SECOND_POST}")
    await fleet_factory(["dana"], SLACK_OWNER=room.human.id, **agent.env())
    im = _im(room)
    emu.fail_next("chat.appendStream", error="internal_error")  # Slack answered: not appended
    await emu.post_as_user(room.human.id, im, "the long answer, please")
    await emu.wait_for(lambda: _replies_sent(room), timeout=30)
    _assert_each_post_once_and_whole(room, im)


async def test_the_assistant_panes_title_and_suggested_prompts_are_the_teammates(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    general = emu.create_conversation([alice, room.apps["dana"].bot_user_id], kind="channel", name="general")
    teammates = room.tmp / "teammates"
    (teammates / "dana").mkdir(parents=True)
    (teammates / "dana" / "SOUL.md").write_text(
        '---\nrole: planner\nprompts: ["Plan my day", "What is blocked?"]\n---\nYou are Dana.\n'
    )
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "Here is your day.")
    await fleet_factory(["dana"], SLACK_OWNER=alice, NANOSLACK_TEAMMATES=str(teammates), **agent.env())
    thread_ts = await emu.open_assistant_thread(alice, "dana")
    im = _im(room)
    await emu.wait_for(lambda: emu.suggested_prompts(im, thread_ts) is not None, timeout=10)
    assert emu.suggested_prompts(im, thread_ts) == {
        "prompts": [
            {"title": "Plan my day", "message": "Plan my day"},
            {"title": "What is blocked?", "message": "What is blocked?"},
        ]
    }
    assert emu.thread_title(im, thread_ts) == "dana · planner"

    # Switching channels with the pane open is recorded and shown to the next turn.
    await emu.change_assistant_context(alice, "dana", im, thread_ts, general.id)
    await emu.wait_for(lambda: room.sql("SELECT context_name FROM assistant_threads") == [("general",)])
    await emu.post_as_user(alice, im, "Plan my day", thread_ts=thread_ts)
    await emu.wait_for(lambda: agent.calls("dana"), timeout=15)
    assert "[Viewing #general]" in agent.calls("dana")[0]["stdin"]
    # The answer is streamed into the pane's thread.
    await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 1, timeout=15)
    [reply] = [m for m in _bot_messages(room, im) if m.get("subtype") != "assistant_app_thread"]
    assert reply["thread_ts"] == thread_ts and reply["text"] == "Here is your day."


async def test_a_stream_slack_refuses_once_goes_out_as_a_plain_post_and_the_next_reply_streams(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "answer {turn}")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    im = _im(room)
    emu.fail_next("chat.startStream", error="invalid_recipient")
    await emu.post_as_user(alice, im, "first")
    await emu.wait_for(lambda: len(_bot_messages(room, im)) == 1, timeout=15)
    second = await emu.post_as_user(alice, im, "second")
    await emu.wait_for(lambda: len(_bot_messages(room, im)) == 2, timeout=15)
    plain, streamed = sorted(_bot_messages(room, im), key=lambda m: float(m["ts"]))
    assert (plain["text"], plain.get("thread_ts")) == ("answer 1", None)
    assert (streamed["text"], streamed["thread_ts"]) == ("answer 2", second)


def _held(answer: Any, gate: asyncio.Event, *, at: int) -> Any:
    """``answer`` streamed in small pieces, the model server waiting for ``gate`` after ``at`` of them."""
    return dataclasses.replace(answer, gate=gate, hold_at=at, chunk_chars=16)


async def test_a_dm_reply_grows_in_slack_while_the_model_is_still_writing_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    answer = 'Here is what I found, "in short":\n\n' + "\n".join(
        f"- finding {i}, with its details é" for i in range(40)
    )
    gate = asyncio.Event()
    async with LLMServer() as llm:
        llm.openai.push(_held(openai_answer(send(answer)), gate, at=40), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, "what did you find?")

        def grown() -> bool:
            return emu.stream_calls(im)["chat.appendStream"] >= 1

        await emu.wait_for(grown, timeout=15)
        [draft] = _bot_messages(room, im)
        # The model server still holds the rest of its answer.
        assert llm.openai.finished == 0 and not gate.is_set()
        assert emu.is_streaming(im, draft["ts"])
        assert draft["text"] and answer.startswith(draft["text"]) and len(draft["text"]) < len(answer)
        gate.set()
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 1, timeout=10)
    [reply] = _bot_messages(room, im)
    assert reply["ts"] == draft["ts"] and reply["thread_ts"] == ts
    assert reply["text"] == answer
    ((turn_id,),) = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    assert reply["metadata"]["event_payload"]["turn"] == turn_id
    assert emu.stream_calls(im)["chat.startStream"] == 1
    assert not [c for c in emu.api_calls if c.method in ("chat.postMessage", "chat.update")]
    assert room.sql("SELECT count(*) FROM reply_drafts") == [(0,)]


async def test_a_draft_of_a_turn_that_ends_silent_is_deleted_and_its_status_cleared(
    room: Room, fleet_factory: FleetFactory
) -> None:
    """The model begins a post, then only acknowledges: nothing is posted, the draft goes."""
    emu = room.emu
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send("Acknowledged.")), openai_text())
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, "noted?")
        await emu.wait_for(lambda: _turns(room) == ["silent"], timeout=15)
        await emu.wait_for(lambda: emu.statuses_sent(im)[-1:] == [(ts, "")], timeout=5)
        await emu.wait_for(lambda: not _bot_messages(room, im), timeout=5)
    assert emu.status_of(im, ts) == ""
    assert room.sql("SELECT count(*) FROM reply_drafts") == [(0,)]


async def test_a_sigkill_while_the_model_writes_and_a_restart_leave_one_message_with_the_whole_answer(
    room: Room,
) -> None:
    im, partial, answer = await _drafted_killed_at_and_restarted(room, "draft.appended")
    _assert_one_whole_message(room, im, partial, answer)
    assert _turns(room) == ["abandoned", "done"]


async def test_a_sigkill_between_slacks_answer_to_a_drafts_start_and_its_ts_stored_leaves_one_whole_message(
    room: Room,
) -> None:
    im, partial, answer = await _drafted_killed_at_and_restarted(room, "draft.started")
    _assert_one_whole_message(room, im, partial, answer)


async def test_a_command_agents_dm_reply_grows_line_by_line_as_it_prints(
    room: Room, fleet_factory: FleetFactory
) -> None:
    """The command prints its first line, waits for the test to say go, prints the rest."""
    emu = room.emu
    gate = room.tmp / "go"
    command = (
        f"cat >/dev/null; printf 'First, the short answer.\\n'; "
        f"while [ ! -e {gate} ]; do sleep 0.05; done; printf 'Then the details.\\n'"
    )
    await fleet_factory(["dana"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND=command)
    im = _im(room)
    await emu.post_as_user(room.human.id, im, "how does it work?")
    await emu.wait_for(
        lambda: [m["text"] for m in _bot_messages(room, im)] == ["First, the short answer."], timeout=20
    )
    [draft] = _bot_messages(room, im)
    assert emu.is_streaming(im, draft["ts"])
    gate.touch()
    await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 1, timeout=20)
    [reply] = _bot_messages(room, im)
    assert reply["ts"] == draft["ts"]
    assert reply["text"] == "First, the short answer.\nThen the details."
    assert reply["metadata"]["event_type"] == "nanoslack_turn"


async def test_a_tool_that_runs_after_the_reply_began_streaming_is_shown_as_a_card_of_that_message(
    room: Room, fleet_factory: FleetFactory
) -> None:
    """The model writes its answer, then calls a tool: the card joins the message being
    streamed while the turn still runs, not only once it is recorded."""
    emu = room.emu
    answer = "Starting on it; the job runs now."
    gate = asyncio.Event()
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(send(answer)),
            openai_answer((SLOW_TOOL, {"seconds": 0.2})),
            _held(openai_text(), gate, at=0),
        )
        await fleet_factory(["dana"], **_env(room, llm))
        im = _im(room)
        await emu.post_as_user(room.human.id, im, "start the job")

        def card_shown() -> bool:
            return any(
                [t.get("title") for t in emu.stream_tasks(im, m["ts"])] == [SLOW_TOOL]
                for m in _bot_messages(room, im)
            )

        await emu.wait_for(card_shown, timeout=15)
        # The model's last answer is still held: the turn has not recorded anything yet.
        assert _turns(room) == ["running"]
        [draft] = _bot_messages(room, im)
        assert emu.is_streaming(im, draft["ts"])
        gate.set()
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(lambda: emu.stream_calls(im)["chat.stopStream"] == 1, timeout=10)
    [reply] = _bot_messages(room, im)
    assert reply["ts"] == draft["ts"] and reply["text"] == answer
    assert [(t["title"], t["status"]) for t in emu.stream_tasks(im, reply["ts"])] == [(SLOW_TOOL, "complete")]
