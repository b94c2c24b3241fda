"""Event payload shapes and fan-out rules (which app gets which event)."""

from __future__ import annotations

import json
import time
from typing import Any

from .state import MENTION_RE, App, Channel, Workspace

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


def now_s() -> int:
    return int(time.time())
