"""open-a2a-room (docs/operations.md): the script as a real subprocess against the Slack emulator,
plus the pure parts (argument rules, intro text) in process."""

from __future__ import annotations

import socket
import sqlite3
from typing import Any

import pytest

from nanoslack.inbound import Inbound
from nanoslack.ops.open_room import Identity, OpenRoomError, intro_text, parse_request
from nanoslack.slack.parse import parse_event
from tests.ops.rooms import Room, Runner, channel_of

# --- pure parts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "need at least 2 instances"),
        (["--instances", "dana", "--user", "U0AAAAAAA"], "need at least 2 instances"),
        (["--instances", "dana,,", "--user", "U0AAAAAAA"], "need at least 2 instances"),
        (["--instances", "dana,eli"], "without --user a room needs at least 3 instances"),
        (["--instances", "dana,eli", "--user", "alice"], "is not a Slack user id"),
        (["--instances", "dana,eli", "--user", "u0aaaaaaa"], "is not a Slack user id"),
        (["--instances", "dana,eli", "--user", "C0AAAAAAA"], "is not a Slack user id"),
        (["--instances", "dana,Eli", "--user", "U0AAAAAAA"], "invalid instance name 'Eli'"),
        (["--instances", "dana,dana", "--user", "U0AAAAAAA"], "listed twice"),
        (["--instances", ",".join(f"b{i}" for i in range(9)), "--user", "U0AAAAAAA"], "too many members"),
    ],
)
def test_argument_rules_reject_bad_rooms(argv: list[str], message: str) -> None:
    with pytest.raises(OpenRoomError, match=message):
        parse_request(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--instances", "dana,eli", "--user", "U0AAAAAAA"],
        ["--instances", "dana, eli", "--user", "W0AAAAAAA"],
        ["--instances", "default,eli,gh-bot"],
    ],
)
def test_argument_rules_accept_valid_rooms(argv: list[str]) -> None:
    parse_request(argv)


def test_intro_mentions_every_member_and_explains_the_room() -> None:
    bots = [Identity("dana", "UDANA", "BDANA"), Identity("eli", "UELI", "BELI")]
    text = intro_text("UHUMAN", bots)
    for uid in ("UHUMAN", "UDANA", "UELI"):
        assert f"<@{uid}>" in text
    assert "mention" in text
    assert "until a human speaks" in text


# --- against the emulator ---------------------------------------------------------------


def test_first_instance_opens_the_room_with_the_human_and_the_other_bots(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli", "fay"))
    r = room.open("--instances", "dana,eli,fay", "--user", room.human.id)
    channel = channel_of(r)

    assert sorted(c.app_name for c in room.calls("auth.test")) == ["dana", "eli", "fay"]
    [opened] = room.calls("conversations.open")
    assert opened.app_name == "dana"
    assert set(opened.params["users"].split(",")) == {
        room.human.id,
        room.apps["eli"].bot_user_id,
        room.apps["fay"].bot_user_id,
    }
    [conv] = [c for c in room.emu.conversations() if c.id == channel]
    assert conv.kind == "mpim"
    assert set(conv.members) == {room.human.id, *(a.bot_user_id for a in room.apps.values())}
    room.assert_opened(channel, "dana", "eli", "fay")


def test_intro_is_posted_in_the_new_room_by_the_opener_mentioning_everyone(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))

    [intro] = room.emu.conversation_messages(channel)
    assert intro["bot_id"] == room.apps["dana"].bot_id
    for uid in (room.human.id, room.apps["dana"].bot_user_id, room.apps["eli"].bot_user_id):
        assert f"<@{uid}>" in intro["text"]
    assert "mention" in intro["text"] and "until a human speaks" in intro["text"]


def test_intro_is_marked_with_room_intro_metadata_the_fleet_recognises(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))

    [intro] = room.emu.conversation_messages(channel)
    assert intro["metadata"] == {
        "event_type": "nanoslack_room_intro",
        "event_payload": {"opener": "dana", "instances": "dana,eli", "human": room.human.id},
    }
    # What eli's intake makes of the intro as Slack delivers it (metadata included).
    event = {k: intro[k] for k in ("type", "ts", "user", "bot_id", "text", "metadata")}
    body = {"type": "event_callback", "event": {**event, "channel": channel, "channel_type": "mpim"}}
    parsed = parse_event(body, instance="eli", team_id=None)
    assert isinstance(parsed, Inbound) and parsed.intro
    assert room.apps["eli"].bot_user_id in parsed.mentions  # still read: the fleet decides what it means


def test_missing_env_file_is_created_with_the_room_and_tokens_come_from_the_environment(room: Room) -> None:
    env = {f"SLACK_BOT_TOKEN_{n.upper()}": room.apps[n].bot_token for n in ("dana", "eli")}
    assert not room.env_file.exists()
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id, env=env))
    assert room.env_file.read_bytes() == f"SLACK_A2A_ROOMS={channel}\n".encode()


def test_env_file_without_the_key_gets_the_line_appended(room: Room) -> None:
    before = room.token_lines("dana", "eli").encode()
    room.env_file.write_bytes(before)
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))
    assert room.env_file.read_bytes() == before + f"SLACK_A2A_ROOMS={channel}\n".encode()


def test_env_file_already_listing_the_room_is_left_unchanged(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))
    before = room.env_file.read_bytes()
    assert before.endswith(f"SLACK_A2A_ROOMS={channel}\n".encode())

    # The same member set returns the same conversation.
    again = room.open("--instances", "dana,eli", "--user", room.human.id)
    assert channel_of(again) == channel
    assert room.env_file.read_bytes() == before
    # A listed room admits bot messages: re-posting an intro that mentions every bot
    # would wake them all, so the second run does not.
    assert len(room.emu.conversation_messages(channel)) == 1
    assert "already in SLACK_A2A_ROOMS" in again.stderr


def test_other_keys_and_comments_are_untouched_byte_for_byte(room: Room) -> None:
    head = b"# nanoslack fleet\r\nSLACK_INSTANCES=dana,eli\r\nSLACK_A2A_MAX_HOPS = 4   # short leash\r\n"
    tail = b"\r\nexport LOG_LEVEL='debug'\r\nNAME=caf\xc3\xa9\r\n" + room.token_lines("dana", "eli").encode()
    room.env_file.write_bytes(head + b'SLACK_A2A_ROOMS="G0OLDROOM"' + tail)
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))
    assert room.env_file.read_bytes() == head + f'SLACK_A2A_ROOMS="G0OLDROOM,{channel}"'.encode() + tail


def test_bots_only_room_with_the_default_instance(room: Room) -> None:
    env = {"SLACK_BOT_TOKEN": room.apps["dana"].bot_token}
    room.env_file.write_text(room.token_lines("eli", "fay"))
    channel = channel_of(room.open("--instances", "default,eli,fay", env=env))
    [opened] = room.calls("conversations.open")
    assert opened.app_name == "dana"
    assert set(opened.params["users"].split(",")) == {
        room.apps["eli"].bot_user_id,
        room.apps["fay"].bot_user_id,
    }
    room.assert_opened(channel, "dana", "eli", "fay", human=False)


def test_real_environment_wins_over_env_file(room: Room) -> None:
    room.env_file.write_text("SLACK_BOT_TOKEN_DANA=xoxb-stale-token\n" + room.token_lines("eli"))
    env = {"SLACK_BOT_TOKEN_DANA": room.apps["dana"].bot_token}
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id, env=env))
    # The stale token would have been refused: every call went out with the real one.
    assert [c.error for c in room.emu.api_calls] == [None] * len(room.emu.api_calls)
    assert "dana" in [c.app_name for c in room.calls("auth.test")]
    [opened] = room.calls("conversations.open")
    assert opened.app_name == "dana"
    room.assert_opened(channel, "dana", "eli")


def test_api_url_comes_from_env_file_when_not_in_the_environment(room: Room, run: Runner) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli") + f"SLACK_API_URL={room.emu.api_url}\n")
    r = run("open-a2a-room.py", "--instances", "dana,eli", "--user", room.human.id, cwd=room.tmp)
    room.assert_opened(channel_of(r), "dana", "eli")


def test_api_url_flag_accepts_a_base_without_trailing_slash(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    base = room.emu.api_url.rstrip("/")
    channel = channel_of(
        room.open(
            "--instances",
            "dana,eli",
            "--user",
            room.human.id,
            "--api-url",
            base,
            env={"SLACK_API_URL": "http://127.0.0.1:9/wrong/"},
        )
    )
    room.assert_opened(channel, "dana", "eli")


def test_a_rate_limited_post_is_retried(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    room.emu.fail_next("chat.postMessage", error="ratelimited", retry_after=1)
    channel = channel_of(room.open("--instances", "dana,eli", "--user", room.human.id))
    assert len(room.emu.conversation_messages(channel)) == 1
    room.assert_opened(channel, "dana", "eli")


# --- errors: exit 1, one prefixed line, .env untouched -----------------------------------


def assert_fails(r: Any, message: str) -> None:
    assert r.returncode == 1
    assert r.stdout == ""
    assert f"open-a2a-room: {message}" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instances", "dana", "--user", "{human}"], "need at least 2 instances"),
        (["--user", "{human}"], "need at least 2 instances"),
        (["--instances", "dana,eli"], "without --user a room needs at least 3 instances"),
        (["--instances", "dana,eli", "--user", "alice"], "--user 'alice' is not a Slack user id"),
    ],
)
def test_argument_errors_exit_1_without_calling_slack(room: Room, args: list[str], message: str) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    before = room.env_file.read_bytes()
    r = room.open(*[a.format(human=room.human.id) for a in args])
    assert_fails(r, message)
    assert room.emu.api_calls == []
    assert room.env_file.read_bytes() == before


def test_missing_token_names_the_key_it_looked_for(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana"))
    r = room.open("--instances", "dana,gh-bot", "--user", room.human.id)
    assert_fails(r, "missing token for instance 'gh-bot': set SLACK_BOT_TOKEN_GH_BOT")
    assert room.emu.api_calls == []


def test_missing_default_token_names_the_bare_key(room: Room) -> None:
    room.env_file.write_text(room.token_lines("eli"))
    r = room.open("--instances", "default,eli", "--user", room.human.id)
    assert_fails(r, "missing token for instance 'default': set SLACK_BOT_TOKEN ")


def test_slack_error_is_reported_as_method_failed(room: Room) -> None:
    room.env_file.write_text(room.token_lines("dana", "eli"))
    before = room.env_file.read_bytes()
    room.emu.fail_next("conversations.open", error="cannot_dm_bot")
    r = room.open("--instances", "dana,eli", "--user", room.human.id)
    assert_fails(r, "conversations.open failed: cannot_dm_bot")
    assert room.env_file.read_bytes() == before


def test_rejected_token_is_reported_without_printing_it(room: Room) -> None:
    bogus = "xoxb-bogus-0123456789-secret"
    room.env_file.write_text(f"SLACK_BOT_TOKEN_DANA={bogus}\n" + room.token_lines("eli"))
    r = room.open("--instances", "dana,eli", "--user", room.human.id, secrets=(bogus,))
    assert_fails(r, "auth.test failed: invalid_auth")


def test_unreachable_api_is_one_clear_line(room: Room) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The port is closed again: connection refused.
    room.env_file.write_text(room.token_lines("dana", "eli"))
    r = room.open(
        "--instances",
        "dana,eli",
        "--user",
        room.human.id,
        env={"SLACK_API_URL": f"http://127.0.0.1:{port}/api/"},
    )
    assert_fails(r, "auth.test failed: cannot reach the Slack API at")
    assert len(r.stderr.strip().splitlines()) == 1


# --- --public (the store hook) ------------------------------------------------------------


def test_public_room_creates_public_messaging_groups(room: Room) -> None:
    db = room.tmp / "data" / "nanoslack.db"
    room.env_file.write_text(room.token_lines("dana", "eli"))
    r = room.open(
        "--instances", "dana,eli", "--user", room.human.id, "--public", env={"NANOSLACK_DB": str(db)}
    )
    channel = channel_of(r)
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT instance, unknown_sender_policy FROM messaging_groups"
            " WHERE platform_id=? ORDER BY instance",
            (f"slack:{channel}",),
        ).fetchall()
    finally:
        conn.close()
    assert rows == [("dana", "public"), ("eli", "public")]
