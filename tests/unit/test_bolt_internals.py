"""The bolt internals the edge relies on still exist and still work as we use them.

``nanoslack/slack/socket.py`` dispatches envelopes through bolt's internal module
``slack_bolt.adapter.socket_mode.async_internals``, and ``slack/instance.py`` seeds
the ``auth.test`` cache of bolt's authorization middleware, found in the private
``AsyncApp._async_middleware_list``. None of this is bolt's public API: a bolt
upgrade that renames or reshapes it must fail here, with a message that says
which part moved, not as a slow fleet or an envelope dropped in production.
"""

from __future__ import annotations

import inspect
from typing import Any

from slack_bolt.adapter.socket_mode import async_internals
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.emulator import Emulator


def _app(emu: Emulator, token: str) -> AsyncApp:
    # Built as nanoslack.slack.connection builds it.
    client = AsyncWebClient(token=token, base_url=emu.api_url)
    return AsyncApp(client=client, raise_error_for_unhandled_request=False)


def _authorization(app: AsyncApp) -> AsyncSingleTeamAuthorization:
    middlewares = getattr(app, "_async_middleware_list", None)
    assert isinstance(middlewares, list), "bolt no longer keeps AsyncApp._async_middleware_list"
    found = [m for m in middlewares if isinstance(m, AsyncSingleTeamAuthorization)]
    assert found, "AsyncSingleTeamAuthorization is no longer in AsyncApp._async_middleware_list"
    assert hasattr(found[0], "auth_test_result"), "AsyncSingleTeamAuthorization lost auth_test_result"
    return found[0]


def _message_request(app_id: str, channel: str, user: str) -> SocketModeRequest:
    payload: dict[str, Any] = {
        "type": "event_callback",
        "team_id": "T0EMULATOR",
        "api_app_id": app_id,
        "event_id": "Ev0PIN",
        "event_time": 1,
        "event": {"type": "message", "channel": channel, "user": user, "text": "hi", "ts": "1.000001"},
    }
    return SocketModeRequest(type="events_api", envelope_id="env-pin", payload=payload)


def test_socket_mode_internals_exist_with_the_arguments_we_pass() -> None:
    for name in ("run_async_bolt_app", "send_async_response"):
        fn = getattr(async_internals, name, None)
        assert fn is not None, f"slack_bolt.adapter.socket_mode.async_internals.{name} is gone"
        assert inspect.iscoroutinefunction(fn), f"async_internals.{name} is no longer a coroutine function"
    # socket.py: run_async_bolt_app(app, req); send_async_response(client, req, resp, start)
    inspect.signature(async_internals.run_async_bolt_app).bind("app", "req")
    inspect.signature(async_internals.send_async_response).bind("client", "req", "resp", 0.0)


async def test_the_authorization_cache_we_seed_spares_bolt_its_own_auth_test(emu: Emulator) -> None:
    human = emu.add_user("alice")
    bot = emu.add_app("dana")
    room = emu.create_conversation([human.id, bot.bot_user_id, emu.add_app("eli").bot_user_id], kind="mpim")
    app = _app(emu, bot.bot_token)
    seen: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(str(event["ts"]))

    _authorization(app).auth_test_result = await app.client.auth_test()
    calls_before = len([c for c in emu.api_calls if c.method == "auth.test"])

    resp = await async_internals.run_async_bolt_app(app, _message_request(bot.app_id, room.id, human.id))

    assert isinstance(resp, BoltResponse) and resp.status == 200, resp
    await emu.wait_for(lambda: seen == ["1.000001"], timeout=5)  # bolt runs listeners after the ack
    calls_after = len([c for c in emu.api_calls if c.method == "auth.test"])
    assert calls_after == calls_before, "bolt called auth.test although its cache was seeded"


async def test_the_socket_client_keeps_the_listener_lists_we_replace(emu: Emulator) -> None:
    bot = emu.add_app("dana")
    handler = AsyncSocketModeHandler(_app(emu, bot.bot_token), app_token=bot.app_token)
    client = handler.client
    # socket.py replaces bolt's request listener and appends a raw-message listener.
    assert isinstance(client.socket_mode_request_listeners, list)
    assert isinstance(client.message_listeners, list)
    assert client.socket_mode_request_listeners, "bolt no longer installs its own request listener"
    await handler.close_async()
