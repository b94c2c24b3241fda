"""Socket Mode against slack-sdk's SocketModeClient (builtin and aiohttp)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from slack_sdk import WebClient
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.aiohttp import SocketModeClient as AioSocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import App, Emulator, ThreadedEmulator


def test_builtin_socket_mode_client_receives_and_acks(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli")
    conv = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    got: list[SocketModeRequest] = []
    lock = threading.Lock()

    def on_request(client: SocketModeClient, req: SocketModeRequest) -> None:
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        with lock:
            got.append(req)

    smc = SocketModeClient(
        app_token=dana.app_token,
        web_client=WebClient(token=dana.bot_token, base_url=temu.api_url),
        ping_interval=1,
    )
    smc.socket_mode_request_listeners.append(on_request)
    smc.connect()
    try:
        temu.wait_for(lambda: temu.connections(dana.app_id) == 1)
        ts = temu.post_as_user(alice.id, conv.id, f"hello <@{dana.bot_user_id}>")
        temu.wait_for(lambda: temu.stats(dana.app_id).acked == 2)
        types = sorted(r.payload["event"]["type"] for r in got)
        assert types == ["app_mention", "message"]
        msg = next(r for r in got if r.payload["event"]["type"] == "message")
        assert msg.type == "events_api" and msg.retry_attempt == 0 and msg.retry_reason == ""
        p = msg.payload
        assert p["type"] == "event_callback" and p["api_app_id"] == dana.app_id
        assert p["authorizations"] == [
            {
                "enterprise_id": None,
                "team_id": p["team_id"],
                "user_id": dana.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ]
        assert p["is_ext_shared_channel"] is False and p["event_id"] and p["event_time"]
        ev = p["event"]
        assert ev["ts"] == ts and ev["channel"] == conv.id and ev["channel_type"] == "mpim"
        assert ev["user"] == alice.id and ev["client_msg_id"] and "subtype" not in ev
        mention = next(r for r in got if r.payload["event"]["type"] == "app_mention").payload
        assert mention["event"]["ts"] == ts and "channel_type" not in mention["event"]
        assert mention["event_id"] != p["event_id"]
        assert temu.stats(dana.app_id).redelivered == 0
    finally:
        smc.close()


@asynccontextmanager
async def acking_client(emu: Emulator, app: App) -> AsyncIterator[list[SocketModeRequest]]:
    """An aiohttp SocketModeClient for ``app`` that acks every envelope and records it."""
    got: list[SocketModeRequest] = []

    async def on_request(client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        # recorded before the ack: once the emulator counts an ack, its envelope is in `got`
        got.append(req)
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    smc = AioSocketModeClient(
        app_token=app.app_token,
        web_client=AsyncWebClient(token=app.bot_token, base_url=emu.api_url),
        ping_interval=1,
    )
    smc.socket_mode_request_listeners.append(on_request)  # type: ignore[arg-type]
    await smc.connect()
    try:
        yield got
    finally:
        await smc.close()


async def test_aiohttp_socket_mode_client_receives_and_acks(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    async with acking_client(emu, dana) as got:
        await emu.wait_for(lambda: emu.connections(dana.app_id) == 1)
        ts = await emu.post_as_user(alice.id, conv.id, f"dm <@{dana.bot_user_id}>")
        await emu.wait_for(lambda: emu.stats(dana.app_id).acked == 1)
        assert len(got) == 1  # no app_mention twin in an IM
        ev = got[0].payload["event"]
        assert ev["type"] == "message" and ev["channel_type"] == "im" and ev["ts"] == ts


async def test_unacked_envelope_is_redelivered_with_retry_attempt(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    async with acking_client(emu, dana) as got:
        await emu.wait_for(lambda: emu.connections(dana.app_id) == 1)
        emu.withhold_acks(dana.app_id, 2)
        await emu.post_as_user(alice.id, conv.id, "please ack")
        await emu.wait_for(lambda: emu.stats(dana.app_id).acked == 1, timeout=5)
        assert [r.retry_attempt for r in got] == [0, 1, 2]
        assert [r.retry_reason for r in got] == ["", "timeout", "timeout"]
        assert len({r.envelope_id for r in got}) == 3
        assert len({r.payload["event_id"] for r in got}) == 1
        s = emu.stats(dana.app_id)
        assert s.delivered == 3 and s.redelivered == 2


async def test_redelivery_stops_after_max_retries(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    async with acking_client(emu, dana) as got:
        await emu.wait_for(lambda: emu.connections(dana.app_id) == 1)
        emu.withhold_acks(dana.app_id, None)
        await emu.post_as_user(alice.id, conv.id, "never acked")
        await emu.wait_for(lambda: emu.engine.hub.dropped == 1, timeout=5)
        assert [r.retry_attempt or 0 for r in got] == [0, 1, 2, 3]
        emu.withhold_acks(dana.app_id, 0)


async def test_events_are_queued_until_a_socket_connects(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    for i in range(3):
        await emu.post_as_user(alice.id, conv.id, f"early {i}")
    assert emu.stats(dana.app_id).queued == 3
    async with acking_client(emu, dana) as got:
        await emu.wait_for(lambda: emu.stats(dana.app_id).acked == 3)
        assert [r.payload["event"]["text"] for r in got] == ["early 0", "early 1", "early 2"]
        assert emu.stats(dana.app_id).queued == 0


async def test_each_envelope_goes_to_exactly_one_of_several_sockets(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    async with acking_client(emu, dana) as first, acking_client(emu, dana) as second:
        await emu.wait_for(lambda: emu.connections(dana.app_id) == 2)
        tss = [await emu.post_as_user(alice.id, conv.id, f"m{i}") for i in range(20)]
        await emu.wait_for(lambda: emu.stats(dana.app_id).acked == 20)
        seen = [[r.payload["event"]["ts"] for r in got] for got in (first, second)]
        assert sorted(seen[0] + seen[1]) == sorted(tss)
        assert seen[0] and seen[1]


async def test_button_click_arrives_as_interactive_envelope(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    async with acking_client(emu, dana) as got_dana, acking_client(emu, eli) as got_eli:
        web = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": "Approve?"}},
            {
                "type": "actions",
                "block_id": "approval",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve",
                        "value": "yes",
                        "text": {"type": "plain_text", "text": "Approve"},
                    }
                ],
            },
        ]
        r = await web.chat_postMessage(channel=conv.id, text="Approve?", blocks=blocks)
        await emu.wait_for(lambda: len(got_eli) == 1)
        await emu.click_button(alice.id, conv.id, r["ts"], "approve")
        await emu.wait_for(lambda: any(x.type == "interactive" for x in got_dana))
        inter = next(x for x in got_dana if x.type == "interactive")
        p = inter.payload
        assert p["type"] == "block_actions" and p["api_app_id"] == dana.app_id
        assert p["user"]["id"] == alice.id and p["user"]["username"] == "alice"
        assert p["container"] == {
            "type": "message",
            "message_ts": r["ts"],
            "channel_id": conv.id,
            "is_ephemeral": False,
        }
        assert p["channel"]["id"] == conv.id and p["message"]["ts"] == r["ts"]
        assert p["trigger_id"] and p["response_url"].startswith(emu.base_url)
        a = p["actions"][0]
        assert (a["action_id"], a["block_id"], a["value"], a["type"]) == (
            "approve",
            "approval",
            "yes",
            "button",
        )
        assert a["text"]["text"] == "Approve"
        # eli, also in the room, never gets the click: a message posted after it reaches eli,
        # and eli has acked (so recorded) every envelope it was ever sent.
        marker = await emu.post_as_user(alice.id, conv.id, "after the click")
        await emu.wait_for(
            lambda: (
                any(x.payload.get("event", {}).get("ts") == marker for x in got_eli)
                and emu.stats(eli.app_id).acked == emu.stats(eli.app_id).delivered
            )
        )
        assert emu.stats(eli.app_id).delivered == 2  # the two messages, no interactive
        assert not any(x.type == "interactive" for x in got_eli)


def test_threaded_driver_injects_envelopes_frames_and_zombie_sockets(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    conv = temu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    got: list[SocketModeRequest] = []
    lock = threading.Lock()

    def on_request(client: SocketModeClient, req: SocketModeRequest) -> None:
        with lock:
            got.append(req)
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    smc = SocketModeClient(
        app_token=dana.app_token, web_client=WebClient(token=dana.bot_token, base_url=temu.api_url)
    )
    smc.socket_mode_request_listeners.append(on_request)
    smc.connect()
    try:
        temu.wait_for(lambda: temu.connections(dana.app_id) == 1)
        assert temu.inject_frame(dana.app_id, "not an envelope") == 1
        temu.inject_envelope(dana.app_id, {"odd": [1, 2]})
        temu.wait_for(lambda: any(r.payload == {"odd": [1, 2]} for r in got))
        assert temu.zombify_sockets(dana.app_id) == 1
        temu.post_as_user(alice.id, conv.id, "into the void")
        # the ack timeout passed without an ack: the envelope vanished on the zombie socket
        temu.wait_for(lambda: temu.stats(dana.app_id).redelivered >= 1)
        assert temu.stats(dana.app_id).acked == 1 and len(got) == 1
    finally:
        smc.close()


async def test_a_reaction_reaches_member_apps_subscribed_to_reaction_added(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli", events=["message.mpim"])  # not subscribed to reaction_added
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    async with acking_client(emu, dana) as got_dana, acking_client(emu, eli) as got_eli:
        await emu.wait_for(lambda: emu.connections(dana.app_id) == emu.connections(eli.app_id) == 1)
        posted = await AsyncWebClient(token=dana.bot_token, base_url=emu.api_url).chat_postMessage(
            channel=conv.id, text="deploy on friday?"
        )
        await emu.react(alice.id, conv.id, posted["ts"], ":octagonal_sign:")
        # a later message reaching both apps, every envelope acked (so recorded): the
        # reaction had its chance to reach eli too
        marker = await emu.post_as_user(alice.id, conv.id, "after the reaction")

        def settled(app: App, got: list[SocketModeRequest]) -> bool:
            s = emu.stats(app.app_id)
            return s.acked == s.delivered and any(x.payload["event"].get("ts") == marker for x in got)

        await emu.wait_for(lambda: settled(dana, got_dana) and settled(eli, got_eli))
        reactions = [x.payload for x in got_dana if x.payload["event"]["type"] == "reaction_added"]
        assert len(reactions) == 1
        p = reactions[0]
        assert p["type"] == "event_callback" and p["api_app_id"] == dana.app_id
        assert p["event"] == {
            "type": "reaction_added",
            "user": alice.id,
            "reaction": "octagonal_sign",
            "item": {"type": "message", "channel": conv.id, "ts": posted["ts"]},
            "item_user": dana.bot_user_id,
            "event_ts": p["event"]["event_ts"],
        }
        assert float(p["event"]["event_ts"]) > float(posted["ts"])
        assert [x.payload["event"]["type"] for x in got_eli] == ["message", "message"]
    assert emu.conversation_messages(conv.id)[0]["reactions"] == [
        {"name": "octagonal_sign", "users": [alice.id], "count": 1}
    ]
