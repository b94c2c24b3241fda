"""The fleet end to end: real bolt apps on the emulator, real store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nanoslack.slack.adapter import SocketOptions
from nanoslack.slack.fleet import Fleet
from tests.e2e.conftest import Recorder, Room


def _bot_rows(room: Room, instance: str) -> list[tuple[str, str]]:
    return room.sql(
        "SELECT ts, sender_id FROM messages WHERE instance = ? AND sender_id LIKE 'slack:bot:%' ORDER BY ts",
        instance,
    )


async def test_bot_in_allowlisted_room_is_admitted_as_its_bot_id(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    ts = await room.bot_post("eli", f"{room.mention('dana')} hello from eli")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    delivered = next(m for m in rec.delivered("dana") if m.ts == ts)
    assert delivered.sender_id == f"slack:bot:{room.apps['eli'].bot_id}"
    assert delivered.hop == 1


async def test_bot_outside_the_allowlist_is_dropped_before_the_router(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    ts = await room.bot_post("eli", f"{room.mention('dana')} psst", channel=room.outside)
    await room.emu.wait_for(lambda: any(m.ts == ts for m, _ in rec.dropped("dana")))
    reason = next(r for m, r in rec.dropped("dana") if m.ts == ts)
    assert reason == "room not in SLACK_A2A_ROOMS"
    assert room.sql("SELECT count(*) FROM messages WHERE ts = ?", ts) == [(0,)]


async def test_instance_outside_the_room_hears_nothing(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli", "fay"])
    ts = await room.bot_post("eli", f"{room.mention('dana')} only for this room")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    assert not [m for _, m, _ in rec.outcomes if m.instance == "fay"]


async def test_own_post_echoed_back_never_goes_downstream(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    ts = await room.bot_post("dana", "dana speaking")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("eli")))
    # The emulator delivered dana's post to dana too (as Slack does): it was acked and dropped.
    await room.emu.wait_for(lambda: room.emu.stats(room.apps["dana"].app_id).acked >= 1)
    assert not [m for _, m, _ in rec.outcomes if m.instance == "dana" and m.ts == ts]
    assert room.sql("SELECT count(*) FROM inbox WHERE instance = 'dana' AND ts = ?", ts) == [(0,)]


async def test_app_mention_twin_and_slack_retry_each_deliver_once(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"])
    dana = room.apps["dana"]
    room.emu.withhold_acks(dana.app_id, 2)  # the first two acks are "lost": Slack retries
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} ping")
    await room.emu.wait_for(lambda: room.emu.stats(dana.app_id).redelivered >= 2, timeout=10)
    # Withheld acks are not counted: the two redeliveries are what got acked.
    await room.emu.wait_for(lambda: room.emu.stats(dana.app_id).acked >= 2)
    assert [m.ts for m in rec.delivered("dana")].count(ts) == 1
    assert room.sql("SELECT status FROM inbox WHERE instance='dana' AND ts=?", ts) == [("done",)]


async def test_hop_limit_drops_the_third_bot_message_until_a_human_speaks(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_A2A_MAX_HOPS="2")
    eli = [await room.bot_post("eli", f"{room.mention('dana')} hop {i}") for i in range(3)]
    await room.emu.wait_for(lambda: any(m.ts == eli[2] for m, _ in rec.dropped("dana")))
    assert [m.ts for m in rec.delivered("dana") if m.is_bot] == eli[:2]
    await room.emu.post_as_user(room.human.id, room.channel, "carry on")
    again = await room.bot_post("eli", f"{room.mention('dana')} after the human")
    await room.emu.wait_for(lambda: any(m.ts == again for m in rec.delivered("dana")))


async def test_room_scope_counts_one_budget_across_instances(room: Room, fleet_factory) -> None:
    # An outside bot (fay, not in the fleet) talks; dana and eli both hear it.
    room.emu.create_conversation  # noqa: B018 - the room already has dana and eli
    fay = room.apps["fay"]
    mpim = room.emu.create_conversation(
        [room.human.id, room.apps["dana"].bot_user_id, room.apps["eli"].bot_user_id, fay.bot_user_id]
    )
    _, rec = await fleet_factory(
        ["dana", "eli"], SLACK_A2A_ROOMS=mpim.id, SLACK_A2A_MAX_HOPS="3", SLACK_A2A_HOP_SCOPE="room"
    )
    posts = [await room.bot_post("fay", f"fay {i}", channel=mpim.id) for i in range(5)]
    await room.emu.wait_for(lambda: len([o for o in rec.outcomes if o[1].ts == posts[-1]]) == 2)
    for name in ("dana", "eli"):
        # fay's messages only: the pause notice one instance posts at the limit may
        # reach the other before fay's last message does (room context, no hop).
        assert [m.ts for m in rec.delivered(name) if m.bot_id == fay.bot_id] == posts[:3]
    assert room.sql("SELECT count(DISTINCT ts) FROM a2a_hops WHERE room = ?", mpim.id) == [(3,)]


async def test_fifty_concurrent_bot_deliveries_admit_exactly_max_hops(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_A2A_MAX_HOPS="6")
    client = room.client("eli")
    texts = [f"{room.mention('dana')} burst {i}" for i in range(50)]
    await asyncio.gather(*(client.chat_postMessage(channel=room.channel, text=t) for t in texts))
    await room.emu.wait_for(lambda: len([o for o in rec.outcomes if o[0] == "dana"]) == 50, timeout=15)
    assert len(rec.delivered("dana")) == 6
    assert len(_bot_rows(room, "dana")) == 6


async def test_rooms_edit_in_env_takes_effect_within_ttl_without_restart(
    room: Room, fleet_factory, env_file: Path
) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_A2A_ROOMS="", SLACK_A2A_CONFIG_TTL="0.5")
    first = await room.bot_post("eli", f"{room.mention('dana')} before")
    await room.emu.wait_for(lambda: any(m.ts == first for m, _ in rec.dropped("dana")))
    text = env_file.read_text().replace("SLACK_A2A_ROOMS=\n", f"SLACK_A2A_ROOMS={room.channel}\n")  # noqa: ASYNC240
    await asyncio.to_thread(env_file.write_text, text)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ts = await room.bot_post("eli", f"{room.mention('dana')} after")
        await room.emu.wait_for(lambda ts=ts: any(o[1].ts == ts for o in rec.outcomes if o[0] == "dana"))
        if any(m.ts == ts for m in rec.delivered("dana")):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("SLACK_A2A_ROOMS edit was not picked up within the TTL")


async def test_dropped_socket_and_refresh_requested_lose_nothing(room: Room, fleet_factory) -> None:
    fleet, rec = await fleet_factory(["dana", "eli"])
    dana = room.apps["dana"]
    sent: list[str] = []
    for disrupt in ("drop", "refresh", "drop"):
        if disrupt == "drop":
            await room.emu.drop_sockets(dana.app_id)
        else:
            await room.emu.send_disconnect(dana.app_id, "refresh_requested")
        for i in range(5):  # some arrive while the socket is down: the emulator queues them
            sent.append(
                await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} {i}")
            )
    await room.emu.wait_for(lambda: {m.ts for m in rec.delivered("dana")} >= set(sent), timeout=20)
    assert sorted(m.ts for m in rec.delivered("dana")) == sorted(sent)


async def test_missing_token_skips_only_that_instance(room: Room, fleet_factory, tmp_path: Path) -> None:
    from nanoslack.config import load_settings
    from nanoslack.testing.fleet_env import write_fleet_env
    from tests.e2e.conftest import FAST_SOCKET

    write_fleet_env(
        tmp_path / "skip.env",
        room.emu,
        [room.apps["dana"]],
        room.db,
        SLACK_A2A_ROOMS=room.channel,
        SLACK_INSTANCES="dana,ghost",
    )
    settings = load_settings(tmp_path / "skip.env", environ={})
    assert [n for n, _ in settings.skipped] == ["ghost"]
    rec = Recorder()
    fleet = Fleet(settings, socket=FAST_SOCKET, on_outcome=rec)
    try:
        assert await fleet.start() == ["dana"]
        ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} still here?")
        await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    finally:
        await fleet.stop()


async def test_watchdog_reconnects_a_socket_that_silently_stopped_delivering(
    room: Room, fleet_factory
) -> None:
    watchful = SocketOptions(ping_interval=1.0, idle_reconnect=2.0, watchdog_interval=0.25)
    fleet, rec = await fleet_factory(["dana", "eli"], socket=watchful)
    dana = room.apps["dana"]
    assert room.emu.zombify_sockets(dana.app_id) == 1  # open, pinging, deaf
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} are you there?")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")), timeout=15)
    assert fleet.instances["dana"].reconnects >= 1


async def test_restart_with_queued_events_calls_auth_test_once(room: Room, fleet_factory) -> None:
    """bolt would call auth.test for every envelope of a burst that beats its own
    first auth.test; the fleet hands bolt the identity it already resolved."""
    fleet, rec = await fleet_factory(["dana", "eli"])
    await fleet.stop()
    sent = [
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} {i}")
        for i in range(30)
    ]
    before = len(room.emu.api_calls)
    fleet, rec = await fleet_factory(["dana", "eli"])
    await room.emu.wait_for(lambda: {m.ts for m in rec.delivered("dana")} >= set(sent), timeout=15)
    calls = [c for c in room.emu.api_calls[before:] if c.method == "auth.test" and c.app_name == "dana"]
    assert len(calls) == 1


async def test_the_room_intro_is_context_not_a_conversation(room: Room, fleet_factory) -> None:
    """Following docs/operations.md: open the room, then run the fleet. The intro mentions every
    bot, yet takes no hop, engages nobody, asks the owner nothing and wakes no agent."""
    from nanoslack.ops.open_room import load_env, open_room, parse_request
    from nanoslack.testing.fleet_env import write_fleet_env

    names = ["dana", "eli", "fay"]
    opener_env = write_fleet_env(room.tmp / "open.env", room.emu, [room.apps[n] for n in names], room.db)
    request = parse_request(
        ["--instances", ",".join(names), "--user", room.human.id, "--env-file", str(opener_env)]
    )
    channel = await asyncio.to_thread(open_room, request, load_env(opener_env, {}))
    [intro] = room.emu.conversation_messages(channel)

    _, rec = await fleet_factory(names, SLACK_A2A_ROOMS=channel, SLACK_OWNER=room.human.id)
    heard = lambda: [(m.instance, o.reason) for i, m, o in rec.outcomes if m.ts == intro["ts"]]  # noqa: E731
    await room.emu.wait_for(lambda: len(heard()) == 2, timeout=15)  # eli and fay; dana wrote it

    assert sorted(heard()) == [("eli", "room intro"), ("fay", "room intro")]
    assert room.sql("SELECT count(*) FROM a2a_hops") == [(0,)]
    assert room.sql("SELECT count(*) FROM pending_sender_approvals") == [(0,)]
    assert room.sql("SELECT count(*) FROM turns") == [(0,)]
    assert room.sql("SELECT DISTINCT status FROM messages WHERE ts = ?", intro["ts"]) == [("context",)]


async def test_start_warns_about_a_malformed_max_hops_and_says_how_it_runs(room: Room, fleet_factory) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        await fleet_factory(["dana", "eli"], SLACK_A2A_MAX_HOPS="lots", SLACK_A2A_HOP_SCOPE="room")
    warned = [e for e in logs if e.get("key") == "SLACK_A2A_MAX_HOPS"]
    assert warned and warned[0]["log_level"] == "warning"  # before any bot message arrived
    [started] = [e for e in logs if e["event"] == "fleet started"]
    assert started["a2a_rooms"] == [room.channel]
    assert (started["max_hops"], started["hop_scope"]) == (6, "room")
    assert started["agents"] == {"dana": "script", "eli": "script"}


async def test_a_running_fleet_checkpoints_its_database_off_the_loop_until_it_stops(
    room: Room, fleet_factory
) -> None:
    fleet, rec = await fleet_factory(["dana", "eli"])
    checkpoints = fleet.store.checkpoints
    ts = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} hello")
    await room.emu.wait_for(lambda: any(m.ts == ts for m in rec.delivered("dana")))
    passes = checkpoints.passes
    await room.emu.wait_for(lambda: checkpoints.passes > passes)
    # The store's own commits copy nothing into the database file while the thread runs.
    assert fleet.store.db.driver().execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    await fleet.stop()
    assert not checkpoints.running
