"""A batch's acks go out as WebSocket frames in one write (``socket._write_frames``).

aiohttp has no API to send several frames at once, so the pump builds them on the
connection aiohttp holds (its private ``_writer``). An aiohttp upgrade that moves
that must show here, not as a fleet that silently falls back to one write per ack.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import Emulator
from nanoslack.slack.socket import _ack_frame, _write_frames


async def test_a_batch_of_acks_written_as_frames_in_one_write_acks_every_envelope(emu: Emulator) -> None:
    human = emu.add_user("alice")
    bot = emu.add_app("dana")
    room = emu.create_conversation([human.id, bot.bot_user_id, emu.add_app("eli").bot_user_id], kind="mpim")
    app = AsyncApp(
        client=AsyncWebClient(token=bot.bot_token, base_url=emu.api_url),
        raise_error_for_unhandled_request=False,
    )
    handler = AsyncSocketModeHandler(app, app_token=bot.app_token)
    client = handler.client
    client.socket_mode_request_listeners[:] = []  # nobody acks but the test
    seen: list[str] = []

    async def collect(_client: AsyncBaseSocketModeClient, message: dict[str, Any], _raw: str | None) -> None:
        if message.get("type") == "events_api":
            seen.append(str(message["envelope_id"]))

    client.message_listeners.append(collect)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        for i in range(3):
            await emu.post_as_user(human.id, room.id, f"hello {i}")
        await emu.wait_for(lambda: len(seen) == 3, timeout=10)
        assert emu.stats(bot.app_id).acked == 0

        assert _write_frames(client, [_ack_frame(e).encode() for e in seen]), "fell back to one by one"

        await emu.wait_for(lambda: emu.stats(bot.app_id).acked == 3, timeout=10)
        assert emu.stats(bot.app_id).redelivered == 0
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


def test_an_envelope_id_that_needs_escaping_still_makes_valid_json() -> None:
    assert _ack_frame("1b4e28ba-2fa1-11d2-883f-0016d3cca427") == (
        '{"envelope_id":"1b4e28ba-2fa1-11d2-883f-0016d3cca427"}'
    )
    assert _ack_frame('a"b\\c') == '{"envelope_id": "a\\"b\\\\c"}'
