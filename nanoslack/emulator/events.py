"""Event payload shapes and fan-out rules (which app gets which event)."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from .state import MENTION_RE, App, Channel, User, Workspace, rich_text_blocks

JSON = dict[str, Any]

CHANNEL_TYPE = {"im": "im", "mpim": "mpim", "channel": "channel", "group": "group"}
SUBSCRIPTION = {
    "im": "message.im",
    "mpim": "message.mpim",
    "channel": "message.channels",
    "group": "message.groups",
}


def bot_profile(ws: Workspace, app: App) -> JSON:
    return {
        "id": app.bot_id,
        "deleted": False,
        "name": app.name,
        "updated": app.updated,
        "app_id": app.app_id,
        "icons": {"image_36": "", "image_48": "", "image_72": ""},
        "team_id": ws.team_id,
    }


def stored_message(
    ws: Workspace,
    author: User,
    app: App | None,
    ts: str,
    text: str,
    *,
    parent: JSON | None,
    blocks: list[JSON] | None,
    metadata: JSON | None,
    human: bool,
    extra: JSON | None = None,
) -> JSON:
    """A new message as Slack stores it: a human's carries the client's rich-text blocks
    (when it has text), an app's its bot fields; a reply names its thread. ``extra``: more
    fields (a ``file_share`` message's ``subtype`` and ``files``)."""
    msg: JSON = {"user": author.id, "type": "message", "ts": ts}
    if app is not None:
        msg["bot_id"] = app.bot_id
        msg["app_id"] = app.app_id
    msg["text"] = text
    msg["team"] = ws.team_id
    if app is not None:
        msg["bot_profile"] = bot_profile(ws, app)
    if human:
        msg["client_msg_id"] = secrets.token_hex(16)
        if blocks is not None or text:
            msg["blocks"] = blocks if blocks is not None else rich_text_blocks(text)
    elif blocks is not None:
        msg["blocks"] = blocks
    if extra:
        msg.update(extra)
    if parent is not None:
        msg["thread_ts"] = parent["ts"]
        msg["parent_user_id"] = parent["user"]
    if metadata:
        msg["metadata"] = metadata
    return msg


_THREAD_SUMMARY = ("reply_users", "reply_users_count", "latest_reply")


def message_changed_event(ch: Channel, msg: JSON, previous: JSON, ts: str) -> JSON:
    """The hidden ``message_changed`` event for an edit (thread summaries left out)."""
    return {
        "type": "message",
        "subtype": "message_changed",
        "message": {k: v for k, v in msg.items() if k not in _THREAD_SUMMARY},
        "previous_message": {k: v for k, v in previous.items() if k not in _THREAD_SUMMARY},
        "channel": ch.conv.id,
        "hidden": True,
        "ts": ts,
        "event_ts": ts,
        "channel_type": CHANNEL_TYPE[ch.conv.kind],
    }


def message_deleted_event(ch: Channel, previous: JSON, ts: str) -> JSON:
    """The hidden ``message_deleted`` event: ``deleted_ts`` names the message, which
    ``previous_message`` shows as it was; no ``user`` at the top level."""
    return {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "deleted_ts": previous["ts"],
        "channel": ch.conv.id,
        "previous_message": {k: v for k, v in previous.items() if k not in _THREAD_SUMMARY},
        "ts": ts,
        "event_ts": ts,
        "channel_type": CHANNEL_TYPE[ch.conv.kind],
    }


def markdown_blocks(markdown_text: str) -> list[JSON]:
    """What a ``markdown_text`` post keeps: one ``markdown`` block with the text as sent
    (Slack renders it; the emulator does not translate it into other blocks)."""
    return [{"type": "markdown", "text": markdown_text}]


def reaction_added_event(user: User, reaction: str, channel: str, msg: JSON, event_ts: str) -> JSON:
    return {
        "type": "reaction_added",
        "user": user.id,
        "reaction": reaction,
        "item_user": msg.get("user"),
        "item": {"type": "message", "channel": channel, "ts": msg["ts"]},
        "event_ts": event_ts,
    }


def _button(msg: JSON, action_id: str) -> tuple[str, str, Any]:
    """The block id, label and value of the button ``action_id`` in a message's blocks
    (defaults when the message has no such button: clicks on stale messages happen)."""
    block_id, text, value = "emu_block", action_id, None
    for block in msg.get("blocks") or []:
        for el in block.get("elements") or []:
            if isinstance(el, dict) and el.get("action_id") == action_id:
                block_id = block.get("block_id", block_id)
                t = el.get("text")
                text = t.get("text", text) if isinstance(t, dict) else text
                value = el.get("value")
        acc = block.get("accessory")
        if isinstance(acc, dict) and acc.get("action_id") == action_id:
            block_id = block.get("block_id", block_id)
            value = acc.get("value")
    return block_id, text, value


def button_action(surface: JSON, action_id: str, value: str | None, action_ts: str) -> JSON:
    """The action of a click on the button ``action_id`` of a message or view (``value``
    overrides the button's)."""
    block_id, text, found_value = _button(surface, action_id)
    action: JSON = {
        "action_id": action_id,
        "block_id": block_id,
        "text": {"type": "plain_text", "text": text, "emoji": True},
        "type": "button",
        "action_ts": action_ts,
    }
    if value is not None:
        found_value = value
    if found_value is not None:
        action["value"] = found_value
    return action


def feedback_action(msg: JSON, positive: bool, action_ts: str) -> JSON | None:
    """The action of a click on the 👍 (``positive``) or 👎 of the message's feedback buttons
    (a ``feedback_buttons`` element of a ``context_actions`` block); None: it has none."""
    for block in msg.get("blocks") or []:
        if block.get("type") != "context_actions":
            continue
        for el in block.get("elements") or []:
            if isinstance(el, dict) and el.get("type") == "feedback_buttons":
                button = el.get("positive_button" if positive else "negative_button") or {}
                return {
                    "type": "feedback_buttons",
                    "action_id": el.get("action_id", "feedback"),
                    "block_id": block.get("block_id", "emu_block"),
                    "text": button.get("text", {"type": "plain_text", "text": "👍" if positive else "👎"}),
                    "value": button.get("value", ""),
                    "action_ts": action_ts,
                }
    return None


def _actor(ws: Workspace, user: User, app: App) -> JSON:
    """What every ``block_actions`` payload says of who clicked, for which app."""
    return {
        "type": "block_actions",
        "user": {"id": user.id, "username": user.name, "name": user.name, "team_id": ws.team_id},
        "api_app_id": app.app_id,
        "token": app.verification_token,
        "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**12)}.{secrets.token_hex(16)}",
        "team": {"id": ws.team_id, "domain": ws.domain},
        "enterprise": None,
        "is_enterprise_install": False,
    }


def view_actions_payload(ws: Workspace, user: User, app: App, view: JSON, action: JSON) -> JSON:
    """The ``block_actions`` payload of a click in a published Home view."""
    return {
        **_actor(ws, user, app),
        "container": {"type": "view", "view_id": view["id"]},
        "view": dict(view),
        "state": {"values": {}},
        "actions": [action],
    }


def block_actions_payload(
    ws: Workspace,
    user: User,
    app: App,
    ch: Channel,
    msg: JSON,
    action: JSON,
    response_url: str,
) -> JSON:
    """The ``block_actions`` payload of a click (``action``) on ``msg``."""
    return {
        **_actor(ws, user, app),
        "container": {
            "type": "message",
            "message_ts": msg["ts"],
            "channel_id": ch.conv.id,
            "is_ephemeral": False,
        },
        "channel": {"id": ch.conv.id, "name": ch.conv.name or ch.conv.id},
        "message": dict(msg),
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }


def message_event(ws: Workspace, ch: Channel, msg: JSON) -> JSON:
    """The `message` event for a stored message (a shallow copy plus channel fields)."""
    ev = {
        k: v
        for k, v in msg.items()
        if k not in ("reply_count", "reply_users", "reply_users_count", "latest_reply", "reactions")
    }
    ev["channel"] = ch.conv.id
    ev["event_ts"] = msg["ts"]
    ev["channel_type"] = CHANNEL_TYPE[ch.conv.kind]
    return ev


def without_metadata(ev: JSON) -> JSON:
    """The event as an app without ``metadata.message:read`` gets it: no message metadata,
    not even in an edit's ``message``/``previous_message``."""
    out = {k: v for k, v in ev.items() if k != "metadata"}
    for key in ("message", "previous_message"):
        inner = out.get(key)
        if isinstance(inner, dict) and "metadata" in inner:
            out[key] = {k: v for k, v in inner.items() if k != "metadata"}
    return out


def app_mention_event(ev: JSON) -> JSON:
    m = {k: v for k, v in ev.items() if k not in ("channel_type", "subtype")}
    m["type"] = "app_mention"
    return m


def mentioned_user_ids(text: str) -> set[str]:
    return set(MENTION_RE.findall(text or ""))


def callback_json(ws: Workspace, app: App, event_json: str, event_id: str, event_time: int) -> str:
    """The outer `event_callback` for one app, with the (pre-serialized) event spliced in."""
    head = json.dumps({"token": app.verification_token, "team_id": ws.team_id, "api_app_id": app.app_id})
    tail = json.dumps(
        {
            "type": "event_callback",
            "event_id": event_id,
            "event_time": event_time,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": ws.team_id,
                    "user_id": app.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-emu-" + event_id,
        }
    )
    return head[:-1] + ',"event":' + event_json + "," + tail[1:]


def fan_out(
    ws: Workspace,
    ch: Channel,
    ev: JSON,
    poster_app: App | None,
    deliver_own_posts: bool,
    subscription: str | None = None,
) -> list[tuple[App, str, JSON]]:
    """Which member apps get which event for a post: [(app, event_type, event)]."""
    out: list[tuple[App, str, JSON]] = []
    sub = subscription or SUBSCRIPTION[ch.conv.kind]
    mentions = mentioned_user_ids(ev.get("text", "")) if subscription is None else set()
    mention_ev: JSON | None = None
    for uid in ch.conv.members:
        app = ws.apps_by_bot_user.get(uid)
        if app is None:
            continue
        own = poster_app is not None and poster_app.app_id == app.app_id
        if sub in app.events and (deliver_own_posts or not own):
            out.append((app, sub, ev))
        if uid in mentions and not own and ch.conv.kind != "im" and "app_mention" in app.events:
            if mention_ev is None:
                mention_ev = app_mention_event(ev)
            out.append((app, "app_mention", mention_ev))
    return out
