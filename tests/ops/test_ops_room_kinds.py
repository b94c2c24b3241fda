"""open-room --kind/--lead/--mission (docs/team-rooms.md): the room's a2a_rooms row, set and changed
by the real script against the emulator, and shown by ``nanoslack rooms``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nanoslack.ops import admin
from nanoslack.ops.open_room import Identity, OpenRoomError, Request, intro_text, parse_request
from nanoslack.store import Store, sqlite_url
from tests.ops.rooms import Room, channel_of

DB = "data/nanoslack.db"


def _kinds(tmp: Path) -> list[tuple[str, str, str | None, tuple[str, ...], str | None]]:
    with Store.open(sqlite_url(str(tmp / DB))) as store:
        return [(r.channel, r.kind, r.lead, r.members, r.mission) for r in store.room_kinds.list()]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kind", "chain"], "--kind chain needs --lead NAME"),
        (["--kind", "round", "--lead", "dana"], "--lead only applies to a chain room"),
        (["--kind", "chain", "--lead", "fay"], "--lead 'fay' is not one of --instances"),
    ],
)
def test_kind_rules_reject_what_cannot_work(argv: list[str], message: str) -> None:
    with pytest.raises(OpenRoomError, match=message):
        parse_request(["--instances", "dana,eli", "--user", "U0AAAAAAA", *argv])


def test_a_round_room_is_opened_with_its_mission_and_reopening_makes_it_a_chain(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli", "fay") + f"NANOSLACK_DB={DB}\n")
    args = ("--instances", "dana,eli,fay", "--user", room.human.id)
    channel = channel_of(room.open(*args, "--kind", "round", "--mission", "Ship the parser by Friday"))
    assert _kinds(room.tmp) == [(channel, "round", None, ("dana", "eli", "fay"), "Ship the parser by Friday")]
    [intro] = room.emu.conversation_messages(channel)
    assert "round room" in intro["text"] and "Ship the parser by Friday" in intro["text"]

    assert channel_of(room.open(*args, "--kind", "chain", "--lead", "eli")) == channel
    assert _kinds(room.tmp) == [(channel, "chain", "eli", ("dana", "eli", "fay"), None)]

    out = io.StringIO()
    assert admin.rooms_main(["--db", str(room.tmp / DB)], out=out) == 0
    (line,) = [row for row in out.getvalue().splitlines() if row.startswith(channel)]
    assert line.split() == [channel, "chain", "eli", "dana,eli,fay"]


def test_the_intro_of_a_chain_room_names_its_lead() -> None:
    bots = [Identity("dana", "UDANA", "BDANA"), Identity("eli", "UELI", "BELI")]
    req = Request(["dana", "eli"], "UHUMAN", Path(".env"), None, False, kind="chain", lead="eli")
    text = intro_text("UHUMAN", bots, req)
    assert "chain room led by <@UELI>" in text and "until a human speaks" in text
