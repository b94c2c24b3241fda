"""Web API handlers: `/api/<method>`: Slack's argument checks and response shapes over the engine."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .blockkit import checked_blocks
from .engine import NON_MARKETPLACE_LIMIT, Engine
from .events import CHANNEL_TYPE, bot_profile, markdown_blocks
from .files import READ_SCOPE, WRITE_SCOPE
from .state import APP_TOKEN_SCOPES, METADATA_SCOPE, ApiCall, App, Channel, EmulatorError, User, parse_bool
from .surface import (
    ASSISTANT_SCOPE,
    SESSION_STATUSES,
    SESSION_TITLE_LIMIT,
    VIEW_SIZE_LIMIT,
    checked_chunks,
    checked_prompts,
    checked_text,
    chunk_text,
)

log = logging.getLogger("nanoslack.emulator.webapi")
JSON = dict[str, Any]


class Ctx:
    """One Web API call: the engine, the call's parameters and the calling app."""

    def __init__(self, engine: Engine, params: JSON, app: App | None, app_level: bool) -> None:
        self.engine = engine
        self.params = params
        self.app = app
        self.app_level = app_level

    @property
    def bot(self) -> App:
        assert self.app is not None
        return self.app

    @property
    def bot_user(self) -> User:
        return self.engine.ws.users[self.bot.bot_user_id]

    def req(self, name: str) -> str:
        v = self.params.get(name)
        if v is None or v == "":
            raise EmulatorError("invalid_arguments" if name not in ("channel",) else "channel_not_found")
        return str(v)

    def opt(self, name: str) -> str | None:
        v = self.params.get(name)
        return None if v is None or v == "" else str(v)

    def flag(self, name: str) -> bool:
        return parse_bool(self.params.get(name))

    def metadata_flag(self) -> bool:
        """``include_all_metadata``, honoured only for an app that may read metadata."""
        return self.flag("include_all_metadata") and METADATA_SCOPE in self.bot.scopes

    def jsonish(self, name: str) -> Any:
        v = self.params.get(name)
        if isinstance(v, str):
            if not v:
                return None
            try:
                return json.loads(v)
            except ValueError as e:
                raise EmulatorError("invalid_arguments") from e
        return v

    def channel(self, name: str = "channel") -> Channel:
        cid = self.params.get(name)
        if not cid:
            raise EmulatorError("channel_not_found")
        ch = self.engine.ws.channels.get(str(cid))
        if ch is None:
            raise EmulatorError("channel_not_found")
        return ch

    def member_channel(self, name: str = "channel") -> Channel:
        ch = self.channel(name)
        if self.bot.bot_user_id not in ch.member_set:
            if ch.conv.kind in ("im", "mpim", "group"):
                raise EmulatorError("channel_not_found")
            raise EmulatorError("not_in_channel")
        return ch


Handler = Callable[[Ctx], Awaitable[JSON]]
HANDLERS: dict[str, Handler] = {}
APP_LEVEL_METHODS = {"apps.connections.open"}


def api(name: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn

    return deco


def _json(body: JSON, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(body), status=status, content_type="application/json", headers=headers
    )


async def read_params(request: web.Request) -> JSON:
    params: JSON = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        ctype = request.content_type
        if ctype == "application/json":
            try:
                body = await request.json()
            except ValueError:
                body = None
            if isinstance(body, dict):
                params.update(body)
        elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for k, v in form.items():
                params[k] = v if isinstance(v, str) else str(v)
        else:
            raw = await request.text()
            if raw.strip().startswith("{"):
                try:
                    body = json.loads(raw)
                    if isinstance(body, dict):
                        params.update(body)
                except ValueError:
                    pass
    return params


# ``fail_next(method, error=ACCEPTED_THEN_500)``: the call is carried out, then answered
# with HTTP 500 (as when Slack's edge fails after the post landed).
ACCEPTED_THEN_500 = "accepted_then_500"


async def handle(engine: Engine, request: web.Request) -> web.StreamResponse:
    method = request.match_info["method"]
    params = await read_params(request)
    token = params.pop("token", None)
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    app: App | None = None
    status, error = 200, None
    body: JSON
    headers: dict[str, str] | None = None
    try:
        handler = HANDLERS.get(method)
        if handler is None:
            raise EmulatorError("unknown_method")
        if not token:
            raise EmulatorError("not_authed")
        app_level = False
        app = engine.ws.bot_tokens.get(str(token))
        if app is None:
            app = engine.ws.app_tokens.get(str(token))
            if app is None:
                raise EmulatorError("invalid_auth")
            app_level = True
        if str(token) in engine.ws.revoked:
            raise EmulatorError("token_revoked")
        # As Slack: every answer to an authenticated call says what the token may do.
        scopes = APP_TOKEN_SCOPES if app_level else sorted(app.scopes)
        headers = {"x-oauth-scopes": ",".join(scopes)}
        if app_level != (method in APP_LEVEL_METHODS):
            raise EmulatorError("not_allowed_token_type")
        wait = engine.read_rate_limit(method, app.app_id)
        if wait is not None:
            status, headers = 429, {"Retry-After": str(wait)}
            raise EmulatorError("ratelimited")
        fault = engine.take_fault(method, app.app_id)
        if fault is not None and fault[0] != ACCEPTED_THEN_500:
            err, retry_after = fault
            if err == "ratelimited":
                status = 429
                headers = {**(headers or {}), "Retry-After": str(int(retry_after))}
            raise EmulatorError(err)
        body = await handler(Ctx(engine, params, app, app_level))
        body = {"ok": True, **body}
        if fault is not None:
            # Slack's worst answer: the call took effect, the client sees a 5xx.
            status, body = 500, {"ok": False, "error": "fatal_error"}
            error = "fatal_error"
    except EmulatorError as e:
        error = e.error
        body = {"ok": False, "error": e.error, **e.extra}
    except Exception:
        log.exception("internal error in %s", method)
        error = "internal_error"
        body = {"ok": False, "error": "internal_error"}
    engine.record_call(
        ApiCall(method=method, params=params, app_name=app.name if app else None, status=status, error=error)
    )
    return _json(body, status=status, headers=headers)


# ---- object shapes ---------------------------------------------------------------------------


def user_obj(engine: Engine, u: User) -> JSON:
    w = engine.ws
    profile: JSON = {
        "real_name": u.real_name,
        "display_name": u.name,
        "real_name_normalized": u.real_name,
        "display_name_normalized": u.name,
        "team": w.team_id,
    }
    if u.is_bot:
        profile["bot_id"] = u.bot_id
        profile["api_app_id"] = u.app_id
        profile["always_active"] = True
    return {
        "id": u.id,
        "team_id": w.team_id,
        "name": u.name,
        "deleted": False,
        "real_name": u.real_name,
        "is_bot": u.is_bot,
        "is_app_user": False,
        "is_admin": False,
        "is_owner": False,
        "tz": "UTC",
        "updated": 0,
        "profile": profile,
    }


def conv_obj(engine: Engine, ch: Channel, viewer: str | None) -> JSON:
    c = ch.conv
    kind = c.kind
    o: JSON = {
        "id": c.id,
        "created": c.created,
        "is_im": kind == "im",
        "is_mpim": kind == "mpim",
        "is_channel": kind == "channel",
        "is_group": kind == "group",
        "is_private": kind != "channel",
        "is_archived": False,
        "is_general": False,
        "is_shared": False,
        "is_ext_shared": False,
        "is_org_shared": False,
        "context_team_id": engine.ws.team_id,
        "is_member": viewer in ch.member_set if viewer else False,
    }
    if kind == "im":
        other = [m for m in c.members if m != viewer]
        o["user"] = other[0] if other else c.members[0]
        o["is_open"] = True
    else:
        o["name"] = c.name or c.id
        o["name_normalized"] = o["name"]
        o["num_members"] = len(c.members)
        o["creator"] = c.members[0] if c.members else ""
    if ch.top:
        o["last_read"] = ch.top[-1]["ts"]
    return o


def strip_meta(msg: JSON, include_meta: bool) -> JSON:
    d = dict(msg)
    if not include_meta:
        d.pop("metadata", None)
    return d


def _page(items: list[JSON], params: Ctx, default_limit: int = 100) -> tuple[list[JSON], str]:
    try:
        limit = int(params.opt("limit") or default_limit)
    except ValueError as e:
        raise EmulatorError("invalid_limit") from e
    limit = max(1, min(limit, NON_MARKETPLACE_LIMIT if params.engine.non_marketplace else 1000))
    cursor = params.opt("cursor")
    start = 0
    if cursor:
        try:
            start = int(cursor.removeprefix("emu:"))
        except ValueError as e:
            raise EmulatorError("invalid_cursor") from e
    page = items[start : start + limit]
    nxt = f"emu:{start + limit}" if start + limit < len(items) else ""
    return page, nxt


# ---- methods ---------------------------------------------------------------------------------


@api("auth.test")
async def auth_test(c: Ctx) -> JSON:
    w = c.engine.ws
    a = c.bot
    return {
        "url": f"https://{w.domain}.slack.com/",
        "team": w.team_name,
        "user": a.name,
        "team_id": w.team_id,
        "user_id": a.bot_user_id,
        "bot_id": a.bot_id,
        "is_enterprise_install": False,
    }


@api("apps.connections.open")
async def connections_open(c: Ctx) -> JSON:
    a = c.bot
    ticket = c.engine.hub.new_ticket(a.app_id)
    return {"url": f"ws://127.0.0.1:{c.engine.port}/link/?ticket={ticket}&app_id={a.app_id}"}


@api("conversations.open")
async def conversations_open(c: Ctx) -> JSON:
    w = c.engine.ws
    me = c.bot.bot_user_id
    chan = c.opt("channel")
    if chan:
        ch = c.member_channel("channel")
        return {"no_op": True, "already_open": True, "channel": conv_obj(c.engine, ch, me)}
    users_raw = c.opt("users")
    if not users_raw:
        raise EmulatorError("users_list_not_supplied")
    ids: list[str] = []
    for u in users_raw.split(","):
        u = u.strip()
        if not u or u == me or u in ids:
            continue
        if u not in w.users:
            raise EmulatorError("user_not_found")
        ids.append(u)
    if not ids:
        raise EmulatorError("cannot_dm_bot")
    if len(ids) > 8:
        raise EmulatorError("too_many_users")
    if len(ids) == 1:
        if w.users[ids[0]].is_bot:
            raise EmulatorError("cannot_dm_bot")
        kind, members = "im", [me, ids[0]]
    else:
        kind, members = "mpim", [me, *ids]
    key = (kind, frozenset(members))
    existing = w.by_memberset.get(key)
    if existing is not None:
        ch = w.channels[existing]
        already = True
    else:
        conv = w.create_conversation(members, kind=kind)
        ch = w.channels[conv.id]
        already = False
    out: JSON = {
        "channel": conv_obj(c.engine, ch, me) if c.flag("return_im") or kind == "mpim" else {"id": ch.conv.id}
    }
    if already:
        out["no_op"] = True
        out["already_open"] = True
    return out


@api("conversations.info")
async def conversations_info(c: Ctx) -> JSON:
    ch = c.channel()
    if ch.conv.kind != "channel" and c.bot.bot_user_id not in ch.member_set:
        raise EmulatorError("channel_not_found")
    return {"channel": conv_obj(c.engine, ch, c.bot.bot_user_id)}


@api("conversations.members")
async def conversations_members(c: Ctx) -> JSON:
    ch = c.channel()
    if ch.conv.kind != "channel" and c.bot.bot_user_id not in ch.member_set:
        raise EmulatorError("channel_not_found")
    page, nxt = _page(list(ch.conv.members), c)  # type: ignore[arg-type]
    return {"members": page, "response_metadata": {"next_cursor": nxt}}


def _ts_float(v: str | None, default: float) -> float:
    if v is None:
        return default
    try:
        return float(v)
    except ValueError as e:
        raise EmulatorError("invalid_ts_latest") from e


@api("conversations.history")
async def conversations_history(c: Ctx) -> JSON:
    ch = c.member_channel()
    meta = c.metadata_flag()
    inclusive = c.flag("inclusive")
    oldest = _ts_float(c.opt("oldest"), 0.0)
    latest = _ts_float(c.opt("latest"), float("inf"))
    sel = []
    for m in reversed(ch.top):
        t = float(m["ts"])
        if (t > oldest or (inclusive and t == oldest)) and (t < latest or (inclusive and t == latest)):
            sel.append(strip_meta(m, meta))
    page, nxt = _page(sel, c)
    return {
        "messages": page,
        "has_more": bool(nxt),
        "pin_count": 0,
        "response_metadata": {"next_cursor": nxt},
    }


@api("conversations.replies")
async def conversations_replies(c: Ctx) -> JSON:
    ch = c.member_channel()
    ts = c.opt("ts")
    if not ts:
        raise EmulatorError("invalid_arguments")
    msg = ch.by_ts.get(ts)
    if msg is None:
        raise EmulatorError("thread_not_found")
    parent_ts = msg.get("thread_ts") or msg["ts"]
    parent = ch.by_ts.get(parent_ts, msg)
    meta = c.metadata_flag()
    inclusive = c.flag("inclusive")
    oldest = _ts_float(c.opt("oldest"), 0.0)
    latest = _ts_float(c.opt("latest"), float("inf"))

    def within(m: JSON) -> bool:
        t = float(m["ts"])
        return (t > oldest or (inclusive and t == oldest)) and (t < latest or (inclusive and t == latest))

    # The thread's first message always comes first, as in Slack; ``oldest``/``latest``
    # bound the replies after it (oldest first).
    replies = [strip_meta(r, meta) for r in ch.replies.get(parent["ts"], []) if within(r)]
    items = [strip_meta(parent, meta), *replies]
    page, nxt = _page(items, c, default_limit=1000)
    return {"messages": page, "has_more": bool(nxt), "response_metadata": {"next_cursor": nxt}}


@api("chat.postMessage")
async def chat_post_message(c: Ctx) -> JSON:
    w = c.engine.ws
    chan = c.opt("channel")
    if not chan:
        raise EmulatorError("channel_not_found")
    if chan not in w.channels and chan in w.users:  # posting to a user id opens the IM
        if w.users[chan].is_bot:
            raise EmulatorError("cannot_dm_bot")
        conv = w.create_conversation([c.bot.bot_user_id, chan], kind="im")
        chan = conv.id
    c.params["channel"] = chan
    ch = c.member_channel()
    text, blocks = _content(c, c.opt("text") or "", c.jsonish("blocks"))
    if not text and not blocks:
        raise EmulatorError("no_text")
    metadata = c.jsonish("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict) or not isinstance(metadata.get("event_type"), str):
            raise EmulatorError("invalid_metadata_format")
        metadata = {
            "event_type": metadata["event_type"],
            "event_payload": metadata.get("event_payload") or {},
        }
    msg = await c.engine.post_message(
        c.bot_user, ch.conv.id, text or "", thread_ts=c.opt("thread_ts"), blocks=blocks, metadata=metadata
    )
    return {"channel": ch.conv.id, "ts": msg["ts"], "message": strip_meta(msg, True)}


@api("chat.update")
async def chat_update(c: Ctx) -> JSON:
    ch = c.channel()
    ts = c.opt("ts")
    if not ts:
        raise EmulatorError("message_not_found")
    metadata = c.jsonish("metadata")
    text, blocks = _content(c, c.opt("text"), c.jsonish("blocks"))
    if text is None and blocks is None:
        raise EmulatorError("no_text")
    msg = await c.engine.update_message(
        c.bot, ch.conv.id, ts, text, blocks, metadata if isinstance(metadata, dict) else None
    )
    return {"channel": ch.conv.id, "ts": ts, "text": msg.get("text", ""), "message": dict(msg)}


@api("chat.delete")
async def chat_delete(c: Ctx) -> JSON:
    ch = c.channel()
    ts = c.opt("ts")
    if not ts:
        raise EmulatorError("message_not_found")
    await c.engine.delete_message(c.bot, ch.conv.id, ts)
    return {"channel": ch.conv.id, "ts": ts}


# Slack's limit for ``markdown_text`` on chat.postMessage and chat.update.
MARKDOWN_TEXT_LIMIT = 12_000


def _content(c: Ctx, text: str | None, blocks: Any) -> tuple[str | None, list[JSON] | None]:
    """A post's or an edit's text and blocks (checked as Slack does: ``blockkit``);
    ``markdown_text`` (standard Markdown, at most 12,000 characters, never with ``text`` or
    ``blocks``) is kept as the message's text and one ``markdown`` block."""
    markdown = c.opt("markdown_text")
    if markdown is None:
        return text, checked_blocks(blocks)
    if text or blocks is not None:
        raise EmulatorError("markdown_text_conflict")
    if len(markdown) > MARKDOWN_TEXT_LIMIT:
        raise EmulatorError("msg_too_long")
    return markdown, markdown_blocks(markdown)


# ---- files (files.py) ----------------------------------------------------------------------


@api("files.getUploadURLExternal")
async def files_get_upload_url_external(c: Ctx) -> JSON:
    _needs(c, WRITE_SCOPE)
    filename = c.req("filename")
    try:
        length = int(c.req("length"))
    except ValueError as e:
        raise EmulatorError("invalid_arguments") from e
    if length < 1:
        raise EmulatorError("invalid_arguments")
    file_id, url = c.engine.new_upload(c.bot, filename, length)
    return {"upload_url": url, "file_id": file_id}


@api("files.completeUploadExternal")
async def files_complete_upload_external(c: Ctx) -> JSON:
    _needs(c, WRITE_SCOPE)
    items = c.jsonish("files")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise EmulatorError("invalid_arguments")
    channel = c.opt("channel_id") or (c.opt("channels") or "").split(",")[0] or None
    blocks = c.jsonish("blocks")
    if blocks is not None and not isinstance(blocks, list):
        raise EmulatorError("invalid_blocks")
    files = await c.engine.complete_upload(
        c.bot, items, channel, c.opt("thread_ts"), c.opt("initial_comment") or "", blocks
    )
    return {"files": files}


@api("files.info")
async def files_info(c: Ctx) -> JSON:
    _needs(c, READ_SCOPE)
    file_id = c.opt("file")
    if not file_id:
        raise EmulatorError("file_not_found")
    return {
        "file": c.engine.file_info(c.bot, file_id),
        "comments": [],
        "response_metadata": {"next_cursor": ""},
    }


async def serve_file(engine: Engine, request: web.Request) -> web.StreamResponse:
    """``url_private`` (and ``url_private_download``, which also says ``attachment``)."""
    team_file = request.match_info["team_file"]
    file_id = team_file.split("-", 1)[1] if "-" in team_file else team_file
    status, headers, body = engine.download(
        request.headers.get("Authorization", ""), file_id, "token" in request.query
    )
    if status == 200 and request.match_info.get("download"):
        headers = {**headers, "Content-Disposition": f'attachment; filename="{request.match_info["name"]}"'}
    return web.Response(body=body, status=status, headers=headers)


async def receive_upload(engine: Engine, request: web.Request) -> web.StreamResponse:
    """An upload URL: the bytes raw, or the first file of a multipart form."""
    content = b""
    if request.content_type == "multipart/form-data":
        form = await request.post()
        for value in form.values():
            if isinstance(value, web.FileField):
                content = value.file.read()
                break
            content = str(value).encode()
    else:
        content = await request.read()
    try:
        size = engine.receive_upload(request.match_info["token"], content)
    except KeyError:
        return web.Response(status=404, text="upload URL not found")
    return web.Response(status=200, text=f"OK - {size}")


@api("users.info")
async def users_info(c: Ctx) -> JSON:
    uid = c.opt("user")
    u = c.engine.ws.users.get(uid or "")
    if u is None:
        raise EmulatorError("user_not_found")
    return {"user": user_obj(c.engine, u)}


@api("bots.info")
async def bots_info(c: Ctx) -> JSON:
    bid = c.opt("bot")
    a = c.engine.ws.apps_by_bot_id.get(bid or "")
    if a is None:
        raise EmulatorError("bot_not_found")
    prof = bot_profile(c.engine.ws, a)
    return {
        "bot": {
            "id": a.bot_id,
            "deleted": False,
            "name": a.name,
            "updated": a.updated,
            "app_id": a.app_id,
            "user_id": a.bot_user_id,
            "icons": prof["icons"],
        }
    }


@api("reactions.add")
async def reactions_add(c: Ctx) -> JSON:
    ch = c.member_channel()
    ts = c.opt("timestamp")
    name = c.opt("name")
    if not ts:
        raise EmulatorError("no_item_specified")
    if not name:
        raise EmulatorError("invalid_name")
    await c.engine.add_reaction(c.bot_user, ch.conv.id, ts, name.strip(":"))
    return {}


@api("reactions.remove")
async def reactions_remove(c: Ctx) -> JSON:
    ch = c.member_channel()
    ts = c.opt("timestamp")
    name = c.opt("name")
    if not ts:
        raise EmulatorError("no_item_specified")
    if not name:
        raise EmulatorError("invalid_name")
    c.engine.remove_reaction(c.bot_user, ch.conv.id, ts, name.strip(":"))
    return {}


# ---- the agent surface (surface.py) ------------------------------------------------------


def _needs(c: Ctx, *any_of: str) -> None:
    """Slack's ``missing_scope``: the token has none of the scopes the method accepts."""
    if not any(scope in c.bot.scopes for scope in any_of):
        raise EmulatorError("missing_scope", needed=",".join(any_of), provided=",".join(sorted(c.bot.scopes)))


def _metadata(c: Ctx) -> JSON | None:
    metadata = c.jsonish("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("event_type"), str):
        raise EmulatorError("invalid_metadata_format")
    return {"event_type": metadata["event_type"], "event_payload": metadata.get("event_payload") or {}}


@api("assistant.threads.setStatus")
async def assistant_threads_set_status(c: Ctx) -> JSON:
    # Slack takes chat:write (recommended) or assistant:write for the status line.
    _needs(c, "chat:write", ASSISTANT_SCOPE)
    ch = c.member_channel("channel_id")
    thread_ts = c.req("thread_ts")
    status = c.params.get("status")
    if status is None:
        raise EmulatorError("invalid_arguments")
    loading = c.jsonish("loading_messages")
    if loading is not None and (not isinstance(loading, list) or len(loading) > 10):
        raise EmulatorError("invalid_arguments")
    c.engine.set_status(c.bot, ch.conv.id, thread_ts, str(status), loading)
    return {}


@api("assistant.threads.setSuggestedPrompts")
async def assistant_threads_set_suggested_prompts(c: Ctx) -> JSON:
    _needs(c, ASSISTANT_SCOPE)
    ch = c.member_channel("channel_id")
    # Optional (Slack: without it the prompts are the channel's; an agent_view app's DM is
    # called without it): read back as thread "".
    thread_ts = c.opt("thread_ts") or ""
    prompts = checked_prompts(c.jsonish("prompts"))
    found: JSON = {"prompts": prompts}
    if c.opt("title"):
        found["title"] = c.opt("title")
    c.engine.surface.prompts[(ch.conv.id, thread_ts)] = found
    return {}


@api("assistant.threads.setTitle")
async def assistant_threads_set_title(c: Ctx) -> JSON:
    _needs(c, ASSISTANT_SCOPE)
    ch = c.member_channel("channel_id")
    c.engine.surface.titles[(ch.conv.id, c.req("thread_ts"))] = c.req("title")
    return {}


@api("chat.startStream")
async def chat_start_stream(c: Ctx) -> JSON:
    # Slack lists chat:write; the emulator keeps streams for apps with the Agents & AI
    # Apps feature (its assistant:write), so the fallback to a plain post is testable.
    _needs(c, ASSISTANT_SCOPE)
    ch = c.member_channel()
    thread_ts = c.opt("thread_ts")
    if not thread_ts:
        raise EmulatorError("invalid_arguments")  # "streamed messages should always be replies"
    # Required when streaming to channels, and peers see DMs refuse them too: required here.
    user, team = c.opt("recipient_user_id"), c.opt("recipient_team_id")
    if not user:
        raise EmulatorError("missing_recipient_user_id")
    if not team:
        raise EmulatorError("missing_recipient_team_id")
    if user not in ch.member_set or team != c.engine.ws.team_id:
        raise EmulatorError("invalid_recipient")
    chunks = checked_chunks(c.jsonish("chunks"))
    text = chunk_text(checked_text(c.opt("markdown_text")), chunks)
    mode = c.opt("task_display_mode") or "timeline"
    if mode not in ("timeline", "plan"):
        raise EmulatorError("invalid_arguments")
    msg = await c.engine.start_stream(
        c.bot,
        ch.conv.id,
        thread_ts,
        text,
        chunks,
        recipient_user_id=user,
        recipient_team_id=team,
        task_display_mode=mode,
    )
    return {"channel": ch.conv.id, "ts": msg["ts"]}


def _stream_call(c: Ctx) -> tuple[Channel, str, str, list[JSON]]:
    """What ``chat.appendStream`` and ``chat.stopStream`` both take and check: the
    channel, the stream's ts, its text and chunks."""
    _needs(c, ASSISTANT_SCOPE)
    ch = c.member_channel()
    ts = c.opt("ts")
    if not ts:
        raise EmulatorError("message_not_found")
    chunks = checked_chunks(c.jsonish("chunks"))
    return ch, ts, chunk_text(checked_text(c.opt("markdown_text")), chunks), chunks


@api("chat.appendStream")
async def chat_append_stream(c: Ctx) -> JSON:
    ch, ts, text, chunks = _stream_call(c)
    if not text and not chunks:
        raise EmulatorError("no_text")
    c.engine.append_stream(c.bot, ch.conv.id, ts, text, chunks)
    return {"channel": ch.conv.id, "ts": ts}


@api("chat.stopStream")
async def chat_stop_stream(c: Ctx) -> JSON:
    ch, ts, text, chunks = _stream_call(c)
    blocks = checked_blocks(c.jsonish("blocks"))
    msg = c.engine.stop_stream(c.bot, ch.conv.id, ts, text, chunks, blocks=blocks, metadata=_metadata(c))
    return {"channel": ch.conv.id, "ts": ts, "message": strip_meta(msg, True)}


# ---- agent sessions and the Home tab (surface.py; docs/emulator.md) -------------------------------

STOP_EVENT = "agent_session_stopped"


def _session_call(c: Ctx) -> tuple[Channel, str]:
    """What both session methods take and check: ``chat:write``, an app declared as an
    agent (``assistant:write``), the channel and the thread (no session channels here)."""
    _needs(c, "chat:write")
    _needs(c, ASSISTANT_SCOPE)
    ch = c.member_channel("channel_id")
    return ch, c.req("thread_ts")


def _title(value: str | None) -> str | None:
    if value is not None and len(value) > SESSION_TITLE_LIMIT:
        raise EmulatorError("invalid_arguments")
    return value


@api("agents.sessions.setStatus")
async def agents_sessions_set_status(c: Ctx) -> JSON:
    ch, thread_ts = _session_call(c)
    status = c.req("status")
    if status not in SESSION_STATUSES:
        raise EmulatorError("invalid_arguments")
    session = c.engine.set_session_status(
        c.bot, ch.conv.id, thread_ts, status, _title(c.opt("title")), c.opt("initiator_user_id")
    )
    out: JSON = {"status": session.status, "title": session.title}
    if STOP_EVENT not in c.bot.events:
        # Slack: without the subscription people see a Stop that does nothing.
        warning = "missing_agent_session_stopped_event_subscription"
        out |= {"warning": warning, "response_metadata": {"warnings": [warning]}}
    return out


@api("agents.sessions.rename")
async def agents_sessions_rename(c: Ctx) -> JSON:
    ch, thread_ts = _session_call(c)
    title = _title(c.req("title"))
    assert title is not None
    session = c.engine.rename_session(c.bot, ch.conv.id, thread_ts, title)
    return {"title": session.title}


@api("views.publish")
async def views_publish(c: Ctx) -> JSON:
    user_id = c.req("user_id")
    raw = c.params.get("view")
    if isinstance(raw, str) and len(raw.encode()) > VIEW_SIZE_LIMIT:
        raise EmulatorError("view_too_large")
    view = c.jsonish("view")
    if not isinstance(view, dict) or view.get("type") != "home":
        raise EmulatorError("invalid_arguments")
    if len(json.dumps(view).encode()) > VIEW_SIZE_LIMIT:
        raise EmulatorError("view_too_large")
    return {"view": c.engine.publish_view(c.bot, user_id, view, c.opt("hash"))}


__all__ = ["HANDLERS", "handle", "CHANNEL_TYPE"]
