"""Slack's agent sessions and their Stop button in the real fleet (docs/agent-surface.md,
"Sessions and Stop"): a DM turn's session goes processing → active; a Stop click cancels the
turn answering there (its model call, an owner's approval it waits for), ``Stopped.`` once,
the next message answered as usual; a Stop with no turn does nothing; a Slack without
sessions keeps the status line.

Real slack-sdk clients against the emulator; the model is ``nanoslack.testing.llm_server``,
held at a gate (never a timer) to make a turn slow."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import signal
from pathlib import Path
from typing import Any

from nanoslack.fleetproc import FleetProcess
from nanoslack.logs import configure_logging
from nanoslack.slack.surface import THINKING, using
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import LLMServer, backend_env, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.test_metrics import scrape, value
from tests.e2e.turn_agent import TurnAgent
from tests.tools.mcp_helpers import echo_server, write_config

# A Stop ends the turn within this long (docs/agent-surface.md).
STOP_DEADLINE_S = 2.0
QUESTION = "Please write me a long plan for the quarter, with every milestone and its owner"


def _teammates(room: Room, *, approval: bool = False) -> Path:
    root = room.tmp / "teammates"
    (root / "dana").mkdir(parents=True, exist_ok=True)
    (root / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    server = echo_server(tools={"echo": {"approval": "owner"}}) if approval else echo_server()
    write_config(root / "dana" / "mcp.json", {"echo": server})
    return root


def _im(room: Room) -> str:
    return room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im").id


def _bot_texts(room: Room, channel: str) -> list[str]:
    bot_id = room.apps["dana"].bot_id
    messages = [m for m in room.emu.all_messages(channel) if m.get("bot_id") == bot_id]
    return [str(m.get("text") or "") for m in sorted(messages, key=lambda m: float(m["ts"]))]


def _bot_ts(room: Room, channel: str) -> str:
    bot_id = room.apps["dana"].bot_id
    return str(next(m["ts"] for m in room.emu.all_messages(channel) if m.get("bot_id") == bot_id))


def _turns(room: Room) -> list[str]:
    return [str(s) for (s,) in room.sql("SELECT status FROM turns WHERE instance = 'dana' ORDER BY id")]


def _session(room: Room, im: str, ts: str) -> dict[str, Any]:
    return room.emu.session(im, ts) or {}


def _events(out: io.StringIO, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def _held(gate: asyncio.Event, text: str) -> Any:
    """A streamed model answer held after its first words (event 5) until ``gate`` is set."""
    return dataclasses.replace(openai_answer(send(text)), chunk_chars=8, gate=gate, hold_at=5)


async def test_a_dm_turns_session_goes_processing_then_active_titled_with_the_first_message(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu = room.emu
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send("Here is the plan.")), openai_text())
        await fleet_factory(["dana"], **openai_env(room.human.id, llm, _teammates(room)))
        im = _im(room)
        ts = await emu.post_as_user(room.human.id, im, QUESTION)
        await emu.wait_for(lambda: "Here is the plan." in _bot_texts(room, im), timeout=15)
        await emu.wait_for(lambda: _session(room, im, ts).get("status") == "active", timeout=5)
    session = _session(room, im, ts)
    assert session["statuses"][0] == "processing"
    assert "suspended" not in session["statuses"]
    assert session["title"] == QUESTION[:59].rstrip() + "…"
    assert _turns(room) == ["done"]


async def test_a_stop_click_during_a_slow_model_call_stops_the_turn_and_the_next_message_is_answered(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    gate = asyncio.Event()
    async with LLMServer() as llm:
        llm.openai.push(
            _held(gate, "The plan, in twelve steps: first we gather every milestone"),
            openai_answer(send("Second answer.")),
            openai_text(),
        )
        await fleet_factory(["dana"], **openai_env(alice, llm, _teammates(room)))
        im = _im(room)
        ts = await emu.post_as_user(alice, im, QUESTION)
        # The model is held mid-answer: the draft shows its first words, the session processes.
        await emu.wait_for(lambda: len(_bot_texts(room, im)) == 1, timeout=15)
        await emu.wait_for(lambda: _session(room, im, ts).get("status") == "processing", timeout=5)
        await emu.post_as_user(alice, im, "and one more thing")  # queued behind the held turn
        event = await emu.click_stop(alice, im, ts)
        assert event["streaming_message_ts"]  # Slack stopped the draft's stream itself
        await emu.wait_for(lambda: _turns(room)[:1] == ["stopped"], timeout=STOP_DEADLINE_S)
        await emu.wait_for(lambda: _turns(room) == ["stopped", "done"], timeout=15)
        await emu.wait_for(lambda: "Second answer." in _bot_texts(room, im), timeout=5)
        gate.set()  # the held answer would go nowhere now: its caller is gone
    texts = _bot_texts(room, im)
    assert texts[1:] == ["Stopped.", "Second answer."], "something of the stopped turn came after Stopped."
    # The draft, kept as Slack stopped it: its first words.
    assert texts[0] and "The plan, in twelve steps".startswith(texts[0])
    [(posts, error)] = room.sql(
        "SELECT posts, error FROM turns WHERE instance = 'dana' AND status = 'stopped'"
    )
    assert posts == 1 and error == f"stopped by {alice}"
    assert _session(room, im, ts)["status"] == "active"
    # Each message consumed once: the stopped turn's is done, not answered again.
    pending = room.sql("SELECT count(*) FROM messages WHERE instance = 'dana' AND status = 'pending'")
    assert pending == [(0,)]


async def test_a_stop_click_while_a_tool_waits_for_the_owners_allow_ends_the_wait(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(("echo_echo", {"text": "hi"})), openai_text())
        await fleet_factory(["dana"], **openai_env(alice, llm, _teammates(room, approval=True)))
        im = _im(room)
        ts = await emu.post_as_user(alice, im, "echo hi, once I allow it")
        await emu.wait_for(lambda: _session(room, im, ts).get("status") == "suspended", timeout=15)
        assert room.sql("SELECT count(*) FROM owner_asks WHERE kind = 'tool' AND status = 'open'") == [(1,)]
        # Slack shows Stop only while processing: the person clicks it in the moment before.
        await room.client("dana").agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="processing")
        await emu.click_stop(alice, im, ts)
        await emu.wait_for(lambda: _turns(room) == ["stopped"], timeout=STOP_DEADLINE_S)
        await emu.wait_for(lambda: "Stopped." in _bot_texts(room, im), timeout=5)
    assert room.sql("SELECT count(*) FROM owner_asks WHERE kind = 'tool' AND status = 'open'") == [(0,)]
    assert len(llm.openai.requests) == 1  # the model never heard of the tool's result
    assert _session(room, im, ts)["statuses"][:2] == ["processing", "suspended"]


async def test_a_stop_with_no_turn_running_does_nothing(room: Room, fleet_factory: FleetFactory) -> None:
    emu, alice = room.emu, room.human.id
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send("Answered.")), openai_text())
        await fleet_factory(["dana"], **openai_env(alice, llm, _teammates(room)))
        im = _im(room)
        idle = await emu.post_as_user(alice, im, "an old thread")
        # A session processing with no turn behind it (a previous run's, say).
        await room.client("dana").agents_sessions_setStatus(
            channel_id=im, thread_ts=idle, status="processing"
        )
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(lambda: _bot_texts(room, im) == ["Answered."], timeout=5)
        await emu.wait_for(lambda: _session(room, im, idle).get("status") == "active", timeout=5)
        await emu.wait_for(lambda: not emu.is_streaming(im, _bot_ts(room, im)), timeout=5)
        await room.client("dana").agents_sessions_setStatus(
            channel_id=im, thread_ts=idle, status="processing"
        )
        await emu.click_stop(alice, im, idle)
        await emu.wait_for(lambda: _events(out, "stop ignored") != [], timeout=5)
    assert _turns(room) == ["done"]
    assert _bot_texts(room, im) == ["Answered."]  # no "Stopped." for a turn that was not there
    [ignored] = _events(out, "stop ignored")
    assert ignored["reason"] == "no turn running there"
    # Slack asks the app to move the session away from processing after every Stop.
    await emu.wait_for(lambda: _session(room, im, idle).get("status") == "active", timeout=5)


async def test_a_slack_that_refuses_sessions_keeps_the_status_line_with_one_log_line(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    async with LLMServer() as llm:
        llm.openai.push(
            openai_answer(send("One.")), openai_text(), openai_answer(send("Two.")), openai_text()
        )
        await fleet_factory(["dana"], **openai_env(alice, llm, _teammates(room)))
        dana = room.apps["dana"]
        emu.fail_next("agents.sessions.setStatus", 5, error="unknown_method", app_id=dana.app_id)
        im = _im(room)
        first = await emu.post_as_user(alice, im, "first")
        await emu.wait_for(lambda: _bot_texts(room, im) == ["One."], timeout=15)
        await emu.post_as_user(alice, im, "second")
        await emu.wait_for(lambda: _turns(room) == ["done", "done"], timeout=15)
    assert _bot_texts(room, im) == ["One.", "Two."]
    assert (first, THINKING) in emu.statuses_sent(im)  # the status line, as before sessions
    refused = [e for e in _events(out, "agent surface refused") if e["part"] == "session"]
    assert [(e["instance"], e["reason"], e["fallback"]) for e in refused] == [
        ("dana", "unknown_method", "status line")
    ]
    calls = [c for c in emu.api_calls if c.method == "agents.sessions.setStatus"]
    assert len(calls) == 1  # refused once, never asked again


async def test_a_feedback_click_on_a_dm_reply_is_recorded_and_counted_in_metrics(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send("Here is the plan.")), openai_text())
        fleet, _ = await fleet_factory(
            ["dana"], NANOSLACK_METRICS_ADDR="127.0.0.1:0", **openai_env(alice, llm, _teammates(room))
        )
        im = _im(room)
        await emu.post_as_user(alice, im, "plan my day")
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(
            lambda: room.sql("SELECT status FROM outbox WHERE purpose = 'reply'") == [("sent",)]
        )
        reply = _bot_ts(room, im)
        await emu.click_feedback(alice, im, reply, positive=False)
        await emu.wait_for(lambda: room.sql("SELECT count(*) FROM feedback") == [(1,)], timeout=5)
        samples = await scrape(fleet.health_server.url)
    [(turn_id,)] = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    assert room.sql("SELECT instance, turn_id, user_id, value FROM feedback") == [
        ("dana", turn_id, alice, "negative")
    ]
    assert value(samples, "nanoslack_feedback_total", instance="dana", value="negative") == 1
    assert value(samples, "nanoslack_feedback_total", instance="dana", value="positive") == 0


def _fleet_env(room: Room, **extra: str) -> Path:
    return write_fleet_env(
        room.tmp / ".env",
        room.emu,
        [room.apps["dana"]],
        room.db,
        SLACK_OWNER=room.human.id,
        LOG_FORMAT="json",
        **extra,
    )


async def _connected(room: Room) -> None:
    await room.emu.wait_for(lambda: room.emu.connections(room.apps["dana"].app_id) >= 1, timeout=60)


async def test_a_fleet_killed_right_after_a_stop_was_recorded_never_runs_the_stopped_turn_again(
    room: Room,
) -> None:
    emu, alice = room.emu, room.human.id
    gate = asyncio.Event()
    async with LLMServer() as llm:
        llm.openai.push(_held(gate, "The plan, in twelve steps: first we gather every milestone"))
        env_file = _fleet_env(room, **backend_env("openai", llm, "sk-test-0123456789"))
        im = _im(room)
        first = FleetProcess.start(env_file, failpoints="turn.stopped=kill@1")
        await _connected(room)
        ts = await emu.post_as_user(alice, im, QUESTION)
        await emu.wait_for(lambda: _session(room, im, ts).get("status") == "processing", timeout=30)
        await emu.wait_for(lambda: len(_bot_texts(room, im)) == 1, timeout=15)
        await emu.click_stop(alice, im, ts)
        assert await first.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
        assert _turns(room) == ["stopped"]  # durable before anything else was done about it
        second = FleetProcess.start(env_file)
        try:
            await second.wait_for_event("posted", within=60)
            # The kill left the session processing: a second click finds no turn and settles it.
            assert _session(room, im, ts)["status"] == "processing"
            await emu.click_stop(alice, im, ts)
            await emu.wait_for(lambda: _session(room, im, ts).get("status") == "active", timeout=10)
        finally:
            assert await second.stop() == 0
        gate.set()
    assert _turns(room) == ["stopped"], "the stopped turn ran again"
    assert len(llm.openai.requests) == 1
    texts = _bot_texts(room, im)
    assert texts[1:] == ["Stopped."] and "The plan, in twelve steps".startswith(texts[0])


async def test_a_stop_after_the_reply_was_recorded_but_not_yet_sent_posts_it_once(room: Room) -> None:
    """Killed with the reply recorded and not sent; the person clicks Stop meanwhile. The
    turn had answered: the Stop finds no turn to stop, and the reply goes out once."""
    emu, alice = room.emu, room.human.id
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "The whole answer.")
    env_file = _fleet_env(room, **agent.env())
    im = _im(room)
    first = FleetProcess.start(env_file, failpoints="turn.recorded=kill@1")
    await _connected(room)
    ts = await emu.post_as_user(alice, im, QUESTION)
    assert await first.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
    assert room.sql("SELECT status FROM outbox WHERE purpose = 'reply'") == [("queued",)]
    # Slack still shows the session processing (nobody moved it): the person clicks Stop.
    await room.client("dana").agents_sessions_setStatus(channel_id=im, thread_ts=ts, status="processing")
    await emu.click_stop(alice, im, ts)
    second = FleetProcess.start(env_file)
    try:
        await second.wait_for_event("posted", within=60)
        await second.wait_for_event("stop ignored", within=30)
    finally:
        assert await second.stop() == 0
    assert _bot_texts(room, im) == ["The whole answer."]
    assert _turns(room) == ["done"]


async def test_a_stop_during_an_mcp_tool_call_cancels_the_call_the_mcp_way(
    room: Room, fleet_factory: FleetFactory
) -> None:
    """The tool would sleep a minute: the Stop cancels the call, and the server hears it
    (``notifications/cancelled`` interrupts its handler, which notes it)."""
    emu, alice = room.emu, room.human.id
    cancel_log = room.tmp / "cancelled.log"
    teammates = room.tmp / "teammates"
    (teammates / "dana").mkdir(parents=True)
    (teammates / "dana" / "SOUL.md").write_text("You are Dana, the planner.\n")
    write_config(
        teammates / "dana" / "mcp.json", {"echo": echo_server(env={"ECHO_CANCEL_LOG": str(cancel_log)})}
    )
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(("echo_slow", {"seconds": 60.0})), openai_text())
        await fleet_factory(["dana"], **openai_env(alice, llm, teammates))
        im = _im(room)
        ts = await emu.post_as_user(alice, im, "run the long job")
        await emu.wait_for(lambda: emu.status_of(im, ts) == using("echo_slow"), timeout=15)
        await emu.click_stop(alice, im, ts)
        await emu.wait_for(lambda: _turns(room) == ["stopped"], timeout=STOP_DEADLINE_S)
        await emu.wait_for(
            lambda: cancel_log.exists() and "slow cancelled" in cancel_log.read_text(), timeout=5
        )
        await emu.wait_for(lambda: _bot_texts(room, im) == ["Stopped."], timeout=5)
    assert len(llm.openai.requests) == 1  # the model never heard of the tool's result
