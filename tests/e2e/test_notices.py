"""The fleet's own notices are room context for its siblings: no hop, nobody woken."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Recorder, Room


def _notices(room: Room, prefix: str) -> list[dict[str, Any]]:
    return [m for m in room.emu.all_messages(room.channel) if str(m.get("text", "")).startswith(prefix)]


def _resume_button(room: Room, owner: str) -> dict[str, Any] | None:
    for conv in room.emu.conversations():
        if conv.kind == "im" and owner in conv.members:
            for msg in room.emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for el in block.get("elements") or []:
                        if el.get("action_id") == "nanoslack_resume":
                            return {"channel": conv.id, "ts": msg["ts"], "value": el["value"]}
    return None


def _heard(rec: Recorder, ts: str) -> dict[str, str]:
    return {i: o.reason for i, m, o in rec.outcomes if m.ts == ts}


async def test_a_resume_notice_reaches_the_sibling_bots_as_context_and_takes_no_hop(
    room: Room, fleet_factory
) -> None:
    owner = room.human.id
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=owner)
    await room.emu.post_as_user(owner, room.channel, "stop")
    await room.emu.wait_for(lambda: _notices(room, "🛑 Halted by") and _resume_button(room, owner))
    button = _resume_button(room, owner)
    assert button is not None
    await room.emu.click_button(owner, button["channel"], button["ts"], "nanoslack_resume", button["value"])
    await room.emu.wait_for(lambda: _notices(room, "▶️ Resumed by"))
    (resumed,) = _notices(room, "▶️ Resumed by")
    # The room runs again, so only the notice's marker keeps the sibling from counting it.
    assert resumed["metadata"]["event_type"] == "nanoslack_notice"
    poster = "dana" if resumed["bot_id"] == room.apps["dana"].bot_id else "eli"
    sibling = "eli" if poster == "dana" else "dana"
    await room.emu.wait_for(lambda: sibling in _heard(rec, resumed["ts"]))
    assert _heard(rec, resumed["ts"])[sibling] == "fleet notice"
    assert room.sql("SELECT count(*) FROM a2a_hops WHERE ts = ?", resumed["ts"]) == [(0,)]
    assert room.sql("SELECT status FROM messages WHERE instance = ? AND ts = ?", sibling, resumed["ts"]) == [
        ("context",)
    ]
    assert room.sql("SELECT count(*) FROM turns") == [(0,)]
