"""Socket Mode plumbing around bolt: every envelope gets an answer.

bolt's own Socket Mode handler acks only when dispatch returns 200. A payload
that crashes bolt before our intake middleware runs (``"event": -1``, a user id
that is a number) would then never be acked, and Slack would retry it until it
switched our subscriptions off. So the envelope handler is ours:

- 200 from dispatch → ack (the normal path; the intake acks after the inbox write);
- ``RETRY_STATUS`` from dispatch → no ack on purpose: our inbox could not take
  the event, Slack's retry will bring it back;
- anything else, or an exception → ack and log the drop.

Envelopes slack-sdk cannot even turn into a request (no payload, no type) are
acked by a raw message listener.
"""

from __future__ import annotations

import json
import time
from typing import Any

from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from nanoslack.logs import get_logger

log = get_logger(__name__)

RETRY_STATUS = 503


def install_envelope_handler(client: AsyncBaseSocketModeClient, app: AsyncApp, instance: str) -> None:
    async def handle(client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        try:
            resp = await run_async_bolt_app(app, req)
        except Exception as exc:
            await _ack_dropped(client, req.envelope_id, instance, f"dispatch failed: {type(exc).__name__}")
            return
        if resp.status == 200:
            await send_async_response(client, req, resp, start)
        elif resp.status != RETRY_STATUS:
            await _ack_dropped(
                client, req.envelope_id, instance, f"bolt could not process it (status {resp.status})"
            )

    async def ack_unusable(
        client: AsyncBaseSocketModeClient, message: dict[str, Any], _raw: str | None
    ) -> None:
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if isinstance(envelope_id, str) and not _is_request(message):
            await _ack_dropped(client, envelope_id, instance, "envelope without a usable type or payload")

    client.socket_mode_request_listeners[:] = [handle]  # replaces bolt's own handler
    client.message_listeners.append(ack_unusable)


def _is_request(message: dict[str, Any]) -> bool:
    """Whether slack-sdk can build a ``SocketModeRequest`` (its constructor raises
    on a payload that is neither an object nor a JSON string of one)."""
    if not all(key in message for key in ("type", "envelope_id", "payload")):
        return False
    payload = message["payload"]
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return False
    return isinstance(payload, dict)


async def _ack_dropped(
    client: AsyncBaseSocketModeClient, envelope_id: str, instance: str, reason: str
) -> None:
    log.info("envelope dropped", instance=instance, envelope_id=envelope_id, reason=reason)
    await client.send_socket_mode_response(SocketModeResponse(envelope_id=envelope_id))
