"""An app created from a manifest without ``metadata.message:read`` (before docs/operations.md):
Slack hides message metadata from it, so the marks the fleet reads back are gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nanoslack.config import load_settings
from nanoslack.emulator import Emulator
from nanoslack.emulator.state import DEFAULT_SCOPES, METADATA_SCOPE
from nanoslack.ops.open_room import load_env, open_room, parse_request
from nanoslack.slack.fleet import Fleet
from nanoslack.testing.fleet_env import sql, write_fleet_env
from tests.e2e.conftest import FAST_SOCKET, Recorder

OLD_MANIFEST = sorted(DEFAULT_SCOPES - {METADATA_SCOPE})


async def test_an_app_without_the_metadata_scope_takes_the_room_intro_for_a_bot_message(
    emu: Emulator, tmp_path: Path
) -> None:
    alice = emu.add_user("alice", real_name="Alice")
    apps = [emu.add_app("dana"), emu.add_app("eli", scopes=OLD_MANIFEST), emu.add_app("fay")]
    db = tmp_path / "nanoslack.db"
    opener = write_fleet_env(tmp_path / "open.env", emu, apps, db)
    request = parse_request(["--instances", "dana,eli,fay", "--user", alice.id, "--env-file", str(opener)])
    channel = await asyncio.to_thread(open_room, request, load_env(opener, {}))
    [intro] = emu.conversation_messages(channel)

    env = write_fleet_env(tmp_path / ".env", emu, apps, db, SLACK_A2A_ROOMS=channel, SLACK_OWNER=alice.id)
    recorder = Recorder()
    fleet = Fleet(load_settings(env, environ={}), socket=FAST_SOCKET, on_outcome=recorder)
    try:
        assert sorted(await fleet.start()) == ["dana", "eli", "fay"]
        heard = lambda: {i: o.reason for i, m, o in recorder.outcomes if m.ts == intro["ts"]}  # noqa: E731
        await emu.wait_for(lambda: len(heard()) == 2, timeout=15)  # eli and fay; dana wrote it
        outcomes = heard()
    finally:
        await fleet.stop()

    # fay reads the intro's mark; eli, made from the older manifest, cannot: for eli the
    # intro is dana talking, a bot message that takes a hop and asks the owner about dana.
    assert outcomes["fay"] == "room intro"
    assert outcomes["eli"] != "room intro"
    assert sql(db, "SELECT instance FROM a2a_hops") == [("eli",)]
    assert sql(db, "SELECT count(*) FROM pending_sender_approvals") == [(1,)]
