"""Agents answer, end to end: the real fleet and the real ``command`` back end
against the emulator, with a scripted agent (``turn_agent``) that logs what it was given.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nanoslack.a2a import HOP_LIMIT_REACHED
from nanoslack.agents.prompt import NEW_SINCE
from nanoslack.emulator import Emulator
from tests.e2e.conftest import FleetFactory, Recorder, Room
from tests.e2e.turn_agent import TurnAgent
from tests.ops.conftest import run_script

ROOT = Path(__file__).resolve().parents[2]
# chat.postMessage answers 429 this many times in a row: one more than the fleet's
# Web API client retries (nanoslack.slack.client), so the outbox has to retry too.
STORM = 6


@pytest.fixture
def agent(room: Room) -> TurnAgent:
    return TurnAgent.install(room.tmp)


def thread_posts(
    emu: Emulator, channel: str, thread_ts: str, bot_id: str | None = None
) -> list[dict[str, Any]]:
    """The replies in a thread (by one bot, when given), oldest first."""
    for top in emu.conversation_messages(channel):
        if top["ts"] == thread_ts:
            return [r for r in top["replies"] if bot_id in (None, r.get("bot_id"))]
    return []


def is_turn_reply(message: dict[str, Any]) -> bool:
    """An agent's reply (not the room intro, not a notice): its metadata names a turn."""
    return (message.get("metadata") or {}).get("event_type") == "nanoslack_turn"


def bot_replies(emu: Emulator, channel: str, bot_id: str) -> list[dict[str, Any]]:
    """A bot's turn replies anywhere in the channel."""
    return [m for m in emu.all_messages(channel) if m.get("bot_id") == bot_id and is_turn_reply(m)]


def settled(room: Room) -> bool:
    """No message waits for a turn, no turn runs, no post waits to be sent."""
    open_work = room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
    )
    return open_work == [(0,)]


def turns(room: Room, instance: str) -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT status, messages, posts, wrapping_up FROM turns WHERE instance = ? ORDER BY id", instance
    )


def hop_limit_drops(rec: Recorder, instance: str) -> list[str]:
    return [m.ts for m, reason in rec.dropped(instance) if HOP_LIMIT_REACHED in reason]


async def open_public_room(room: Room, *names: str) -> str:
    """``open-a2a-room --public`` as an operator runs it: a subprocess against the emulator
    and the fleet's database; returns the new room's channel id."""
    env_file = room.tmp / "room.env"
    env_file.write_text("".join(f"SLACK_BOT_TOKEN_{n.upper()}={room.apps[n].bot_token}\n" for n in names))
    r = await asyncio.to_thread(
        run_script,
        "open-a2a-room.py",
        "--instances",
        ",".join(names),
        "--user",
        room.human.id,
        "--public",
        "--env-file",
        str(env_file),
        cwd=room.tmp,
        env={"SLACK_API_URL": room.emu.api_url, "NANOSLACK_DB": str(room.db)},
    )
    assert r.returncode == 0, r.stderr
    channel = r.stdout.strip()
    assert f"SLACK_A2A_ROOMS={channel}" in env_file.read_text()
    return channel


async def test_bots_hand_a_thread_back_and_forth_until_the_hop_budget_stops_them(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice = room.emu, room.human.id
    dana, eli = room.apps["dana"], room.apps["eli"]
    channel = await open_public_room(room, "dana", "eli")
    agent.reply("dana", "dana {turn}: over to you @eli")
    agent.reply("eli", "eli {turn}: back to you @dana")
    _, rec = await fleet_factory(
        ["dana", "eli"], env_name="fleet.env", SLACK_A2A_ROOMS=channel, SLACK_A2A_MAX_HOPS="2", **agent.env()
    )

    async def exchange(text: str) -> list[dict[str, Any]]:
        """A human kicks off a thread; returns the bot posts once the exchange stopped:
        eli dropped dana's last post at the hop limit and nothing is left to do."""
        drops = len(hop_limit_drops(rec, "eli"))
        parent = await emu.post_as_user(alice, channel, f"<@{dana.bot_user_id}> {text}")
        await emu.wait_for(lambda: len(hop_limit_drops(rec, "eli")) > drops, timeout=30)
        await emu.wait_for(lambda: settled(room), timeout=10)
        posts = thread_posts(emu, channel, parent)
        # Besides the agents' replies, the room may say once that it paused.
        notices = [p for p in posts if not is_turn_reply(p)]
        assert len(notices) <= 1 and all("Paused" in p["text"] for p in notices), notices
        return [p for p in posts if is_turn_reply(p)]

    posts = await exchange("plan the release")
    # 2 hops admitted by each bot, plus the post that found the budget spent.
    assert [p["bot_id"] for p in posts] == [dana.bot_id, eli.bot_id] * 2 + [dana.bot_id]
    for post in posts:
        addressee = eli if post["bot_id"] == dana.bot_id else dana
        assert f"<@{addressee.bot_user_id}>" in post["text"], "the @name handoff is not a real mention"
    assert [p["text"].split(":")[0] for p in posts] == ["dana 1", "eli 1", "dana 2", "eli 2", "dana 3"]
    # Each bot's last admitted turn carried the cue; none before it did.
    assert [c["wrapping_up"] for c in agent.calls("dana")] == ["0", "0", "1"]
    assert [c["wrapping_up"] for c in agent.calls("eli")] == ["0", "1"]
    assert "wrapping up" in agent.calls("eli")[-1]["stdin"]
    assert agent.calls("eli")[0]["sender"] == f"slack:bot:{dana.bot_id}"
    # Senders by name, mentions as @name, the other bot's post included.
    assert agent.calls("eli")[0]["stdin"].splitlines()[1:] == [
        "alice: @dana plan the release",
        "dana: dana 1: over to you @eli",
        "It's your turn, eli.",
    ]

    again = await exchange("one more thing")
    assert len(again) == 5, "a human message did not start the exchange again"
    assert (
        len(bot_replies(emu, channel, dana.bot_id)) == 6 and len(bot_replies(emu, channel, eli.bot_id)) == 4
    )


async def test_messages_arriving_during_a_slow_turn_are_answered_by_one_next_turn(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "reply {turn}")
    agent.hold("dana")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    parent = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} first")
    await emu.wait_for(lambda: agent.calls("dana"), timeout=10)

    later = ["second", "third", "fourth"]
    for text in later:
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} {text}", thread_ts=parent)
    pending = "SELECT count(*) FROM messages WHERE instance = 'dana' AND status = 'pending'"
    await emu.wait_for(lambda: room.sql(pending) == [(4,)], timeout=10)
    agent.release("dana")

    await emu.wait_for(lambda: len(thread_posts(emu, room.channel, parent, dana.bot_id)) == 2, timeout=15)
    await emu.wait_for(lambda: settled(room), timeout=10)
    first, second = agent.calls("dana")
    assert "first" in first["stdin"] and not any(t in first["stdin"] for t in later)
    earlier, new = second["stdin"].split(NEW_SINCE + "\n")
    assert all(f"alice: @dana {t}" in new for t in later)
    assert "dana: reply 1" in earlier, "the agent does not see its own earlier post"
    assert "alice: @dana first" in earlier, "the agent forgot its earlier turn"
    assert "alice: @dana first" not in new, "the new part repeats what the last turn saw"
    assert turns(room, "dana") == [("done", 1, 1, 0), ("done", 3, 1, 0)]


async def test_a_turn_returning_five_posts_posts_three(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "\n---\n".join(f"part {i}" for i in range(1, 6)))
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    parent = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} talk a lot")
    await emu.wait_for(lambda: len(thread_posts(emu, room.channel, parent, dana.bot_id)) >= 3, timeout=15)
    await emu.wait_for(lambda: settled(room), timeout=10)
    posts = thread_posts(emu, room.channel, parent, dana.bot_id)
    assert [p["text"] for p in posts] == ["part 1", "part 2", "part 3"]
    assert turns(room, "dana") == [("done", 1, 3, 0)]
    # Each post names its turn in its metadata (how a restart recognises it).
    assert {p["metadata"]["event_type"] for p in posts} == {"nanoslack_turn"}


async def test_an_approval_made_from_another_process_is_answered_within_seconds(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice = room.emu, room.human.id
    dana, eli = room.apps["dana"], room.apps["eli"]
    agent.reply("dana", "welcome, eli")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    opened = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} open the room")
    await emu.wait_for(lambda: thread_posts(emu, room.channel, opened, dana.bot_id), timeout=10)
    asked = await room.bot_post("eli", f"{room.mention('dana')} may I join?")
    held = "SELECT status FROM messages WHERE instance = 'dana' AND ts = ?"
    await emu.wait_for(lambda: room.sql(held, asked) == [("held",)], timeout=10)

    approve = [
        sys.executable,
        "-m",
        "nanoslack",
        "senders",
        "--db",
        str(room.db),
        "--env-file",
        str(room.tmp / ".env"),
    ]
    done = await asyncio.to_thread(
        subprocess.run,
        [*approve, "approve", "dana", f"slack:bot:{eli.bot_id}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    approved_at = time.monotonic()
    await emu.wait_for(lambda: thread_posts(emu, room.channel, asked, dana.bot_id), timeout=5)
    assert time.monotonic() - approved_at < 5
    [reply] = thread_posts(emu, room.channel, asked, dana.bot_id)
    assert reply["text"] == "welcome, eli"
    assert "may I join" in agent.calls("dana")[-1]["stdin"]


async def test_a_429_storm_on_chat_post_message_delays_replies_and_loses_none(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "answer {turn}")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    # One 429 more than the Web API client retries by itself: the outbox retries too.
    emu.fail_next("chat.postMessage", n=STORM, error="ratelimited", retry_after=1)
    parents = [
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} question {i}") for i in range(3)
    ]

    def answered() -> bool:
        return all(thread_posts(emu, room.channel, p, dana.bot_id) for p in parents)

    await emu.wait_for(answered, timeout=45)
    await emu.wait_for(lambda: settled(room), timeout=10)
    limited = [c for c in emu.api_calls if c.method == "chat.postMessage" and c.status == 429]
    assert len(limited) == STORM
    assert room.sql("SELECT sum(attempts) FROM outbox") == [(1,)], "the client's own retries absorbed it"
    assert [len(thread_posts(emu, room.channel, p, dana.bot_id)) for p in parents] == [1, 1, 1]
    assert len(bot_replies(emu, room.channel, dana.bot_id)) == 3
    assert room.sql("SELECT status, count(*) FROM outbox GROUP BY status") == [("sent", 3)]


async def test_a_clean_stop_while_a_reply_is_rate_limited_posts_it_once(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "the answer")
    fleet, _ = await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    emu.fail_next("chat.postMessage", n=1, error="ratelimited", retry_after=1)
    parent = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} a question")

    def limited() -> int:
        return sum(1 for c in emu.api_calls if c.method == "chat.postMessage" and c.status == 429)

    # The poster waits out a 1 s Retry-After when the fleet is asked to stop. Any
    # other attempt to post meanwhile meets a longer one, so it would land second.
    await emu.wait_for(lambda: limited() == 1, timeout=10)
    emu.fail_next("chat.postMessage", n=1, error="ratelimited", retry_after=2)
    await fleet.stop()
    # Whatever the stop left unsent, the next start sends.
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    await emu.wait_for(lambda: settled(room), timeout=15)
    assert [p["text"] for p in thread_posts(emu, room.channel, parent, dana.bot_id)] == ["the answer"]


async def test_a_failing_or_hung_agent_posts_nothing_and_the_fleet_keeps_answering(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "answer {turn}")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env(NANOSLACK_AGENT_TIMEOUT="1"))
    errors = "SELECT status, error FROM turns WHERE instance = 'dana' ORDER BY id"

    async def ask(text: str, turns_done: int) -> str:
        ts = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} {text}")
        await emu.wait_for(lambda: len(room.sql(errors)) == turns_done and settled(room), timeout=15)
        return ts

    agent.fail("dana")
    crashed = await ask("crash", 1)
    (agent.folder / "dana.fail").unlink()
    agent.hold("dana")
    hung = await ask("hang", 2)
    agent.release("dana")
    fine = await ask("fine", 3)

    assert [s for s, _ in room.sql(errors)] == ["failed", "failed", "done"]
    (_, exited), (_, timed_out), _ = room.sql(errors)
    assert "exited with 3" in exited and "timed out" in timed_out
    assert thread_posts(emu, room.channel, crashed) == thread_posts(emu, room.channel, hung) == []
    assert [p["text"] for p in thread_posts(emu, room.channel, fine, dana.bot_id)] == ["answer 3"]


async def test_a_dm_is_answered_at_top_level_when_streaming_is_off(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    """With NANOSLACK_STREAM=1 (the default) the reply is streamed, and Slack streams only
    replies in a thread: tests/e2e/test_agent_surface.py."""
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "hi alice")
    await fleet_factory(["dana"], SLACK_OWNER=alice, NANOSLACK_STREAM="0", **agent.env())
    im = emu.create_conversation([alice, dana.bot_user_id], kind="im")
    await emu.post_as_user(alice, im.id, "are you there?")
    await emu.wait_for(lambda: bot_replies(emu, im.id, dana.bot_id), timeout=10)
    [reply] = bot_replies(emu, im.id, dana.bot_id)
    assert reply["text"] == "hi alice" and not reply.get("thread_ts")
    [call] = agent.calls("dana")
    assert call["thread_ts"] == "" and call["channel"] == im.id
    assert call["stdin"] == "[Direct message with alice]\nalice: are you there?\nIt's your turn, dana."


async def test_a_reply_that_slack_took_but_answered_with_a_500_is_posted_once(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    """Slack can fail after the post landed. Retrying it blindly (the Web API client's
    5xx retry, or the outbox treating the error as "not posted") would post it twice;
    the poster keeps it in doubt and finds it by its metadata key instead."""
    from nanoslack.emulator.webapi import ACCEPTED_THEN_500

    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "answer {turn}")
    await fleet_factory(["dana"], SLACK_OWNER=alice, **agent.env())
    emu.fail_next("chat.postMessage", n=1, error=ACCEPTED_THEN_500)
    parent = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} one question")

    await emu.wait_for(lambda: thread_posts(emu, room.channel, parent, dana.bot_id), timeout=20)
    await emu.wait_for(lambda: settled(room), timeout=20)
    assert [c.status for c in emu.api_calls if c.method == "chat.postMessage"] == [500]
    assert len(thread_posts(emu, room.channel, parent, dana.bot_id)) == 1
    assert room.sql("SELECT status, count(*) FROM outbox GROUP BY status") == [("sent", 1)]


async def test_posts_to_one_channel_are_paced_after_a_burst_of_three(
    room: Room, fleet_factory: FleetFactory, agent: TurnAgent
) -> None:
    """Slack takes about one message a second per channel: after a burst of three the
    poster spaces them out instead of collecting 429s. (A lower bound on the spacing
    only: a slow machine cannot make this fail.)"""
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    agent.reply("dana", "\n---\n".join(f"part {i}" for i in range(1, 4)))
    await fleet_factory(["dana"], SLACK_OWNER=alice, NANOSLACK_POST_RATE="2", **agent.env())
    parents = [
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} talk a lot {i}")
        for i in range(2)
    ]
    await emu.wait_for(lambda: len(bot_replies(emu, room.channel, dana.bot_id)) == 6, timeout=20)
    stamps = sorted(float(p["ts"]) for p in bot_replies(emu, room.channel, dana.bot_id))
    # Three at once, then one every half second: the last three span at least one second.
    assert stamps[5] - stamps[3] >= 0.9
    assert not [c for c in emu.api_calls if c.method == "chat.postMessage" and c.status == 429]
    assert all(thread_posts(emu, room.channel, p, dana.bot_id) for p in parents)
