"""What agents with tools look like from Slack (docs/agents.md): the working reaction, quiet
broadcasts, a DM to the owners, a halted room that starts no handoff turn, and every
step of a turn in ``nanoslack turns --steps``."""

from __future__ import annotations

import io
import json
from typing import Any

from nanoslack.ops import admin
from nanoslack.store import Store, sqlite_url
from tests.e2e.conftest import Room
from tests.e2e.helpers import dm_buttons
from tests.e2e.turn_agent import TurnAgent

BROADCAST = "<!channel> <!here> <!everyone> <!subteam^S0123ABCD> everyone look"


def _rules(room: Room, name: str, rules: list[dict[str, Any]]) -> dict[str, str]:
    path = room.tmp / f"{name}-rules.json"
    path.write_text(json.dumps({"rules": rules, "default": None}))
    return {f"NANOSLACK_AGENT_SCRIPT_{name.upper()}": str(path)}


def _message(room: Room, ts: str) -> dict[str, Any]:
    return next(m for m in room.emu.all_messages(room.channel) if m["ts"] == ts)


def _replies(room: Room, ts: str) -> list[str]:
    for top in room.emu.conversation_messages(room.channel):
        if top["ts"] == ts:
            return [str(r["text"]) for r in top["replies"]]
    return []


def _settled(room: Room) -> bool:
    return room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
    ) == [(0,)]


async def test_the_working_reaction_is_on_the_waking_message_while_the_turn_runs_and_gone_after(
    room: Room, fleet_factory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.hold("dana")
    program.reply("dana", "done thinking")
    await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id, **program.env())
    ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} think hard")
    dana = room.apps["dana"].bot_user_id

    def reacted() -> list[str]:
        return [r["name"] for r in _message(room, ask).get("reactions") or [] if dana in r["users"]]

    await room.emu.wait_for(lambda: reacted() == ["eyes"] and program.calls("dana"), timeout=10)
    assert not _replies(room, ask)  # the turn is still working
    program.release("dana")
    await room.emu.wait_for(lambda: _replies(room, ask) == ["done thinking"], timeout=10)
    await room.emu.wait_for(lambda: reacted() == [], timeout=10)


async def test_a_turn_quicker_than_a_second_answers_without_touching_reactions(
    room: Room, fleet_factory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.hold("eli")  # eli's turn is the slow one: its reaction marks the moment
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=room.human.id,
        NANOSLACK_AGENT_ELI="command",
        NANOSLACK_AGENT_COMMAND_ELI=program.command,
        NANOSLACK_AGENT_TIMEOUT="60",
        **_rules(room, "dana", [{"match": "@{name}", "reply": "quick answer"}]),
    )
    ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} quick one")
    await room.emu.wait_for(lambda: _replies(room, ask) == ["quick answer"], timeout=10)
    # A turn started after dana's had ended gets its reaction a second in: had dana's
    # addition not been called off, it would have been due before this one.
    slow = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('eli')} slow one")
    eli = room.apps["eli"].bot_user_id
    await room.emu.wait_for(
        lambda: [r for r in _message(room, slow).get("reactions") or [] if eli in r["users"]], timeout=20
    )
    touched = {c.params.get("timestamp") for c in room.emu.api_calls if c.method.startswith("reactions.")}
    assert touched == {slow}
    assert not _message(room, ask).get("reactions")
    program.release("eli")
    await room.emu.wait_for(lambda: _settled(room), timeout=20)


async def test_broadcast_mentions_reach_slack_as_plain_text(room: Room, fleet_factory) -> None:
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=room.human.id,
        **_rules(room, "dana", [{"match": "@{name}", "reply": BROADCAST}]),
    )
    ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} tell everyone")
    await room.emu.wait_for(lambda: _replies(room, ask), timeout=10)
    assert _replies(room, ask) == ["@channel @here @everyone @S0123ABCD everyone look"]


async def test_broadcast_mentions_are_posted_as_written_when_allowed(room: Room, fleet_factory) -> None:
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=room.human.id,
        NANOSLACK_ALLOW_BROADCAST="1",
        **_rules(room, "dana", [{"match": "@{name}", "reply": BROADCAST}]),
    )
    ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} tell everyone")
    await room.emu.wait_for(lambda: _replies(room, ask), timeout=10)
    assert _replies(room, ask) == [BROADCAST]


async def test_message_owner_sends_every_owner_one_dm_the_room_never_sees(room: Room, fleet_factory) -> None:
    alice, bob = room.human.id, room.emu.add_user("bob").id
    twice = {
        "match": "@{name}",
        "calls": [
            {"tool": "message_owner", "arguments": {"text": "between us: <!here> the budget is tight"}},
            {"tool": "message_owner", "arguments": {"text": "and again"}},
        ],
        "reply": None,
    }
    await fleet_factory(["dana", "eli"], SLACK_OWNER=f"{alice},{bob}", **_rules(room, "dana", [twice]))
    await room.emu.post_as_user(alice, room.channel, f"{room.mention('dana')} how are we doing?")

    def dms(owner: str) -> list[str]:
        return [
            str(m["text"])
            for conv in room.emu.conversations()
            if conv.kind == "im" and owner in conv.members
            for m in room.emu.conversation_messages(conv.id)
            if m.get("bot_id") == room.apps["dana"].bot_id
        ]

    await room.emu.wait_for(lambda: dms(alice) and dms(bob) and _settled(room), timeout=10)
    assert dms(alice) == dms(bob) == ["between us: @here the budget is tight"]
    assert [m for m in room.emu.all_messages(room.channel) if m.get("bot_id")] == []
    errors = room.sql("SELECT error FROM turn_steps WHERE name = 'message_owner' ORDER BY step")
    assert errors == [(None,), ("not sent: you already messaged the owners this turn",)]


async def test_a_halted_room_starts_no_handoff_turn_until_it_is_resumed(room: Room, fleet_factory) -> None:
    alice = room.human.id
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=alice,
        **_rules(
            room, "eli", [{"match": ".", "from": "agent", "reply": "taken"}, {"match": ".", "reply": "hi"}]
        ),
    )
    thread = await room.emu.post_as_user(alice, room.channel, "a thread for the work")
    room.sql(
        "INSERT INTO room_halts (room, halted_by, halted_at, instance) VALUES (?, 'cli', 0, NULL)",
        room.channel,
    )
    # dana's turn committed a handoff to eli in this thread (as turns.record writes it).
    with Store.open(sqlite_url(str(room.db))) as store:
        store.messages.add_internal(
            instance="eli",
            channel=room.channel,
            thread_key=thread,
            sender_id="slack:bot:B0DANA",
            text="take it",
            depth=1,
        )
    # eli's scheduler runs (a DM to eli is answered) but starts nothing in the halted room.
    dm = room.emu.create_conversation([alice, room.apps["eli"].bot_user_id], kind="im").id
    await room.emu.post_as_user(alice, dm, "are you there?")
    await room.emu.wait_for(
        lambda: room.sql("SELECT count(*) FROM turns WHERE channel = ?", dm) == [(1,)], timeout=10
    )
    assert room.sql("SELECT count(*) FROM turns WHERE channel = ?", room.channel) == [(0,)]

    room.sql("DELETE FROM room_halts")
    await room.emu.wait_for(lambda: _replies(room, thread) == ["taken"] and _settled(room), timeout=10)


async def test_every_step_of_a_turn_is_listed_by_nanoslack_turns_steps(room: Room, fleet_factory) -> None:
    skills = room.tmp / "teammates" / "_skills"
    skills.mkdir(parents=True)
    (skills / "review.md").write_text("# Review: failure paths first\n")
    reads = {
        "match": "@{name}",
        "calls": [
            {"tool": "read_skill", "arguments": {"name": "review"}},
            {"tool": "read_skill", "arguments": {"name": "nope"}},
        ],
        "reply": "read it",
    }
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=room.human.id,
        NANOSLACK_TEAMMATES=str(room.tmp / "teammates"),
        **_rules(room, "dana", [reads]),
    )
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} review this")
    await room.emu.wait_for(lambda: room.sql("SELECT count(*) FROM turn_steps") == [(2,)] and _settled(room))
    ((turn_id,),) = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    out = io.StringIO()
    assert admin.turns_main(["--db", str(room.db), "--steps", str(turn_id)], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["STEP", "KIND", "NAME", "ARGUMENTS", "RESULT", "TOKENS", "USD", "MS", "ERROR"]
    assert lines[1].split()[:4] == ["1", "tool", "read_skill", '{"name":"review"}']
    assert lines[2].split()[:4] == ["2", "tool", "read_skill", '{"name":"nope"}']
    assert "no skill named 'nope'; the skills are: review" in lines[2]


async def test_react_adds_a_reaction_to_the_message_answered_posts_nothing_and_counts_no_hop(
    room: Room, fleet_factory
) -> None:
    react = {"tool": "react", "arguments": {"emoji": ":white_check_mark:"}}
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=room.human.id,
        NANOSLACK_WORKING_REACTION="",
        **_rules(room, "dana", [{"match": "@{name}", "calls": [react]}]),
        **_rules(room, "eli", [{"match": "@{name}", "reply": "never asked"}]),
    )
    # eli's bot posts to dana: a bot message, admitted as a hop; dana answers with a reaction only.
    asked = await room.bot_post("eli", f"{room.mention('dana')} shipped the fix")
    owner = room.human.id
    await room.emu.wait_for(lambda: dm_buttons(room.emu, owner, "nanoslack_approve"), timeout=10)
    [allow] = dm_buttons(room.emu, owner, "nanoslack_approve")
    await room.emu.click_button(owner, allow["channel"], allow["ts"], "nanoslack_approve", allow["value"])
    dana = room.apps["dana"].bot_user_id

    def reactions() -> list[tuple[str, list[str]]]:
        return [(r["name"], r["users"]) for r in _message(room, asked).get("reactions") or []]

    await room.emu.wait_for(lambda: reactions() == [("white_check_mark", [dana])], timeout=10)
    await room.emu.wait_for(lambda: _settled(room), timeout=10)
    assert room.sql("SELECT status FROM turns WHERE instance = 'dana'") == [("silent",)]
    assert room.sql("SELECT kind, status FROM outbox WHERE instance = 'dana' AND kind = 'reaction'") == [
        ("reaction", "sent")
    ]
    assert not _replies(room, asked)
    # eli's post is the room's one hop; the reaction is none, and woke no turn of eli's.
    assert room.sql("SELECT count(DISTINCT ts) FROM a2a_hops WHERE room = ?", room.channel) == [(1,)]
    assert room.sql("SELECT count(*) FROM turns WHERE instance = 'eli'") == [(0,)]


async def test_a_persons_reaction_to_a_reply_reaches_the_threads_next_turn_and_starts_none(
    room: Room, fleet_factory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "The build is green again after the fix.")
    await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id, **program.env())
    ask = await room.emu.post_as_user(
        room.human.id, room.channel, f"{room.mention('dana')} how is the build?"
    )
    await room.emu.wait_for(lambda: _replies(room, ask), timeout=10)
    [reply] = [
        m for m in room.emu.all_messages(room.channel) if m.get("thread_ts") == ask and m.get("bot_id")
    ]
    await room.emu.react(room.human.id, room.channel, reply["ts"], "thumbsup")
    await room.emu.wait_for(lambda: room.sql("SELECT emoji FROM reactions") == [("thumbsup",)], timeout=10)
    await room.emu.wait_for(lambda: _settled(room), timeout=10)
    assert len(program.calls("dana")) == 1, "the reaction started a turn"
    assert room.sql("SELECT count(*) FROM turns") == [(1,)]

    await room.emu.post_as_user(
        room.human.id, room.channel, f"{room.mention('dana')} and now?", thread_ts=ask
    )
    await room.emu.wait_for(lambda: len(program.calls("dana")) == 2, timeout=10)
    prompt = program.calls("dana")[1]["stdin"]
    assert ':thumbsup: on your message "The build is green again after the fix."' in prompt, prompt
    assert prompt.count("[reactions]") == 1
