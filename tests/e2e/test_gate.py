"""Router and sender gate end to end: real fleet, emulator, SQLite, q.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.e2e.conftest import Recorder, Room

ROOT = Path(__file__).resolve().parents[2]

# Allowed by the gate: waiting for a turn, or already answered by one (agents run here).
ALLOWED = ("pending", "done")


def _approval_dms(room: Room, owner: str) -> list[dict[str, Any]]:
    found = []
    for conv in room.emu.conversations():
        if conv.kind == "im" and owner in conv.members:
            for msg in room.emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for el in block.get("elements") or []:
                        if el.get("action_id") == "nanoslack_approve":
                            found.append(
                                {"channel": conv.id, "ts": msg["ts"], "value": el["value"], "msg": msg}
                            )
    return found


def _owner_dm_posts(room: Room, owner: str) -> list[dict[str, Any]]:
    """Every post a bot made in a DM with the owner (a decided request is updated in place)."""
    return [
        msg
        for conv in room.emu.conversations()
        if conv.kind == "im" and owner in conv.members
        for msg in room.emu.conversation_messages(conv.id)
        if msg.get("bot_id")
    ]


def _status(room: Room, instance: str, ts: str) -> str | None:
    rows = room.sql("SELECT status FROM messages WHERE instance = ? AND ts = ?", instance, ts)
    return rows[0][0] if rows else None


def _processed(rec: Recorder, instance: str, ts: str) -> bool:
    return any(m.ts == ts and i == instance for i, m, _ in rec.outcomes)


CLICK_HANDLED = ("approval decided", "approval click refused")


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    """The fleet's log events, as dicts: a click leaves no other trace once it was
    judged a repeat or refused, so the tests wait for its log line."""
    with capture_logs() as captured:
        yield captured


def _clicks_handled(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] in CLICK_HANDLED]


def _updates(room: Room, request: dict[str, Any]) -> list[Any]:
    return [
        c
        for c in room.emu.api_calls
        if c.method == "chat.update" and c.params.get("ts") == request["ts"] and c.error is None
    ]


async def test_human_mention_in_a_new_mpim_creates_the_group_with_group_defaults(
    room: Room, fleet_factory
) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} hello")
    await room.emu.wait_for(lambda: _processed(rec, "dana", ts) and _processed(rec, "eli", ts))
    rows = room.sql(
        "SELECT instance, platform_id, kind, engage_mode, unknown_sender_policy FROM messaging_groups"
    )
    assert rows == [("dana", f"slack:{room.channel}", "group", "mention-sticky", "request_approval")]


async def test_non_mention_in_an_unknown_conversation_creates_nothing(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    ts = await room.emu.post_as_user(room.human.id, room.channel, "just chatting")
    await room.emu.wait_for(lambda: _processed(rec, "dana", ts) and _processed(rec, "eli", ts))
    assert room.sql("SELECT count(*) FROM messaging_groups") == [(0,)]
    assert _status(room, "dana", ts) == "context"  # kept for later turns


async def test_a_dm_always_engages_and_an_unknown_human_gets_one_polite_decline(
    room: Room, fleet_factory
) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    im = room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im")
    first = await room.emu.post_as_user(room.human.id, im.id, "no mention here")
    second = await room.emu.post_as_user(room.human.id, im.id, "hello again")
    await room.emu.wait_for(lambda: _processed(rec, "dana", second))
    assert room.sql(
        "SELECT kind, engage_mode, engage_pattern, unknown_sender_policy FROM messaging_groups"
    ) == [("dm", "pattern", ".", "decline_notify")]
    await room.emu.wait_for(lambda: any(m.get("bot_id") for m in room.emu.conversation_messages(im.id)))
    declines = [m for m in room.emu.conversation_messages(im.id) if m.get("bot_id")]
    assert len(declines) == 1 and "\n" not in declines[0]["text"]
    assert {_status(room, "dana", first), _status(room, "dana", second)} == {"refused"}


async def test_owner_dm_is_allowed(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    im = room.emu.create_conversation([room.human.id, room.apps["dana"].bot_user_id], kind="im")
    ts = await room.emu.post_as_user(room.human.id, im.id, "anything")
    await room.emu.wait_for(lambda: _processed(rec, "dana", ts))
    assert _status(room, "dana", ts) in ALLOWED


async def test_mention_sticky_keeps_answering_that_thread_but_not_others(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    emu, alice = room.emu, room.human.id
    parent = await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} start a thread")
    in_thread = await emu.post_as_user(alice, room.channel, "no mention, same thread", thread_ts=parent)
    other = await emu.post_as_user(alice, room.channel, "no mention, top level")
    # eli's worker runs beside dana's: wait for the row asserted on below too.
    await emu.wait_for(lambda: _processed(rec, "dana", other) and _processed(rec, "eli", in_thread))
    statuses = [_status(room, "dana", t) for t in (parent, in_thread, other)]
    assert statuses[0] in ALLOWED and statuses[1] in ALLOWED and statuses[2] == "context"
    assert _status(room, "eli", in_thread) == "context"


async def test_seed_operator_sql_makes_a_sibling_bots_next_message_engage(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} open the room")
    held = await room.bot_post("eli", f"{room.mention('dana')} may I?")
    await room.emu.wait_for(lambda: _status(room, "dana", held) == "held")

    sql = (
        f"UPDATE messaging_groups SET unknown_sender_policy='public' WHERE platform_id='slack:{room.channel}'"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "scripts" / "q.py"), "data/nanoslack.db", sql],
        cwd=room.tmp,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"

    nxt = await room.bot_post("eli", f"{room.mention('dana')} and now?")
    await room.emu.wait_for(lambda: _processed(rec, "dana", nxt))
    assert _status(room, "dana", nxt) in ALLOWED


async def test_one_approval_click_replays_the_held_message_exactly_once(
    room: Room, fleet_factory, events: list[dict[str, Any]]
) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    alice = room.human.id
    held = await room.bot_post("eli", f"{room.mention('dana')} numbers attached")
    await room.emu.wait_for(lambda: _approval_dms(room, alice))
    [request] = _approval_dms(room, alice)
    assert _status(room, "dana", held) == "held"

    await room.emu.click_button(
        alice, request["channel"], request["ts"], "nanoslack_approve", request["value"]
    )
    await room.emu.wait_for(lambda: _status(room, "dana", held) in ALLOWED)
    await room.emu.wait_for(lambda: "Allowed" in _message_text(room, request))
    await room.emu.click_button(
        alice, request["channel"], request["ts"], "nanoslack_approve", request["value"]
    )
    await room.emu.wait_for(lambda: len(_clicks_handled(events)) == 2)
    eli = f"slack:bot:{room.apps['eli'].bot_id}"
    assert [e["event"] for e in events if e["event"] in ("sender approved", "sender denied")] == [
        "sender approved"
    ], "the second click decided again"
    assert _clicks_handled(events)[1].get("released") == 0
    assert room.sql("SELECT count(*) FROM agent_group_members WHERE user_id = ?", eli) == [(1,)]
    assert room.sql("SELECT status FROM pending_sender_approvals") == [("approved",)]
    nxt = await room.bot_post("eli", f"{room.mention('dana')} thanks, here is the rest")
    await room.emu.wait_for(lambda: _processed(rec, "dana", nxt))
    assert _status(room, "dana", nxt) in ALLOWED
    assert len(_owner_dm_posts(room, alice)) == 1
    assert len(_updates(room, request)) == 1


async def test_deny_after_allow_on_the_same_request_changes_nothing(
    room: Room, fleet_factory, events: list[dict[str, Any]]
) -> None:
    """Only the operator CLI may reverse an answer; a late Deny click is a no-op."""
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    alice = room.human.id
    held = await room.bot_post("eli", f"{room.mention('dana')} hello")
    await room.emu.wait_for(lambda: _approval_dms(room, alice))
    [request] = _approval_dms(room, alice)
    await room.emu.click_button(
        alice, request["channel"], request["ts"], "nanoslack_approve", request["value"]
    )
    await room.emu.wait_for(lambda: _status(room, "dana", held) in ALLOWED)
    await room.emu.click_button(alice, request["channel"], request["ts"], "nanoslack_deny", request["value"])
    await room.emu.wait_for(lambda: len(_clicks_handled(events)) == 2)
    eli = f"slack:bot:{room.apps['eli'].bot_id}"
    assert room.sql("SELECT count(*) FROM agent_group_members WHERE user_id = ?", eli) == [(1,)]
    assert room.sql("SELECT status FROM pending_sender_approvals") == [("approved",)]
    nxt = await room.bot_post("eli", f"{room.mention('dana')} still in?")
    await room.emu.wait_for(lambda: _processed(rec, "dana", nxt))
    assert _status(room, "dana", nxt) in ALLOWED
    assert "Allowed" in _message_text(room, request)


def _message_text(room: Room, request: dict[str, Any]) -> str:
    for msg in room.emu.conversation_messages(request["channel"]):
        if msg["ts"] == request["ts"]:
            return str(msg.get("text", "")) + str(msg.get("blocks", ""))
    return ""


async def test_twenty_unknown_bot_messages_make_one_request_and_deny_is_remembered(
    room: Room, fleet_factory
) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id, SLACK_A2A_MAX_HOPS="50")
    alice = room.human.id
    sent = [await room.bot_post("eli", f"{room.mention('dana')} message {i}") for i in range(20)]
    await room.emu.wait_for(lambda: all(_status(room, "dana", t) == "held" for t in sent), timeout=10)
    await room.emu.wait_for(lambda: _approval_dms(room, alice))
    requests = _approval_dms(room, alice)
    assert len(requests) == 1
    deny = requests[0]
    await room.emu.click_button(alice, deny["channel"], deny["ts"], "nanoslack_deny", deny["value"])
    await room.emu.wait_for(lambda: all(_status(room, "dana", t) == "refused" for t in sent))

    later = [await room.bot_post("eli", f"{room.mention('dana')} again {i}") for i in range(3)]
    await room.emu.wait_for(lambda: all(_processed(rec, "dana", t) for t in later))
    assert [_status(room, "dana", t) for t in later] == ["refused"] * 3
    assert len(_owner_dm_posts(room, alice)) == 1
    assert "Denied" in _message_text(room, deny)
    assert room.sql(
        "SELECT count(*) FROM messages WHERE instance='dana' AND status IN ('pending', 'done')"
    ) == [(0,)]
    refusals = room.sql(
        "SELECT count FROM sender_refusals WHERE sender_id = ?", f"slack:bot:{room.apps['eli'].bot_id}"
    )
    assert sum(r[0] for r in refusals) >= 3


async def test_a_click_by_someone_who_is_not_an_owner_changes_nothing(
    room: Room, fleet_factory, events: list[dict[str, Any]]
) -> None:
    mallory = room.emu.add_user("mallory")
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    held = await room.bot_post("eli", f"{room.mention('dana')} let me in")
    await room.emu.wait_for(lambda: _approval_dms(room, room.human.id))
    [request] = _approval_dms(room, room.human.id)
    await room.emu.click_button(
        mallory.id, request["channel"], request["ts"], "nanoslack_approve", request["value"]
    )
    await room.emu.wait_for(lambda: _clicks_handled(events))
    [handled] = _clicks_handled(events)
    assert handled["event"] == "approval click refused" and handled["user"] == mallory.id
    assert _status(room, "dana", held) == "held"
    assert not _updates(room, request)
    assert room.sql("SELECT status FROM pending_sender_approvals") == [("pending",)]


async def test_a_bot_senders_name_is_resolved_once_through_bots_info(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    eli = room.apps["eli"]
    sent = [await room.bot_post("eli", f"{room.mention('dana')} hi {i}") for i in range(3)]
    await room.emu.wait_for(lambda: all(_processed(rec, "dana", t) for t in sent))
    assert room.sql("SELECT kind, display_name FROM users WHERE id = ?", f"slack:bot:{eli.bot_id}") == [
        ("bot", "eli")
    ]
    asked = [c for c in room.emu.api_calls if c.method == "bots.info" and c.params.get("bot") == eli.bot_id]
    assert len([c for c in asked if c.app_name == "dana"]) == 1


async def test_an_approval_dm_survives_a_429_storm_and_is_sent_once(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    room.emu.fail_next("chat.postMessage", 3, error="ratelimited", retry_after=1, app_id="dana")
    await room.bot_post("eli", f"{room.mention('dana')} knock knock")
    await room.emu.wait_for(lambda: _approval_dms(room, room.human.id), timeout=15)
    limited = [c for c in room.emu.api_calls if c.method == "chat.postMessage" and c.status == 429]
    assert len(limited) == 3
    assert len(_owner_dm_posts(room, room.human.id)) == 1


async def test_a_post_refused_with_a_transient_error_is_retried_once_it_clears(
    room: Room, fleet_factory
) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    room.emu.fail_next("chat.postMessage", 1, error="internal_error", app_id="dana")
    await room.bot_post("eli", f"{room.mention('dana')} hello?")
    await room.emu.wait_for(lambda: _approval_dms(room, room.human.id), timeout=15)
    assert len(_owner_dm_posts(room, room.human.id)) == 1
    failed = [c for c in room.emu.api_calls if c.method == "chat.postMessage" and c.error == "internal_error"]
    assert len(failed) == 1
