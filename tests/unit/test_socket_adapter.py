"""Our Socket Mode client (``nanoslack.slack.adapter``) against the emulator, and a
server that stops answering: batches, acks, the faults Slack has, the heartbeat."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.core import FleetBacklog
from nanoslack.emulator import Emulator
from nanoslack.slack.adapter import Frames, SocketModeClient, SocketOptions
from nanoslack.slack.pump import _ack_frame, _loads

QUICK = SocketOptions(ping_interval=0.2, watchdog_interval=0.05, idle_reconnect=300.0, backoff_first=0.05)


def _client(api_url: str, app_token: str, options: SocketOptions = QUICK) -> SocketModeClient:
    web_client = AsyncWebClient(base_url=api_url)

    async def open_url() -> str:
        return str((await web_client.apps_connections_open(app_token=app_token))["url"])

    return SocketModeClient(open_url, instance="dana", options=options)


class Collector:
    """A consumer that keeps every envelope's id; it acks only when told to."""

    def __init__(self, client: SocketModeClient, *, ack: bool = True) -> None:
        self.client = client
        self.ack = ack
        self.batches: list[int] = []
        self.ids: list[str] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def __call__(self, frames: Frames) -> None:
        await self.hold.wait()
        self.batches.append(len(frames))
        ids = [str(m["envelope_id"]) for m in map(_loads, (raw for raw, _ in frames)) if "envelope_id" in m]
        self.ids += ids
        if self.ack:
            assert await self.client.send([_ack_frame(i) for i in ids])


@dataclass
class Dana:
    emu: Emulator
    app_id: str
    app_token: str
    room: str
    human: str

    def client(self, options: SocketOptions = QUICK) -> SocketModeClient:
        return _client(self.emu.api_url, self.app_token, options)


@pytest.fixture
def dana(emu: Emulator) -> Dana:
    human = emu.add_user("alice")
    bot = emu.add_app("dana")
    room = emu.create_conversation([human.id, bot.bot_user_id, emu.add_app("eli").bot_user_id], kind="mpim")
    return Dana(emu, bot.app_id, bot.app_token, room.id, human.id)


async def test_every_envelope_is_handed_over_in_order_and_acked_once(dana: Dana) -> None:
    emu, app_id, room, human = dana.emu, dana.app_id, dana.room, dana.human
    client = dana.client()
    seen = Collector(client)
    await client.connect(seen)
    try:
        posted = await emu.bulk_post(human, room, [f"hello {i}" for i in range(300)])
        await emu.wait_for(lambda: emu.stats(app_id).acked == len(posted), timeout=20)
        assert len(seen.ids) == len(set(seen.ids)) == len(posted)
        assert emu.stats(app_id).redelivered == 0
        assert max(seen.batches) > 1  # read while the consumer worked: batches, not single frames
    finally:
        await client.close()
    assert not client.connected


async def test_a_consumer_that_holds_the_reader_for_long_trips_no_heartbeat(
    dana: Dana,
) -> None:
    """The reader stops at ``max_queued`` while the consumer is busy; the server's pongs
    wait unread in the socket, and no heartbeat takes that for a dead connection."""
    emu, app_id, room, human = dana.emu, dana.app_id, dana.room, dana.human
    client = dana.client(dataclasses.replace(QUICK, max_queued=4))
    seen = Collector(client)
    seen.hold.clear()
    await client.connect(seen)
    try:
        posted = await emu.bulk_post(human, room, [f"burst {i}" for i in range(60)])
        await emu.wait_for(lambda: emu.stats(app_id).delivered >= len(posted), timeout=10)
        await asyncio.sleep(QUICK.ping_interval * QUICK.pongs_missed * 3)  # the pause under test
        assert client.watchdog_reconnects == 0 and client.reconnects == 0
        seen.hold.set()
        await emu.wait_for(lambda: emu.stats(app_id).acked == len(posted), timeout=20)
        assert client.reconnects == 0  # what the short test ack timeout redelivered was acked too
    finally:
        await client.close()


async def test_a_socket_has_work_from_the_read_to_the_ack_and_turns_wait_for_it(dana: Dana) -> None:
    """Envelopes read and not acked yet are work the fleet's turns wait for
    (``FleetBacklog``'s ``sockets_busy``); once acked, the turns go."""
    emu, room, human = dana.emu, dana.room, dana.human
    client = dana.client()
    seen = Collector(client)
    seen.hold.clear()
    backlog = FleetBacklog(sockets_busy=client.has_work)
    await client.connect(seen)
    try:
        assert not client.has_work() and not backlog.behind()
        await emu.bulk_post(human, room, ["one"])
        await emu.wait_for(client.has_work, timeout=10)
        turn = asyncio.create_task(backlog.yield_to())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not turn.done()  # the turn waits while the envelope is unacked
        seen.hold.set()
        await asyncio.wait_for(turn, timeout=5)
        await emu.wait_for(lambda: not client.has_work(), timeout=10)
        assert not backlog.behind()
    finally:
        await client.close()


@pytest.mark.parametrize("fault", ["drop", "refresh_requested"])
async def test_a_dropped_or_refreshed_socket_is_replaced_and_nothing_is_lost(dana: Dana, fault: str) -> None:
    emu, app_id, room, human = dana.emu, dana.app_id, dana.room, dana.human
    client = dana.client()
    seen = Collector(client)
    await client.connect(seen)
    try:
        first = await emu.bulk_post(human, room, [f"before {i}" for i in range(20)])
        await emu.wait_for(lambda: emu.stats(app_id).acked == len(first), timeout=10)
        if fault == "drop":
            await emu.drop_sockets(app_id)
        else:
            await emu.send_disconnect(app_id, fault)
        await emu.wait_for(lambda: client.reconnects == 1 and emu.connections(app_id) == 1, timeout=10)
        after = await emu.bulk_post(human, room, [f"after {i}" for i in range(20)])
        await emu.wait_for(lambda: emu.stats(app_id).acked == len(first) + len(after), timeout=10)
        assert client.watchdog_reconnects == 0
    finally:
        await client.close()


async def test_withheld_acks_are_delivered_again_and_acked_then(dana: Dana) -> None:
    emu, app_id, room, human = dana.emu, dana.app_id, dana.room, dana.human
    client = dana.client()
    seen = Collector(client)
    await client.connect(seen)
    try:
        emu.withhold_acks(app_id, 5)
        posted = await emu.bulk_post(human, room, [f"m {i}" for i in range(10)])
        await emu.wait_for(lambda: emu.stats(app_id).acked == len(posted), timeout=20)
        assert emu.stats(app_id).redelivered >= 5
    finally:
        await client.close()


@pytest.fixture
async def silent_server() -> AsyncIterator[tuple[str, list[int]]]:
    """A Socket Mode server that says hello and then never answers a ping."""
    opened: list[int] = []

    async def connections_open(request: web.Request) -> web.Response:
        opened.append(len(opened) + 1)
        return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{port}/link"})

    async def link(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        await ws.send_str('{"type":"hello","num_connections":1}')
        async for _ in ws:  # pings read and never answered
            pass
        return ws

    app = web.Application()
    app.router.add_post("/api/apps.connections.open", connections_open)
    app.router.add_get("/link", link)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/api/", opened
    await runner.cleanup()


async def test_a_server_that_stops_answering_pings_gets_a_new_connection(
    silent_server: tuple[str, list[int]],
) -> None:
    api_url, opened = silent_server
    client = _client(api_url, "xapp-1-test")

    async def ignore(_frames: Frames) -> None:
        return None

    await client.connect(ignore)
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while client.watchdog_reconnects < 1 and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 — a counter, no event to wait on
            await asyncio.sleep(0.05)
        assert client.watchdog_reconnects >= 1 and len(opened) >= 2
    finally:
        await client.close()


def test_an_envelope_id_that_needs_escaping_still_makes_valid_json() -> None:
    assert _ack_frame("1b4e28ba-2fa1-11d2-883f-0016d3cca427") == (
        '{"envelope_id":"1b4e28ba-2fa1-11d2-883f-0016d3cca427"}'
    )
    assert _ack_frame('a"b\\c') == '{"envelope_id": "a\\"b\\\\c"}'
