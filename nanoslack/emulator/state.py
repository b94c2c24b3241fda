"""The workspace model: team, users, apps, conversations, messages."""

from __future__ import annotations

import itertools
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from nanoslack.slack_app import BOT_EVENTS, BOT_SCOPES

JSON = dict[str, Any]

# The bot events and scopes an app has unless it is made with others: the fleet's manifest's
# (nanoslack/slack_app.py, the one list; manifests/fleet-bot.json is rendered from it).
DEFAULT_EVENTS: frozenset[str] = frozenset(BOT_EVENTS)
DEFAULT_SCOPES: frozenset[str] = frozenset(BOT_SCOPES)
# Without it Slack leaves message metadata out of events and of history/replies.
METADATA_SCOPE = "metadata.message:read"
# What Slack's x-oauth-scopes header says for an app-level token.
APP_TOKEN_SCOPES = ("connections:write",)
MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
KINDS = ("im", "mpim", "channel", "group")


class EmulatorError(Exception):
    """A Slack error (``error`` plus extra response fields): the Web API answers it as
    ``ok: false``, the HTTP driver as a 400, the Python drivers raise it."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


@dataclass
class User:
    id: str
    name: str
    real_name: str = ""
    is_bot: bool = False
    app_id: str | None = None
    bot_id: str | None = None


@dataclass
class App:
    name: str
    app_id: str
    bot_id: str
    bot_user_id: str
    bot_token: str
    app_token: str
    events: set[str] = field(default_factory=lambda: set(DEFAULT_EVENTS))
    scopes: set[str] = field(default_factory=lambda: set(DEFAULT_SCOPES))
    verification_token: str = ""
    updated: int = 0


@dataclass
class Conversation:
    id: str
    kind: str
    members: list[str]
    name: str | None = None
    created: int = 0


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    app_name: str | None
    status: int
    error: str | None


@dataclass
class Stats:
    delivered: int = 0
    acked: int = 0
    redelivered: int = 0
    queued: int = 0
    connections: int = 0


@dataclass
class Channel:
    """Storage for one conversation: messages by ts plus thread replies."""

    conv: Conversation
    top: list[JSON] = field(default_factory=list)
    by_ts: dict[str, JSON] = field(default_factory=dict)
    replies: dict[str, list[JSON]] = field(default_factory=dict)
    member_set: set[str] = field(default_factory=set)


class Workspace:
    """Pure state. Not thread-safe: mutate only on the emulator's event loop."""

    def __init__(self, team_id: str, team_name: str, mpim_prefix: str) -> None:
        self.team_id = team_id
        self.team_name = team_name
        self.domain = re.sub(r"[^a-z0-9-]", "-", team_name.lower())
        self.mpim_prefix = mpim_prefix
        self.users: dict[str, User] = {}
        self.users_by_name: dict[str, User] = {}
        self.apps: dict[str, App] = {}  # by app_id
        self.apps_by_bot_user: dict[str, App] = {}
        self.apps_by_bot_id: dict[str, App] = {}
        self.bot_tokens: dict[str, App] = {}
        self.app_tokens: dict[str, App] = {}
        # Tokens Slack answers ``token_revoked`` for (an uninstalled app, a revoked token).
        self.revoked: set[str] = set()
        self.channels: dict[str, Channel] = {}
        self.by_memberset: dict[tuple[str, frozenset[str]], str] = {}
        self._ids: set[str] = set()
        self._last_ts_us = 0
        self._event_counter = itertools.count(1)

    # ---- ids -------------------------------------------------------------------------------
    def new_id(self, prefix: str) -> str:
        while True:
            cand = prefix + "0" + secrets.token_hex(5).upper()
            if cand not in self._ids:
                self._ids.add(cand)
                return cand

    def reserve_id(self, ident: str) -> str:
        if ident in self._ids:
            raise ValueError(f"duplicate id {ident}")
        self._ids.add(ident)
        return ident

    def next_ts(self) -> str:
        now = int(time.time() * 1_000_000)
        if now <= self._last_ts_us:
            now = self._last_ts_us + 1
        self._last_ts_us = now
        return f"{now // 1_000_000}.{now % 1_000_000:06d}"

    def next_event_id(self) -> str:
        return f"Ev0{next(self._event_counter):08d}{secrets.token_hex(2).upper()}"

    # ---- entities --------------------------------------------------------------------------
    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User:
        if name in self.users_by_name:
            raise ValueError(f"user name {name!r} already exists")
        uid = self.reserve_id(id) if id else self.new_id("U")
        user = User(id=uid, name=name, real_name=real_name if real_name is not None else name)
        self.users[uid] = user
        self.users_by_name[name] = user
        return user

    def add_app(
        self,
        name: str,
        *,
        app_id: str | None = None,
        bot_id: str | None = None,
        bot_user_id: str | None = None,
        bot_token: str | None = None,
        app_token: str | None = None,
        events: list[str] | None = None,
        scopes: list[str] | None = None,
    ) -> App:
        """A bot app; ``scopes`` are its bot token's (default: the fleet manifest's)."""
        if name in self.users_by_name:
            raise ValueError(f"name {name!r} already exists")
        app = App(
            name=name,
            app_id=self.reserve_id(app_id) if app_id else self.new_id("A"),
            bot_id=self.reserve_id(bot_id) if bot_id else self.new_id("B"),
            bot_user_id=self.reserve_id(bot_user_id) if bot_user_id else self.new_id("U"),
            bot_token=bot_token or f"xoxb-emu-{name}-{secrets.token_hex(12)}",
            app_token=app_token or f"xapp-emu-{name}-{secrets.token_hex(12)}",
            events=set(events) if events is not None else set(DEFAULT_EVENTS),
            scopes=set(scopes) if scopes is not None else set(DEFAULT_SCOPES),
            verification_token=secrets.token_hex(12),
            updated=int(time.time()),
        )
        if app.bot_token in self.bot_tokens or app.app_token in self.app_tokens:
            raise ValueError("duplicate token")
        user = User(
            id=app.bot_user_id, name=name, real_name=name, is_bot=True, app_id=app.app_id, bot_id=app.bot_id
        )
        self.users[user.id] = user
        self.users_by_name[name] = user
        self.apps[app.app_id] = app
        self.apps_by_bot_user[app.bot_user_id] = app
        self.apps_by_bot_id[app.bot_id] = app
        self.bot_tokens[app.bot_token] = app
        self.app_tokens[app.app_token] = app
        return app

    def resolve_user(self, ref: str) -> User:
        if ref in self.users:
            return self.users[ref]
        if ref in self.users_by_name:
            return self.users_by_name[ref]
        raise KeyError(ref)

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        ids: list[str] = []
        for m in members:
            uid = self.resolve_user(m).id
            if uid not in ids:
                ids.append(uid)
        if kind == "im" and len(ids) != 2:
            raise ValueError("an IM has exactly two members")
        if kind == "mpim" and len(ids) < 3:
            raise ValueError("an MPIM has at least three members")
        key = (kind, frozenset(ids))
        if kind in ("im", "mpim") and key in self.by_memberset and id is None:
            return self.channels[self.by_memberset[key]].conv
        prefix = {"im": "D", "mpim": self.mpim_prefix, "channel": "C", "group": "C"}[kind]
        cid = self.reserve_id(id) if id else self.new_id(prefix)
        if kind == "mpim" and name is None:
            name = "mpdm-" + "--".join(self.users[u].name for u in ids) + "-1"
        conv = Conversation(id=cid, kind=kind, members=ids, name=name, created=int(time.time()))
        self.channels[cid] = Channel(conv=conv, member_set=set(ids))
        if kind in ("im", "mpim"):
            self.by_memberset[key] = cid
        return conv


def parse_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if v is None:
        return False
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def rich_text_blocks(text: str) -> list[JSON]:
    """Blocks as Slack's client builds them for a typed message, with user elements for mentions."""
    elements: list[JSON] = []
    pos = 0
    for m in MENTION_RE.finditer(text):
        if m.start() > pos:
            elements.append({"type": "text", "text": text[pos : m.start()]})
        elements.append({"type": "user", "user_id": m.group(1)})
        pos = m.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    return [
        {
            "type": "rich_text",
            "block_id": secrets.token_hex(3),
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]
