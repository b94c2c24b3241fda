"""Turns and lines for the agent tests."""

from __future__ import annotations

from typing import Any

from nanoslack.agents import Line, Turn

ALICE = "slack:U0ALICE"
ELI_BOT = "slack:bot:B0ELI"
FAY_BOT = "slack:bot:B0FAY"


def human(text: str, name: str = "alice", ts: str = "1700000000.000100") -> Line:
    return Line(ts=ts, sender_id=ALICE, sender_name=name, text=text)


def bot(text: str, name: str = "eli", ts: str = "1700000001.000100") -> Line:
    return Line(ts=ts, sender_id=f"slack:bot:B0{name.upper()}", sender_name=name, text=text)


def make_turn(*lines: Line, **overrides: Any) -> Turn:
    fields: dict[str, Any] = {
        "instance": "dana",
        "name": "dana",
        "channel": "G0ROOM",
        "thread_ts": "1700000000.000100",
        "sender_id": lines[-1].sender_id if lines else ALICE,
        "wrapping_up": False,
        "room": 'Group chat: "G0ROOM"',
        "members": ("alice", "dana", "eli", "fay"),
        "transcript": lines or (human("@dana can you plan the release?"),),
        "system": "",
    }
    fields.update(overrides)
    return Turn(**fields)
