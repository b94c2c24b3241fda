"""Slack's Agent messaging (docs/agent-surface.md) end to end against the emulator: an
``agent_view`` app's Messages tab gets the teammate's suggested prompts, the channel a person
views beside it reaches the next turn, and an app still made with ``assistant_view`` keeps
its pane's prompts and its status line."""

from __future__ import annotations

from pathlib import Path

from nanoslack.slack.surface import THINKING
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.turn_agent import TurnAgent

PROMPTS = {
    "prompts": [
        {"title": "Plan my day", "message": "Plan my day"},
        {"title": "What is blocked?", "message": "What is blocked?"},
    ]
}


def _teammates(room: Room) -> Path:
    teammates = room.tmp / "teammates"
    (teammates / "dana").mkdir(parents=True, exist_ok=True)
    (teammates / "dana" / "SOUL.md").write_text(
        '---\nrole: planner\nprompts: ["Plan my day", "What is blocked?"]\n---\nYou are Dana.\n'
    )
    return teammates


def _im(room: Room) -> str:
    return room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im").id


async def test_an_agents_messages_tab_gets_the_prompts_and_the_viewed_channel_reaches_the_next_turn(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    general = emu.create_conversation([alice, room.apps["dana"].bot_user_id], kind="channel", name="general")
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "Here is your day.")
    await fleet_factory(["dana"], SLACK_OWNER=alice, NANOSLACK_TEAMMATES=str(_teammates(room)), **agent.env())
    im = _im(room)

    await emu.open_app_home(alice, "dana", tab="messages")
    # An agent's prompts are set on its DM: no thread_ts (Slack: with one the call silently fails).
    await emu.wait_for(lambda: emu.suggested_prompts(im) is not None, timeout=10)
    assert emu.suggested_prompts(im) == PROMPTS
    calls = [c for c in emu.api_calls if c.method == "assistant.threads.setSuggestedPrompts"]
    assert [c.params.get("thread_ts") for c in calls] == [None]

    # app_context_changed names no person: it is the DM whose Messages tab was opened last.
    await emu.change_app_context("dana", general.id)
    await emu.wait_for(lambda: room.sql("SELECT context_name FROM assistant_threads") == [("general",)])
    await emu.post_as_user(alice, im, "Plan my day")
    await emu.wait_for(lambda: agent.calls("dana"), timeout=15)
    assert "[Viewing #general]" in agent.calls("dana")[0]["stdin"]

    # Nothing viewed any more: the next turn is told nothing.
    await emu.change_app_context("dana", None)
    await emu.wait_for(lambda: room.sql("SELECT context_channel FROM assistant_threads") == [(None,)])
    await emu.post_as_user(alice, im, "and tomorrow?")
    await emu.wait_for(lambda: len(agent.calls("dana")) == 2, timeout=15)
    new = agent.calls("dana")[1]["stdin"].split("--- new since your last turn ---")[-1]
    assert "alice: and tomorrow?" in new and "[Viewing" not in new


async def test_an_app_still_on_assistant_view_gets_its_panes_prompts_and_the_status_line(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice = room.emu, room.human.id
    agent = TurnAgent.install(room.tmp)
    agent.reply("dana", "Here is your day.")
    await fleet_factory(
        ["dana"],
        SLACK_OWNER=alice,
        NANOSLACK_TEAMMATES=str(_teammates(room)),
        NANOSLACK_SLACK_VIEW="assistant",
        **agent.env(),
    )
    im = _im(room)
    # Its Messages tab is no agent's DM: the prompts come with the pane's thread.
    await emu.open_app_home(alice, "dana", tab="messages")
    thread_ts = await emu.open_assistant_thread(alice, "dana")
    await emu.wait_for(lambda: emu.suggested_prompts(im, thread_ts) is not None, timeout=10)
    assert emu.suggested_prompts(im, thread_ts) == PROMPTS
    assert emu.suggested_prompts(im) is None

    ts = await emu.post_as_user(alice, im, "Plan my day", thread_ts=thread_ts)
    await emu.wait_for(lambda: agent.calls("dana"), timeout=15)
    await emu.wait_for(lambda: (thread_ts, THINKING) in emu.statuses_sent(im), timeout=10)
    assert ts
