"""/metrics, /healthz and /readyz on NANOSLACK_METRICS_ADDR (docs/operations.md), served by the
real fleet against the emulator; scraped over HTTP like Prometheus does."""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from nanoslack.fleetproc import FleetProcess
from tests.e2e.conftest import Room

METRICS = {"NANOSLACK_METRICS_ADDR": "127.0.0.1:0"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def get(url: str, **headers: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.text()


async def scrape(base: str) -> Samples:
    status, text = await get(base + "metrics")
    assert status == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def _scrape_until(base: str, done: Any, within: float = 10.0) -> Samples:
    import asyncio
    import time

    deadline = time.monotonic() + within
    while True:
        samples = await scrape(base)
        if done(samples) or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.05)


async def readyz(base: str) -> tuple[int, Any]:
    import json

    status, text = await get(base + "readyz")
    return status, json.loads(text)


async def test_metrics_count_every_envelope_of_a_run_received_and_acked(room: Room, fleet_factory) -> None:
    fleet, _ = await fleet_factory(["dana", "eli"], **METRICS)
    base = fleet.health_server.url
    sent = 40
    for i in range(sent):  # no mention: one message envelope per app, no twin, no turn
        await room.emu.post_as_user(room.human.id, room.channel, f"note {i}")
    apps = {name: room.apps[name].app_id for name in ("dana", "eli")}
    await room.emu.wait_for(
        lambda: all(room.emu.stats(app).acked == sent for app in apps.values()),
        timeout=15,
        message="every envelope acked",
    )
    # The fleet counts a batch's acks once the last one is sent: scrape until it has.
    samples = await _scrape_until(
        base, lambda s: all(value(s, "nanoslack_envelopes_acked_total", instance=n) >= sent for n in apps)
    )
    for name, app in apps.items():
        stats = room.emu.stats(app)
        # What the emulator sent (a redelivery is another envelope) is what the fleet read and acked.
        assert value(samples, "nanoslack_envelopes_received_total", instance=name) == stats.delivered
        assert value(samples, "nanoslack_envelopes_acked_total", instance=name) == stats.delivered
        assert stats.delivered == sent + stats.redelivered
        assert value(samples, "nanoslack_ack_latency_seconds_count", instance=name) == stats.delivered
        assert value(samples, "nanoslack_instance_connected", instance=name) == 1
    assert value(samples, "nanoslack_instances_connected") == 2
    assert value(samples, "nanoslack_leases_held") == 2


async def test_turns_posts_drops_and_slack_errors_are_counted(room: Room, fleet_factory) -> None:
    fleet, rec = await fleet_factory(
        ["dana", "eli"], NANOSLACK_AGENT_COMMAND="echo on it", SLACK_OWNER=room.human.id, **METRICS
    )
    base = fleet.health_server.url
    # A bot message in a room outside SLACK_A2A_ROOMS: dropped by both instances.
    outside = await room.bot_post("fay", "hello bots", channel=room.outside)
    await room.emu.wait_for(lambda: len([m for m, _ in rec.dropped() if m.ts == outside]) == 2, timeout=10)
    # The first chat.postMessage is rate limited once: the client waits and posts.
    room.emu.fail_next("chat.postMessage", n=1, error="ratelimited", retry_after=0)
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} start")
    await room.emu.wait_for(
        lambda: any(m.get("text") == "on it" for m in room.emu.all_messages(room.channel)), timeout=15
    )
    # The poster counts a post once Slack's answer is recorded, just after Slack stored it.
    samples = await _scrape_until(
        base, lambda s: value(s, "nanoslack_posts_total", instance="dana", result="sent") >= 1
    )

    drop = {"reason": "room not in SLACK_A2A_ROOMS"}
    assert value(samples, "nanoslack_hop_drops_total", instance="dana", **drop) == 1
    assert value(samples, "nanoslack_hop_drops_total", instance="eli", **drop) == 1
    assert value(samples, "nanoslack_turns_total", instance="dana", status="done") == 1
    assert value(samples, "nanoslack_posts_total", instance="dana", result="sent") == 1
    limited = {"method": "chat.postMessage", "error": "ratelimited"}
    assert value(samples, "nanoslack_slack_api_errors_total", instance="dana", **limited) == 1


async def test_readyz_turns_503_when_an_instance_loses_its_socket_and_200_once_it_reconnects(
    room: Room, fleet_factory
) -> None:
    fleet, _ = await fleet_factory(["dana", "eli"], **METRICS)
    base = fleet.health_server.url
    assert await readyz(base) == (200, {"ready": True})
    dana = room.apps["dana"].app_id
    # Slack refuses new connections for a while: the dropped socket stays down.
    room.emu.fail_next("apps.connections.open", n=10_000, error="internal_error", app_id=dana)
    await room.emu.drop_sockets(dana)
    status, body = await _until(base, lambda status, _: status == 503)
    assert body == {"ready": False, "reasons": ["dana: not connected"]}
    assert (await get(base + "healthz"))[0] == 200  # the loop still answers

    room.emu.clear_faults()
    status, body = await _until(base, lambda status, _: status == 200)
    assert body == {"ready": True}
    samples = await scrape(base)
    assert value(samples, "nanoslack_instance_connected", instance="dana") == 1


async def _until(base: str, done: Any, within: float = 15.0) -> tuple[int, Any]:
    import asyncio
    import time

    deadline = time.monotonic() + within
    while True:
        status, body = await readyz(base)
        if done(status, body):
            return status, body
        assert time.monotonic() < deadline, f"/readyz still {status} {body}"
        await asyncio.sleep(0.05)


async def test_the_metrics_endpoints_answer_only_their_own_address(room: Room, fleet_factory) -> None:
    fleet, _ = await fleet_factory(["dana"], **METRICS)
    base = fleet.health_server.url
    port = base.rsplit(":", 1)[1].rstrip("/")
    # DNS rebinding: an attacker's name resolved to 127.0.0.1; the browser sends that name.
    for path in ("metrics", "readyz", "healthz"):
        status, _ = await get(base + path, Host=f"evil.example:{port}")
        assert status == 403, path
    assert (await get(base + "healthz", Host=f"localhost:{port}"))[0] == 200


async def test_nanoslack_run_serves_metrics_on_the_address_it_logs(room: Room, tmp_path) -> None:
    from nanoslack.testing.fleet_env import write_fleet_env

    env = write_fleet_env(
        tmp_path / "run.env", room.emu, [room.apps["dana"]], room.db, LOG_FORMAT="json", **METRICS
    )
    fleet = FleetProcess.start(env)
    try:
        serving = await fleet.wait_for_event("metrics serving")
        await fleet.wait_for_event("fleet started")
        assert (await get(serving["url"] + "healthz"))[0] == 200
        assert (await readyz(serving["url"]))[0] == 200
    finally:
        assert await fleet.stop() == 0


async def test_a_malformed_metrics_address_stops_the_run_naming_the_key(room: Room, tmp_path) -> None:
    from nanoslack.testing.fleet_env import write_fleet_env

    env = write_fleet_env(
        tmp_path / "bad.env", room.emu, [room.apps["dana"]], room.db, NANOSLACK_METRICS_ADDR="9464"
    )
    fleet = FleetProcess.start(env)
    assert await fleet.wait() == 2
    assert "NANOSLACK_METRICS_ADDR: expected host:port" in fleet.output


async def test_a_metrics_address_already_in_use_stops_the_run(room: Room, tmp_path) -> None:
    import socket

    from nanoslack.testing.fleet_env import write_fleet_env

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        env = write_fleet_env(
            tmp_path / "busy.env",
            room.emu,
            [room.apps["dana"]],
            room.db,
            LOG_FORMAT="json",
            NANOSLACK_METRICS_ADDR=f"127.0.0.1:{port}",
        )
        fleet = FleetProcess.start(env)
        assert await fleet.wait() == 1
        [refused] = fleet.events("metrics address unavailable")
        assert refused["key"] == "NANOSLACK_METRICS_ADDR"
        assert fleet.events("instance connected") == []
    finally:
        taken.close()


async def test_routine_runs_are_counted_by_routine_and_status(room: Room, fleet_factory) -> None:
    folder = room.tmp / "teammates" / "dana"
    folder.mkdir(parents=True)
    gate = folder / "nothing.sh"
    gate.write_text("#!/bin/sh\nexit 1\n")
    gate.chmod(0o755)
    (folder / "routines.toml").write_text(
        f'[[routine]]\nname = "beat"\nevery = "1s"\nchannel = "{room.channel}"\n'
        'prompt = "p"\ngate = "./nothing.sh"\n'
    )
    fleet, _ = await fleet_factory(["dana"], NANOSLACK_TEAMMATES=str(room.tmp / "teammates"), **METRICS)
    samples = await _scrape_until(
        fleet.health_server.url,
        lambda s: (
            value(s, "nanoslack_routine_runs_total", instance="dana", routine="beat", status="skipped") >= 2
        ),
    )
    assert (
        value(samples, "nanoslack_routine_runs_total", instance="dana", routine="beat", status="skipped") >= 2
    )
