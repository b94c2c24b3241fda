"""Bad input never stops an instance, and tokens never reach the logs (docs/architecture.md)."""

from __future__ import annotations

import copy
import io
import json
import random
from typing import Any

from nanoslack.logs import TOKEN_RE, configure_logging
from tests.e2e.conftest import Room

JUNK: list[Any] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "x" * 3000,
    [],
    {},
    [1, "a"],
    {"k": {"k": [None]}},
    "<@U",
    "\x00",
]


def _valid_event(room: Room) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T0EMULATOR",
        "api_app_id": room.apps["dana"].app_id,
        "event_id": "Ev0FUZZ",
        "event_time": 1,
        "event": {
            "type": "message",
            "channel": room.channel,
            "channel_type": "mpim",
            "user": room.human.id,
            "text": f"{room.mention('dana')} fuzz",
            "ts": "1700000000.000100",
        },
    }


def _mutate(base: dict[str, Any], rng: random.Random, i: int) -> Any:
    """Structured garbage: a real event with fields removed, retyped or replaced."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(JUNK)
    payload = copy.deepcopy(base)
    payload["event_id"] = f"EvFUZZ{i}"
    payload["event"]["ts"] = f"1600000000.{i:06d}"
    target = payload if roll < 0.35 else payload["event"]
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*target.keys(), "subtype", "bot_id", "thread_ts", "channel_type"])
        op = rng.random()
        if op < 0.4:
            target.pop(key, None)
        elif key == "subtype" and op < 0.7:
            target[key] = rng.choice(
                ["message_changed", "message_deleted", "channel_join", "weird", "bot_message"]
            )
        else:
            target[key] = rng.choice(JUNK)
    return payload


async def test_thousand_malformed_payloads_are_dropped_and_the_instance_keeps_serving(
    room: Room, fleet_factory
) -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    _, rec = await fleet_factory(["dana", "eli"])
    dana = room.apps["dana"]
    rng = random.Random(20261129)
    base = _valid_event(room)
    before = room.emu.stats(dana.app_id).acked
    for i in range(1000):
        if i % 100 == 7:
            await room.emu.inject_frame(
                dana.app_id, rng.choice(["{not json", "[]", "ping", '{"type":"nope"}'])
            )
        kind = "slash_commands" if i % 97 == 3 else "events_api"
        await room.emu.inject_envelope(dana.app_id, _mutate(base, rng, i), kind=kind)
        if i % 50 == 49:  # Slack paces deliveries; a 1,000-envelope burst would outrun the ack timeout
            await room.emu.wait_for(
                lambda n=i + 1: room.emu.stats(dana.app_id).acked - before >= n, timeout=10
            )

    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} still alive?")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    drops = [e for e in lines if e.get("event") in ("event dropped", "envelope ignored", "envelope dropped")]
    fuzzed = [m for _, m, _ in rec.outcomes if m.ts.startswith("1600000000.")]
    # Every envelope was acked; each one either was dropped with a reason in the log
    # or was (still) a well-formed message and went through the pipeline.
    assert len(drops) + len(fuzzed) >= 1000
    assert all(e.get("reason") for e in drops)


async def test_no_token_appears_in_any_log_line(room: Room, fleet_factory) -> None:
    """Every path that would carry a token is taken: a refused ``auth.test``, a post
    Slack refuses, tokens pasted into messages (bolt logs each frame at debug, and
    slack-sdk each request body: the approval DM quotes the held message), a
    dropped socket. The masked form must show up, so the paths did run."""
    out = io.StringIO()
    configure_logging("debug", "console", stream=out)
    dana, eli, fay = (room.apps[n] for n in ("dana", "eli", "fay"))
    room.emu.fail_next("auth.test", 1, error="invalid_auth", app_id=fay.app_id)
    fleet, rec = await fleet_factory(
        ["dana", "eli", "fay"], expect=["dana", "eli"], SLACK_OWNER=room.human.id
    )
    room.emu.fail_next("chat.postMessage", 1, error="internal_error", app_id=dana.app_id)

    await room.bot_post("eli", f"{room.mention('dana')} my keys: {eli.bot_token} {eli.app_token}")
    await room.emu.wait_for(lambda: _approval_dm_posted(room, dana.bot_id), timeout=15)
    ts = await room.emu.post_as_user(
        room.human.id, room.channel, f"{room.mention('dana')} yours? {dana.bot_token}"
    )
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    await room.emu.drop_sockets(dana.app_id)
    await room.emu.wait_for(lambda: room.emu.connections(dana.app_id) >= 1, timeout=10)
    await fleet.stop()

    text = out.getvalue()
    assert "instance skipped: auth.test failed" in text
    assert "post failed" in text
    for app in room.apps.values():
        assert app.bot_token not in text
        assert app.app_token not in text
    assert "xoxb-***" in text and "xapp-***" in text  # the tokens reached the logs, masked
    assert not TOKEN_RE.findall(text.replace("xoxb-***", "").replace("xapp-***", ""))


def _approval_dm_posted(room: Room, bot_id: str) -> bool:
    return any(
        m.get("bot_id") == bot_id
        for conv in room.emu.conversations()
        if conv.kind == "im" and room.human.id in conv.members
        for m in room.emu.conversation_messages(conv.id)
    )
