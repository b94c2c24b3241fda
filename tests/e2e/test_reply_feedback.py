"""Slack's feedback buttons on DM replies posted whole (docs/agent-surface.md "Feedback"): the
reply's Markdown in a ``markdown`` block, the 👍 / 👎 under it; a click is a ``feedback`` row,
in ``nanoslack turns`` and on /metrics as a streamed reply's is; a long reply shows them under
its last part only; a room reply has none.

Real slack-sdk clients against the emulator; the model is ``nanoslack.testing.llm_server``
(the long reply: a ``command`` agent, as tests/e2e/test_flagships.py)."""

from __future__ import annotations

import io
import shlex
from typing import Any

import pytest

from nanoslack.ops.admin import turns_main
from nanoslack.testing.llm_server import LLMServer, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.test_agent_sessions import _im, _teammates, _turns
from tests.e2e.test_flagships import _long_answer
from tests.e2e.test_metrics import scrape, value

ANSWER = "Here is **the plan**:\n\n- standup at 9\n- review at 2"


def _dana_messages(room: Room, channel: str) -> list[dict[str, Any]]:
    bot_id = room.apps["dana"].bot_id
    found = [m for m in room.emu.all_messages(channel) if m.get("bot_id") == bot_id]
    return sorted(found, key=lambda m: float(m["ts"]))


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``feedback_buttons`` elements of a message's ``context_actions`` blocks."""
    return [
        el
        for block in message.get("blocks") or []
        if block.get("type") == "context_actions"
        for el in block.get("elements") or []
        if el.get("type") == "feedback_buttons"
    ]


async def test_a_dm_reply_posted_whole_carries_feedback_buttons_whose_click_is_recorded_shown_and_counted(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send(ANSWER)), openai_text())
        fleet, _ = await fleet_factory(
            ["dana"],
            NANOSLACK_METRICS_ADDR="127.0.0.1:0",
            NANOSLACK_STREAM="0",
            **openai_env(alice, llm, _teammates(room)),
        )
        im = _im(room)
        await emu.post_as_user(alice, im, "plan my day")
        await emu.wait_for(lambda: _turns(room) == ["done"], timeout=15)
        await emu.wait_for(lambda: _dana_messages(room, im), timeout=10, message="dana did not answer")
        [reply] = _dana_messages(room, im)
        [(turn_id,)] = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
        # Posted whole, at the top level: the Markdown in a markdown block, the buttons under it,
        # the same words as the fallback text.
        assert "thread_ts" not in reply
        assert reply["text"] == ANSWER
        assert reply["blocks"][0] == {"type": "markdown", "text": ANSWER}
        [buttons] = _buttons(reply)
        assert buttons["positive_button"]["value"] == f"positive:{turn_id}"
        assert buttons["negative_button"]["value"] == f"negative:{turn_id}"

        await emu.click_feedback(alice, im, reply["ts"], positive=True)
        await emu.wait_for(lambda: room.sql("SELECT count(*) FROM feedback") == [(1,)], timeout=5)
        samples = await scrape(fleet.health_server.url)
    assert room.sql("SELECT instance, turn_id, user_id, value FROM feedback") == [
        ("dana", turn_id, alice, "positive")
    ]
    assert value(samples, "nanoslack_feedback_total", instance="dana", value="positive") == 1
    out = io.StringIO()
    assert turns_main(["--db", str(room.db)], out=out) == 0
    header, row = out.getvalue().splitlines()[:2]
    assert row.split()[header.split().index("FEEDBACK")] == "+1"


@pytest.mark.parametrize("stream", ["0", "1"])
async def test_a_long_dm_reply_shows_the_feedback_buttons_under_its_last_part_only(
    room: Room, fleet_factory: FleetFactory, stream: str
) -> None:
    answer = _long_answer(13_000)
    answer_file = room.tmp / "answer.txt"
    answer_file.write_text(answer + "\n")
    await fleet_factory(
        ["dana"],
        SLACK_OWNER=room.human.id,
        NANOSLACK_STREAM=stream,
        NANOSLACK_AGENT_COMMAND=f"cat {shlex.quote(str(answer_file))}",
    )
    im = _im(room)
    await room.emu.post_as_user(room.human.id, im, "write it all up")
    await room.emu.wait_for(
        lambda: room.sql("SELECT status FROM outbox WHERE purpose = 'reply'") == [("sent",), ("sent",)],
        timeout=20,
        message="the two parts were not sent",
    )
    parts = _dana_messages(room, im)
    assert len(parts) == 2
    assert " ".join(p["text"] for p in parts).split() == answer.split()
    assert [len(_buttons(p)) for p in parts] == [0, 1]


async def test_a_room_reply_carries_no_feedback_buttons(room: Room, fleet_factory: FleetFactory) -> None:
    emu, alice = room.emu, room.human.id
    async with LLMServer() as llm:
        llm.openai.push(openai_answer(send(ANSWER)), openai_text())
        await fleet_factory(["dana"], **openai_env(alice, llm, _teammates(room)))
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} plan the week")
        await emu.wait_for(lambda: _dana_messages(room, room.channel), timeout=15, message="no answer")
    [reply] = _dana_messages(room, room.channel)
    # As before: markdown_text, which Slack keeps as one markdown block, and no buttons.
    assert reply["blocks"] == [{"type": "markdown", "text": ANSWER}]
    assert _buttons(reply) == []
