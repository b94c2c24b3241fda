"""What an app's scopes and tokens change (docs/operations.md): the ``x-oauth-scopes`` header,
revoked tokens, and metadata withheld from an app without ``metadata.message:read``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from nanoslack.emulator import ThreadedEmulator
from nanoslack.emulator.state import DEFAULT_SCOPES

META = {"event_type": "nanoslack_room_intro", "event_payload": {"opened_by": "dana"}}


def _scopes(resp: Any) -> set[str]:
    headers = {k.lower(): v for k, v in resp.headers.items()}
    return set(headers["x-oauth-scopes"].split(","))


def test_every_answer_says_the_tokens_scopes_in_x_oauth_scopes(temu: ThreadedEmulator) -> None:
    full = temu.add_app("dana")
    old = temu.add_app("eli", scopes=["chat:write", "users:read"])
    assert _scopes(WebClient(token=full.bot_token, base_url=temu.api_url).auth_test()) == set(DEFAULT_SCOPES)
    assert _scopes(WebClient(token=old.bot_token, base_url=temu.api_url).auth_test()) == {
        "chat:write",
        "users:read",
    }
    app_level = WebClient(token=full.app_token, base_url=temu.api_url).apps_connections_open(
        app_token=full.app_token
    )
    assert _scopes(app_level) == {"connections:write"}


def test_a_revoked_token_is_answered_token_revoked(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    temu.revoke_token(dana.bot_token)
    with pytest.raises(SlackApiError) as caught:
        WebClient(token=dana.bot_token, base_url=temu.api_url).auth_test()
    assert caught.value.response["error"] == "token_revoked"
    temu.revoke_token(dana.app_token)
    with pytest.raises(SlackApiError) as caught:
        WebClient(token=dana.app_token, base_url=temu.api_url).apps_connections_open(app_token=dana.app_token)
    assert caught.value.response["error"] == "token_revoked"


def test_clear_faults_forgets_planned_failures(temu: ThreadedEmulator) -> None:
    dana = temu.add_app("dana")
    temu.fail_next("auth.test", n=100, error="internal_error")
    temu.clear_faults("auth.test")
    assert WebClient(token=dana.bot_token, base_url=temu.api_url).auth_test()["ok"]


def test_metadata_is_withheld_from_an_app_without_metadata_message_read(temu: ThreadedEmulator) -> None:
    alice = temu.add_user("alice")
    dana = temu.add_app("dana")
    eli = temu.add_app("eli", scopes=sorted(DEFAULT_SCOPES - {"metadata.message:read"}))
    fay = temu.add_app("fay")
    room = temu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id, fay.bot_user_id])
    heard: dict[str, list[SocketModeRequest]] = {"eli": [], "fay": []}
    lock = threading.Lock()
    clients = []
    for app in (eli, fay):

        def on_request(client: SocketModeClient, req: SocketModeRequest, name: str = app.name) -> None:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            with lock:
                heard[name].append(req)

        smc = SocketModeClient(
            app_token=app.app_token, web_client=WebClient(token=app.bot_token, base_url=temu.api_url)
        )
        smc.socket_mode_request_listeners.append(on_request)
        smc.connect()
        clients.append(smc)
    try:
        temu.wait_for(lambda: temu.connections(eli.app_id) == 1 and temu.connections(fay.app_id) == 1)
        posted = WebClient(token=dana.bot_token, base_url=temu.api_url).chat_postMessage(
            channel=room.id, text="the intro", metadata=META
        )
        temu.wait_for(lambda: heard["eli"] and heard["fay"])
        assert "metadata" not in heard["eli"][0].payload["event"]
        assert heard["fay"][0].payload["event"]["metadata"] == META
    finally:
        for smc in clients:
            smc.close()

    for app, sees in ((eli, False), (fay, True)):
        web = WebClient(token=app.bot_token, base_url=temu.api_url)
        [in_history] = web.conversations_history(channel=room.id, include_all_metadata=True)["messages"]
        [in_replies] = web.conversations_replies(channel=room.id, ts=posted["ts"], include_all_metadata=True)[
            "messages"
        ]
        assert ("metadata" in in_history, "metadata" in in_replies) == (sees, sees), app.name


def test_the_http_driver_makes_scoped_apps_revokes_tokens_and_clears_faults(temu: ThreadedEmulator) -> None:
    from nanoslack.emulator import EmulatorClient

    drv = EmulatorClient(temu.base_url)
    old = drv.add_app("dana", scopes=["chat:write"])
    assert old["scopes"] == ["chat:write"]
    web = WebClient(token=old["bot_token"], base_url=temu.api_url)
    assert _scopes(web.auth_test()) == {"chat:write"}
    drv.fail_next("auth.test", n=10, error="internal_error")
    drv.clear_faults()
    assert web.auth_test()["ok"]
    drv.revoke_token(old["bot_token"])
    with pytest.raises(SlackApiError):
        web.auth_test()
