"""slack-bolt AsyncApp + AsyncSocketModeHandler against the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import App, Emulator


@asynccontextmanager
async def bolt_app(
    emu: Emulator, app: App, seen: list[dict[str, Any]], mentions: list[dict[str, Any]] | None = None
) -> AsyncIterator[AsyncApp]:
    bolt = AsyncApp(token=app.bot_token, client=AsyncWebClient(token=app.bot_token, base_url=emu.api_url))

    @bolt.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(event)

    @bolt.event("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        if mentions is not None:
            mentions.append(event)

    handler = AsyncSocketModeHandler(bolt, app_token=app.app_token, ping_interval=0.5)
    await handler.connect_async()
    try:
        await emu.wait_for(lambda: emu.connections(app.app_id) >= 1)
        yield bolt
    finally:
        await handler.close_async()


async def _post_and_wait(
    emu: Emulator, user: str, channel: str, seen: list[dict[str, Any]], text: str
) -> None:
    ts = await emu.post_as_user(user, channel, text)
    await emu.wait_for(
        lambda: any(e.get("ts") == ts for e in seen), timeout=8, message=f"bolt never saw {text!r}"
    )


async def _check_reconnect(emu: Emulator, fault: Callable[[str], Awaitable[int]]) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    conv = emu.create_conversation([alice.id, dana.bot_user_id], kind="im")
    seen: list[dict[str, Any]] = []
    async with bolt_app(emu, dana, seen):
        await _post_and_wait(emu, alice.id, conv.id, seen, "before")
        opens = sum(1 for c in emu.api_calls if c.method == "apps.connections.open")
        assert await fault(dana.app_id) >= 1
        await emu.wait_for(
            lambda: (
                sum(1 for c in emu.api_calls if c.method == "apps.connections.open") > opens
                and emu.connections(dana.app_id) >= 1
            ),
            timeout=10,
            message="bolt did not reconnect",
        )
        await _post_and_wait(emu, alice.id, conv.id, seen, "after")
        texts = [e["text"] for e in seen]
        assert texts.count("before") == 1 and "after" in texts


async def test_bolt_reconnects_after_refresh_requested_and_still_receives(emu: Emulator) -> None:
    await _check_reconnect(emu, lambda app_id: emu.send_disconnect(app_id, "refresh_requested"))


async def test_bolt_reconnects_after_dropped_socket_and_still_receives(emu: Emulator) -> None:
    await _check_reconnect(emu, emu.drop_sockets)


async def test_two_bolt_apps_see_each_others_posts_but_never_their_own(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    seen_d: list[dict[str, Any]] = []
    seen_e: list[dict[str, Any]] = []
    async with bolt_app(emu, dana, seen_d), bolt_app(emu, eli, seen_e):
        wd = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
        we = AsyncWebClient(token=eli.bot_token, base_url=emu.api_url)
        rd = await wd.chat_postMessage(channel=conv.id, text="from dana")
        re_ = await we.chat_postMessage(channel=conv.id, text="from eli")
        await emu.wait_for(
            lambda: any(e["ts"] == re_["ts"] for e in seen_d) and any(e["ts"] == rd["ts"] for e in seen_e)
        )
        # the emulator delivers each app its own post (as Slack does): wait until those are acked
        await emu.wait_for(lambda: emu.stats().acked >= 4, timeout=5)
        assert [e["text"] for e in seen_d] == ["from eli"]
        assert [e["text"] for e in seen_e] == ["from dana"]
        ev = seen_d[0]
        assert ev["bot_id"] == eli.bot_id and ev["app_id"] == eli.app_id and ev["user"] == eli.bot_user_id
        assert "subtype" not in ev and ev["bot_profile"]["app_id"] == eli.app_id
        assert ev["channel_type"] == "mpim"


@pytest.mark.emulator(deliver_own_posts=False)
async def test_deliver_own_posts_switch_off(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    web = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
    await web.chat_postMessage(channel=conv.id, text="x")
    assert emu.stats(dana.app_id).queued == 0 and emu.stats(eli.app_id).queued == 1


async def test_app_mention_twin_for_a_bot_written_mention(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    seen: list[dict[str, Any]] = []
    mentions: list[dict[str, Any]] = []
    async with bolt_app(emu, eli, seen, mentions):
        wd = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
        r = await wd.chat_postMessage(channel=conv.id, text=f"<@{eli.bot_user_id}> your turn")
        # self-mention by dana: no twin for dana
        await wd.chat_postMessage(channel=conv.id, text=f"note to <@{dana.bot_user_id}>")
        await emu.wait_for(lambda: len(mentions) == 1 and len(seen) == 2)
        m = mentions[0]
        assert m["type"] == "app_mention" and m["ts"] == r["ts"] and m["channel"] == conv.id
        assert "channel_type" not in m and m["bot_id"] == dana.bot_id
        assert seen[0]["ts"] == r["ts"] and seen[0]["channel_type"] == "mpim"
    assert emu.stats(dana.app_id).queued == 2  # dana's own two posts, no mention twin


async def test_message_changed_event_on_chat_update(emu: Emulator) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    eli = emu.add_app("eli")
    conv = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
    seen: list[dict[str, Any]] = []
    async with bolt_app(emu, eli, seen):
        wd = AsyncWebClient(token=dana.bot_token, base_url=emu.api_url)
        r = await wd.chat_postMessage(channel=conv.id, text="v1")
        await wd.chat_update(channel=conv.id, ts=r["ts"], text="v2")
        await emu.wait_for(lambda: any(e.get("subtype") == "message_changed" for e in seen))
        ch = next(e for e in seen if e.get("subtype") == "message_changed")
        assert ch["hidden"] is True and ch["message"]["text"] == "v2"
        assert ch["previous_message"]["text"] == "v1" and ch["message"]["ts"] == r["ts"]
