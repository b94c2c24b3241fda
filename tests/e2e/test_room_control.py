"""Room control end to end (issue 9): acknowledgements, pause notices, halt and resume."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Recorder, Room


def _outcome(rec: Recorder, instance: str, ts: str) -> Any:
    return next((o for i, m, o in rec.outcomes if i == instance and m.ts == ts), None)


def _bot_posts(room: Room, channel: str | None = None) -> list[dict[str, Any]]:
    return [m for m in room.emu.all_messages(channel or room.channel) if m.get("bot_id")]


def _turns(room: Room, instance: str, status: str | None = None) -> list[tuple[Any, ...]]:
    rows = room.sql("SELECT id, status FROM turns WHERE instance = ? ORDER BY id", instance)
    return [r for r in rows if status in (None, r[1])]


# -- no acknowledgement ping-pong ---------------------------------------------------------------


async def test_a_bots_thanks_wakes_nobody(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    thanks = await room.bot_post("eli", f"{room.mention('dana')} thanks!")
    question = await room.bot_post("eli", f"{room.mention('dana')} can you check the build?")
    await room.emu.wait_for(lambda: _outcome(rec, "dana", question) is not None)
    ack = _outcome(rec, "dana", thanks)
    assert ack.status == "processed" and not ack.route.engaged
    assert ack.reason == "acknowledgement"
    assert room.sql("SELECT status FROM messages WHERE instance='dana' AND ts=?", thanks) == [("context",)]
    assert _outcome(rec, "dana", question).route.engaged  # the same bot asking something does wake dana


async def test_an_agent_answering_acknowledged_posts_nothing(room: Room, fleet_factory) -> None:
    await fleet_factory(
        ["dana", "eli"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND="echo Acknowledged."
    )
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} deploy is done")
    await room.emu.wait_for(lambda: _turns(room, "dana", "silent"), timeout=10)
    assert _bot_posts(room) == []
    assert room.sql("SELECT count(*) FROM outbox WHERE instance = 'dana'") == [(0,)]
