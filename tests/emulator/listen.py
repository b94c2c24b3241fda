"""A real slack-sdk Socket Mode client that acks and keeps what an app is sent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from slack_sdk import WebClient
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.client import BaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from nanoslack.emulator import App, ThreadedEmulator


@contextmanager
def listening(temu: ThreadedEmulator, app: App) -> Iterator[list[dict[str, Any]]]:
    """The payloads ``app`` is sent while the block runs: an event's ``event``, an
    interaction's whole payload."""
    got: list[dict[str, Any]] = []
    sm = SocketModeClient(app_token=app.app_token, web_client=WebClient(token="x", base_url=temu.api_url))

    def on_request(client: BaseSocketModeClient, req: SocketModeRequest) -> None:
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        got.append(req.payload["event"] if req.type == "events_api" else req.payload)

    sm.socket_mode_request_listeners.append(on_request)
    sm.connect()
    try:
        temu.wait_for(lambda: temu.connections(app.app_id) >= 1, timeout=5)
        yield got
    finally:
        sm.close()
