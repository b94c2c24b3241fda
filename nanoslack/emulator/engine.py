"""The engine: the workspace's behaviour, without a server.

State, the socket hub, posting and event fan-out, edits, reactions, button clicks and
faults. The Web API handlers (webapi.py), the HTTP driver (server.py) and the Python
drivers (driver.py) all act on the workspace through it; it calls none of them.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import time
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from . import events as ev_mod
from .files import FAULTS, READ_SCOPE, FileStore, StoredFile, file_obj, message_file
from .socket import Delivery, SocketHub
from .state import (
    METADATA_SCOPE,
    ApiCall,
    App,
    Channel,
    Conversation,
    EmulatorError,
    Stats,
    User,
    Workspace,
    rich_text_blocks,
)
from .surface import STATUS_TIMEOUT_S, STREAM_METHODS, Session, Stream, SurfaceState

JSON = dict[str, Any]

# Slack's limits for commercially distributed non-Marketplace apps (May 2025).
NON_MARKETPLACE_METHODS = frozenset({"conversations.history", "conversations.replies"})
NON_MARKETPLACE_LIMIT = 15
NON_MARKETPLACE_WINDOW_S = 60.0


# What Slack's file host answers a request it cannot authenticate: its sign-in page.
SIGN_IN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


class Options(TypedDict, total=False):
    """What an emulator is made with: the drivers' keyword arguments (defaults in Engine)."""

    ack_timeout: float  # seconds before an unacked envelope is redelivered
    max_retries: int  # redeliveries before an envelope is given up
    deliver_own_posts: bool  # an app hears its own posts, as in Slack
    mpim_prefix: str  # the first letter of a group DM's id: "C" (Slack today) or "G"
    team_id: str
    team_name: str
    log_api_calls: bool  # keep the Web API call log (``api_calls``)
    # Slack's 2025 limits for a commercially distributed non-Marketplace app:
    # conversations.history/replies answer at most 15 messages, once a minute per app.
    non_marketplace: bool
    # Seconds a status line shows without being sent again (Slack: 2 minutes).
    status_timeout: float


class Engine:
    """A stateful Slack workspace. Not thread-safe: use it only on its event loop."""

    def __init__(self, **options: Unpack[Options]) -> None:
        o = options
        self.ws = Workspace(
            o.get("team_id", "T0EMULATOR"), o.get("team_name", "nanoslack-emu"), o.get("mpim_prefix", "C")
        )
        self.hub = SocketHub(o.get("ack_timeout", 3.0), o.get("max_retries", 3))
        self.deliver_own_posts = o.get("deliver_own_posts", True)
        self.log_api_calls = o.get("log_api_calls", True)
        self.non_marketplace = o.get("non_marketplace", False)
        self.surface = SurfaceState(status_timeout=o.get("status_timeout", STATUS_TIMEOUT_S))
        self.files = FileStore()
        # (app_id, method) -> when its last rate-limited read was answered (monotonic)
        self._last_read: dict[tuple[str, str], float] = {}
        self.api_calls: list[ApiCall] = []
        # (method, app_id or None for any app) -> [remaining, error, retry_after]
        self.faults: dict[tuple[str, str | None], list[Any]] = {}
        self.response_url_posts: list[JSON] = []
        # Where the server listening for this workspace is bound: socket URLs and
        # response_urls handed to apps point there.
        self.port: int = 0
        # Called with (channel, message) after a message is stored, edited or reacted to,
        # so a viewer (the demo playground) can push changes instead of polling.
        self.watchers: list[Callable[[str, JSON], None]] = []
        # Called with (channel, thread_ts, status, app name) for every status an app sends.
        self.status_watchers: list[Callable[[str, str, str, str], None]] = []

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start redelivering unacked envelopes (needs the running event loop)."""
        self.hub.start()

    async def stop(self) -> None:
        await self.hub.stop()

    # ---- workspace (users, apps and conversations are added to the state, ``ws``) -------
    def users(self) -> list[User]:
        return list(self.ws.users.values())

    def apps(self) -> list[App]:
        return list(self.ws.apps.values())

    def conversations(self) -> list[Conversation]:
        return [c.conv for c in self.ws.channels.values()]

    def app(self, ref: str) -> App:
        """An app by app_id, name, bot_id or bot user id."""
        w = self.ws
        if ref in w.apps:
            return w.apps[ref]
        for table in (w.apps_by_bot_id, w.apps_by_bot_user):
            if ref in table:
                return table[ref]
        for a in w.apps.values():
            if a.name == ref:
                return a
        raise KeyError(ref)

    def channel(self, channel: str) -> Channel:
        ch = self.ws.channels.get(channel)
        if ch is None:
            raise EmulatorError("channel_not_found")
        return ch

    def _member_message(self, user_id: str, channel: str, ts: str) -> tuple[Channel, JSON]:
        ch = self.channel(channel)
        if user_id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        msg = ch.by_ts.get(ts)
        if msg is None:
            raise EmulatorError("message_not_found")
        return ch, msg

    # ---- posting ---------------------------------------------------------------------------
    async def post_message(
        self,
        author: User,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        blocks: list[JSON] | None = None,
        metadata: JSON | None = None,
        human: bool = False,
        extra: JSON | None = None,
    ) -> JSON:
        """Store a message (a reply when ``thread_ts`` is given) and fan it out to member apps
        (``extra``: more fields of the message, as a file share's ``subtype`` and ``files``)."""
        ch = self.channel(channel)
        if author.id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        parent = self._thread_parent(ch, thread_ts) if thread_ts else None
        app = self.ws.apps_by_bot_user[author.id] if author.is_bot else None
        msg = ev_mod.stored_message(
            self.ws,
            author,
            app,
            self.ws.next_ts(),
            text,
            parent=parent,
            blocks=blocks,
            metadata=metadata,
            human=human,
            extra=extra,
        )
        ch.by_ts[msg["ts"]] = msg
        if parent is None:
            ch.top.append(msg)
        else:
            _add_reply(ch, parent, msg)
        if app is not None:
            self.surface.posted(channel, parent["ts"] if parent else None, msg["ts"])
        self._changed(channel, msg)
        await self.emit(ch, ev_mod.message_event(self.ws, ch, msg), app)
        return msg

    def _changed(self, channel: str, msg: JSON) -> None:
        for watch in self.watchers:
            watch(channel, dict(msg))

    @staticmethod
    def _thread_parent(ch: Channel, thread_ts: str) -> JSON:
        """The thread's root; a reply's ts also names its thread, as in Slack."""
        parent = ch.by_ts.get(thread_ts)
        if parent is None:
            raise EmulatorError("thread_not_found")
        if parent.get("thread_ts") and parent["thread_ts"] != parent["ts"]:
            parent = ch.by_ts[parent["thread_ts"]]
        return parent

    async def emit(
        self, ch: Channel, event: JSON, poster_app: App | None, subscription: str | None = None
    ) -> None:
        """Deliver ``event`` to every member app subscribed to it (``subscription``: the one
        event type that applies; None: the conversation's message type plus app_mention twins)."""
        targets = ev_mod.fan_out(self.ws, ch, event, poster_app, self.deliver_own_posts, subscription)
        if not targets:
            return
        event_time = int(time.time())
        # one serialization per distinct event: the mention twin is shared by every app it
        # names; an app without the metadata scope gets it without the metadata (as in Slack)
        cache: dict[tuple[int, bool], str] = {}
        for app, _etype, e in targets:
            sees_metadata = METADATA_SCOPE in app.scopes
            ej = cache.get((id(e), sees_metadata))
            if ej is None:
                shown = e if sees_metadata else ev_mod.without_metadata(e)
                ej = cache[(id(e), sees_metadata)] = json.dumps(shown, separators=(",", ":"))
            payload = ev_mod.callback_json(self.ws, app, ej, self.ws.next_event_id(), event_time)
            await self.hub.deliver(Delivery(app_id=app.app_id, kind="events_api", payload_json=payload))

    async def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        user = self.ws.resolve_user(user_id)
        msg = await self.post_message(user, channel, text, thread_ts=thread_ts, human=not user.is_bot)
        return str(msg["ts"])

    async def bulk_post(
        self, user_id: str, channel: str, texts: list[str], *, file_every: int = 0, file_bytes: int = 0
    ) -> list[str]:
        """Post ``texts`` in order. ``file_every``: every that many-th message is instead a
        ``file_share`` of a distinct text file of ``file_bytes`` bytes (made here: a bench's
        files cost the driver's request nothing)."""
        out = []
        for i, t in enumerate(texts):
            if file_every and i % file_every == file_every - 1:
                line = f"row {i}," + "x" * 60 + "\n"
                content = (line * (file_bytes // len(line) + 1))[:file_bytes]
                shared = await self.share_file(user_id, channel, f"bulk{i}.csv", content, text=t)
                out.append(str(shared["ts"]))
                continue
            out.append(await self.post_as_user(user_id, channel, t))
            if i % 20 == 19:
                await asyncio.sleep(0)  # let sockets drain between bursts
        return out

    async def update_message(
        self,
        app: App,
        channel: str,
        ts: str,
        text: str | None,
        blocks: list[JSON] | None,
        metadata: JSON | None,
    ) -> JSON:
        """An app edits its own message; member apps get ``message_changed`` (no mention twins)."""
        ch, msg = self._member_message(app.bot_user_id, channel, ts)
        if msg.get("user") != app.bot_user_id:
            raise EmulatorError("cant_update_message")
        return await self._edit(ch, msg, app.bot_user_id, text, blocks, metadata, app)

    async def edit_as_user(self, user_id: str, channel: str, ts: str, text: str) -> JSON:
        """A person (by id or name) edits their own message: its text and the client's
        blocks change, and member apps get ``message_changed``. The edited message."""
        user = self.ws.resolve_user(user_id)
        ch, msg = self._member_message(user.id, channel, ts)
        if msg.get("user") != user.id or user.is_bot:
            raise EmulatorError("cant_update_message")
        blocks = rich_text_blocks(text) if text else None
        if blocks is None:
            msg.pop("blocks", None)
        return await self._edit(ch, msg, user.id, text, blocks, None, None)

    async def _edit(
        self,
        ch: Channel,
        msg: JSON,
        editor: str,
        text: str | None,
        blocks: list[JSON] | None,
        metadata: JSON | None,
        app: App | None,
    ) -> JSON:
        previous = dict(msg)
        if text is not None:
            msg["text"] = text
        if blocks is not None:
            msg["blocks"] = blocks
        if metadata:
            msg["metadata"] = metadata
        msg["edited"] = {"user": editor, "ts": self.ws.next_ts()}
        channel = ch.conv.id
        self.surface.streams.pop((channel, msg["ts"]), None)  # an edit ends a stream: the text is final
        self._changed(channel, msg)
        event = ev_mod.message_changed_event(ch, msg, previous, self.ws.next_ts())
        await self.emit(ch, event, app, subscription=ev_mod.SUBSCRIPTION[ch.conv.kind])
        return msg

    async def delete_message(self, app: App, channel: str, ts: str) -> None:
        """An app deletes its own message (a stream too); member apps get ``message_deleted``."""
        ch, msg = self._member_message(app.bot_user_id, channel, ts)
        if msg.get("user") != app.bot_user_id:
            raise EmulatorError("cant_delete_message")
        await self._remove(ch, msg, app)

    async def delete_as_user(self, user_id: str, channel: str, ts: str) -> None:
        """A person (by id or name) deletes their own message: member apps get ``message_deleted``."""
        user = self.ws.resolve_user(user_id)
        ch, msg = self._member_message(user.id, channel, ts)
        if msg.get("user") != user.id or user.is_bot:
            raise EmulatorError("cant_delete_message")
        await self._remove(ch, msg, None)

    async def _remove(self, ch: Channel, msg: JSON, app: App | None) -> None:
        """Take a message out of its conversation (history and replies no longer show it)
        and send ``message_deleted``. A thread root's replies stay (Slack would leave a
        tombstone in its place; the emulator leaves nothing)."""
        ts = str(msg["ts"])
        del ch.by_ts[ts]
        parent_ts = msg.get("thread_ts")
        if parent_ts and parent_ts != ts:
            reps = ch.replies.get(parent_ts, [])
            reps[:] = [r for r in reps if r["ts"] != ts]
            parent = ch.by_ts.get(parent_ts)
            if parent is not None:
                parent["reply_count"] = len(reps)
        else:
            ch.top[:] = [m for m in ch.top if m["ts"] != ts]
        self.surface.streams.pop((ch.conv.id, ts), None)
        self._changed(ch.conv.id, {**msg, "deleted": True})
        event = ev_mod.message_deleted_event(ch, msg, self.ws.next_ts())
        await self.emit(ch, event, app, subscription=ev_mod.SUBSCRIPTION[ch.conv.kind])

    async def add_reaction(self, user: User, channel: str, ts: str, name: str) -> None:
        """``user`` reacts to a message; apps subscribed to ``reaction_added`` hear of it."""
        ch, msg = self._member_message(user.id, channel, ts)
        reactions: list[JSON] = msg.setdefault("reactions", [])
        for r in reactions:
            if r["name"] == name:
                if user.id in r["users"]:
                    raise EmulatorError("already_reacted")
                r["users"].append(user.id)
                r["count"] += 1
                break
        else:
            reactions.append({"name": name, "users": [user.id], "count": 1})
        self._changed(channel, msg)
        event = ev_mod.reaction_added_event(user, name, channel, msg, self.ws.next_ts())
        await self.emit(ch, event, None, subscription="reaction_added")

    def remove_reaction(self, user: User, channel: str, ts: str, name: str) -> None:
        """``user`` takes a reaction back (apps here subscribe to no ``reaction_removed``)."""
        _ch, msg = self._member_message(user.id, channel, ts)
        reactions: list[JSON] = msg.get("reactions") or []
        for r in reactions:
            if r["name"] == name and user.id in r["users"]:
                r["users"].remove(user.id)
                r["count"] -= 1
                if not r["users"]:
                    reactions.remove(r)
                if not reactions:
                    msg.pop("reactions", None)
                self._changed(channel, msg)
                return
        raise EmulatorError("no_reaction")

    async def react(self, user_id: str, channel: str, ts: str, reaction: str) -> None:
        """A user (by id or name) reacts to a message; ``reaction`` with or without colons."""
        await self.add_reaction(self.ws.resolve_user(user_id), channel, ts, reaction.strip(":"))

    # ---- files (``files.py``) ------------------------------------------------------------
    def new_upload(self, app: App, filename: str, length: int) -> tuple[str, str]:
        """``files.getUploadURLExternal``: a file id and the URL to POST its bytes to."""
        f = self.files.new(self.ws.new_id("F"), filename, app.bot_user_id, length=length)
        return f.id, f"{self.base_url}/upload/v1/{self.files.upload_token(f.id)}"

    def receive_upload(self, token: str, content: bytes) -> int:
        """The bytes POSTed to an upload URL; the size kept (KeyError: no such URL)."""
        f = self.files.files[self.files.uploads.pop(token)]
        f.content = content
        return len(content)

    async def complete_upload(
        self,
        app: App,
        items: list[JSON],
        channel: str | None,
        thread_ts: str | None,
        comment: str,
        blocks: list[JSON] | None,
    ) -> list[JSON]:
        """``files.completeUploadExternal``: the uploaded files are done; with ``channel``
        they are shared there (in ``thread_ts``'s thread) as one ``file_share`` message."""
        found: list[StoredFile] = []
        for item in items:
            f = self.files.files.get(str(item.get("id") or ""))
            if f is None or f.user != app.bot_user_id or f.content is None:
                raise EmulatorError("file_not_found")
            if f.completed:
                raise EmulatorError("file_already_completed")
            found.append(f)
        ch = self.channel(channel) if channel else None
        if ch is not None and app.bot_user_id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        parent = self._thread_parent(ch, thread_ts) if ch is not None and thread_ts else None
        for f, item in zip(found, items, strict=True):
            f.completed = True
            if item.get("title"):
                f.title = str(item["title"])
            if ch is not None:
                f.channels.append(ch.conv.id)
        objs = [self._file_obj(f) for f in found]
        if ch is not None:
            author = self.ws.users[app.bot_user_id]
            extra = {"subtype": "file_share", "files": objs, "upload": True, "display_as_bot": False}
            await self.post_message(
                author,
                ch.conv.id,
                comment,
                thread_ts=parent["ts"] if parent else None,
                blocks=None if comment else blocks,
                extra=extra,
            )
        return objs

    def _file_obj(self, f: StoredFile) -> JSON:
        public = any(self.ws.channels[c].conv.kind == "channel" for c in f.channels if c in self.ws.channels)
        return file_obj(self.base_url, self.ws.team_id, self.ws.domain, f, public=public)

    def _visible_file(self, app: App, file_id: str) -> StoredFile:
        """A file the app may see: it uploaded it, or it is in a conversation the file was
        shared in (``file_not_found`` otherwise, ``file_deleted`` for a deleted one)."""
        f = self.files.files.get(file_id)
        if f is None:
            raise EmulatorError("file_not_found")
        mine = f.user == app.bot_user_id
        shared = any(app.bot_user_id in self.ws.channels[c].member_set for c in f.channels)
        if not (mine or shared):
            raise EmulatorError("file_not_found")
        if f.deleted:
            raise EmulatorError("file_deleted")
        return f

    def file_info(self, app: App, file_id: str) -> JSON:
        """``files.info``: the whole file object (what a ``check_file_info`` entry lacks)."""
        return self._file_obj(self._visible_file(app, file_id))

    def download(
        self, authorization: str, file_id: str, token_in_query: bool
    ) -> tuple[int, dict[str, str], bytes]:
        """What ``url_private(_download)`` answers: (status, headers, body). The bot token of
        this workspace, with ``files:read``, in an ``Authorization: Bearer`` header, else
        Slack's sign-in page (HTML, status 200: check the content type); a file the app may
        not see or that is gone 404; a refused one 403; a redirected one 302."""
        token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
        app = self.ws.bot_tokens.get(token)
        if token_in_query or app is None or token in self.ws.revoked or READ_SCOPE not in app.scopes:
            return 200, {"Content-Type": "text/html; charset=utf-8"}, SIGN_IN_PAGE
        try:
            f = self._visible_file(app, file_id)
        except EmulatorError:
            return 404, {"Content-Type": "text/plain"}, b"File not found"
        if f.fault == "refused":
            return 403, {"Content-Type": "text/plain"}, b"Forbidden"
        if f.fault == "redirect":
            return 302, {"Location": f.location or "http://127.0.0.1:9/"}, b""
        if f.fault == "gone" or f.content is None:
            return 404, {"Content-Type": "text/plain"}, b"File not found"
        return 200, {"Content-Type": f.mimetype}, f.content

    async def share_file(
        self,
        user_id: str,
        channel: str,
        name: str,
        content: bytes | str,
        thread_ts: str | None = None,
        text: str = "",
        mimetype: str | None = None,
        title: str | None = None,
        check_file_info: bool = False,
        fault: str | None = None,
        location: str | None = None,
    ) -> JSON:
        """A person (by id or name) shares a file in a conversation (a thread with
        ``thread_ts``): a ``file_share`` message whose ``files[]`` carries it (only its id and
        ``file_access: check_file_info`` with ``check_file_info=True``). The message.
        ``fault``/``location``: the file fails from the start, as ``set_file_fault`` makes it
        (before any app could download it)."""
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS} or None")
        user = self.ws.resolve_user(user_id)
        ch = self.channel(channel)
        data = content.encode() if isinstance(content, str) else bytes(content)
        f = self.files.new(self.ws.new_id("F"), name, user.id, mimetype=mimetype)
        f.content, f.completed, f.check_file_info = data, True, check_file_info
        f.title = title or name
        f.fault, f.location, f.deleted = fault, location, fault == "gone"
        f.channels.append(ch.conv.id)
        entry = message_file(self._file_obj(f), check_file_info)
        extra = {"subtype": "file_share", "files": [entry], "upload": False, "display_as_bot": False}
        return await self.post_message(
            user, ch.conv.id, text, thread_ts=thread_ts, human=not user.is_bot, extra=extra
        )

    def set_file_fault(self, file_id: str, fault: str | None, location: str | None = None) -> None:
        """Make a file's download fail: ``refused`` (403), ``gone`` (404; ``files.info``
        then answers ``file_deleted``), ``redirect`` (302 to ``location``, any URL: another
        host, to test that a token is never sent there); None serves it again."""
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS} or None")
        f = self.files.files[file_id]
        f.fault, f.location, f.deleted = fault, location, fault == "gone"

    def file_content(self, file_id: str) -> bytes | None:
        """A file's bytes (None: never uploaded)."""
        return self.files.files[file_id].content

    # ---- the agent surface (``surface.py``) -------------------------------------------
    def set_status(
        self, app: App, channel: str, thread_ts: str, status: str, loading_messages: list[str] | None = None
    ) -> None:
        ch = self.channel(channel)
        if app.bot_user_id not in ch.member_set:
            raise EmulatorError("channel_not_found")
        self.surface.set_status(channel, thread_ts, status, loading_messages)
        for watch in self.status_watchers:
            watch(channel, thread_ts, status, app.name)

    async def start_stream(
        self,
        app: App,
        channel: str,
        thread_ts: str,
        text: str,
        chunks: list[JSON],
        *,
        recipient_user_id: str,
        recipient_team_id: str,
        task_display_mode: str = "timeline",
    ) -> JSON:
        """A streamed reply: posted (and fanned out) at once, growing until it stops."""
        author = self.ws.users[app.bot_user_id]
        msg = await self.post_message(author, channel, text, thread_ts=thread_ts)
        key = (channel, str(msg["ts"]))
        self.surface.streams[key] = Stream(
            app.app_id, recipient_user_id, recipient_team_id, task_display_mode
        )
        self.surface.add_tasks(channel, key[1], chunks)
        return msg

    def append_stream(self, app: App, channel: str, ts: str, text: str, chunks: list[JSON]) -> JSON:
        _ch, msg = self._member_message(app.bot_user_id, channel, ts)
        self.surface.check_streaming(channel, ts, app.app_id)
        msg["text"] = str(msg.get("text") or "") + text
        self.surface.add_tasks(channel, ts, chunks)
        self._changed(channel, msg)
        return msg

    def stop_stream(
        self,
        app: App,
        channel: str,
        ts: str,
        text: str,
        chunks: list[JSON],
        *,
        blocks: list[JSON] | None = None,
        metadata: JSON | None = None,
    ) -> JSON:
        _ch, msg = self._member_message(app.bot_user_id, channel, ts)
        self.surface.check_streaming(channel, ts, app.app_id)
        msg["text"] = str(msg.get("text") or "") + text
        self.surface.add_tasks(channel, ts, chunks)
        if blocks:
            msg["blocks"] = blocks
        if metadata:
            msg["metadata"] = metadata
        del self.surface.streams[(channel, ts)]
        # Slack: chat.stopStream moves the thread's session away from processing.
        session = self.surface.sessions.get((channel, str(msg.get("thread_ts") or ts)))
        if session is not None and session.app_id == app.app_id and session.status == "processing":
            session.status = "active"
            session.statuses.append("active")
        self._changed(channel, msg)
        return msg

    async def open_assistant_thread(
        self, user_id: str, app_ref: str, context_channel: str | None = None
    ) -> str:
        """A user opens the app's assistant pane: a new thread in their IM with the app
        (its root is the app's, as in Slack) and ``assistant_thread_started`` to the app.
        The thread's ts."""
        user, app = self.ws.resolve_user(user_id), self.app(app_ref)
        conv = self.ws.create_conversation([app.bot_user_id, user.id], kind="im")
        ch = self.channel(conv.id)
        ts = self.ws.next_ts()
        root: JSON = {
            "user": app.bot_user_id,
            "type": "message",
            "subtype": "assistant_app_thread",
            "ts": ts,
            "bot_id": app.bot_id,
            "text": "",
            "team": self.ws.team_id,
        }
        ch.by_ts[ts] = root
        ch.top.append(root)
        context = self._assistant_context(context_channel)
        self.surface.threads[(conv.id, ts)] = context
        await self._assistant_event(app, "assistant_thread_started", user.id, conv.id, ts, context)
        return ts

    async def change_assistant_context(
        self, user_id: str, app_ref: str, channel: str, thread_ts: str, context_channel: str
    ) -> None:
        """The user, pane open, switched to ``context_channel``: ``assistant_thread_context_changed``."""
        user, app = self.ws.resolve_user(user_id), self.app(app_ref)
        if (channel, thread_ts) not in self.surface.threads:
            raise EmulatorError("thread_not_found")
        context = self._assistant_context(context_channel)
        self.surface.threads[(channel, thread_ts)] = context
        await self._assistant_event(
            app, "assistant_thread_context_changed", user.id, channel, thread_ts, context
        )

    def _assistant_context(self, context_channel: str | None) -> JSON:
        context: JSON = {"team_id": self.ws.team_id, "enterprise_id": None}
        if context_channel:
            context["channel_id"] = self.channel(context_channel).conv.id
        return context

    async def _assistant_event(
        self, app: App, kind: str, user_id: str, channel: str, thread_ts: str, context: JSON
    ) -> None:
        event = {
            "type": kind,
            "assistant_thread": {
                "user_id": user_id,
                "context": context,
                "channel_id": channel,
                "thread_ts": thread_ts,
            },
            "event_ts": self.ws.next_ts(),
        }
        await self._app_event(app, event)

    def status_of(self, channel: str, thread_ts: str) -> str:
        """The status line Slack shows under the thread now ("" for none)."""
        return self.surface.status(channel, thread_ts)

    def statuses_sent(self, channel: str) -> list[tuple[str, str]]:
        """Every status sent in the conversation, oldest first: (thread_ts, status)."""
        return [(t, s) for c, t, s in self.surface.status_log if c == channel]

    def stream_calls(self, channel: str) -> dict[str, int]:
        """How many calls of each stream method were made for the conversation."""
        counts = dict.fromkeys(STREAM_METHODS, 0)
        for call in self.api_calls:
            if call.method in counts and call.params.get("channel") == channel:
                counts[call.method] += 1
        return counts

    def is_streaming(self, channel: str, ts: str) -> bool:
        return (channel, ts) in self.surface.streams

    def stream_tasks(self, channel: str, ts: str) -> list[JSON]:
        """The ``task_update`` cards of a streamed message, by task, in the order they came."""
        return [dict(t) for t in self.surface.tasks.get((channel, ts), {}).values()]

    def suggested_prompts(self, channel: str, thread_ts: str = "") -> JSON | None:
        """What the app suggested in the thread (``""``: on the conversation itself, as an
        ``agent_view`` app's DM): {"title", "prompts": [{title, message}]}."""
        found = self.surface.prompts.get((channel, thread_ts))
        return dict(found) if found is not None else None

    def thread_title(self, channel: str, thread_ts: str) -> str | None:
        return self.surface.titles.get((channel, thread_ts))

    # ---- reading ---------------------------------------------------------------------------
    def conversation_messages(self, channel: str) -> list[JSON]:
        ch = self.channel(channel)
        out = []
        for m in ch.top:
            d = dict(m)
            d["replies"] = [dict(r) for r in ch.replies.get(m["ts"], [])]
            out.append(d)
        return out

    def all_messages(self, channel: str) -> list[JSON]:
        ch = self.channel(channel)
        return sorted((dict(m) for m in ch.by_ts.values()), key=lambda m: float(m["ts"]))

    # ---- Web API faults and call log -------------------------------------------------------
    def fail_next(
        self,
        method: str,
        n: int = 1,
        error: str = "ratelimited",
        retry_after: int = 1,
        app_id: str | None = None,
    ) -> None:
        """The next ``n`` calls of ``method`` (by ``app_id`` only, when given) fail."""
        key = (method, self.app(app_id).app_id if app_id else None)
        self.faults[key] = [n, error, retry_after]

    def set_non_marketplace(self, on: bool = True) -> None:
        """Apply (or lift) the limits of a commercially distributed non-Marketplace app
        (Slack, 2025): ``conversations.history`` and ``conversations.replies`` answer at
        most ``NON_MARKETPLACE_LIMIT`` messages a call, and each app gets one call of
        each a minute; the next one is answered 429 with ``Retry-After``."""
        self.non_marketplace = on
        self._last_read.clear()

    def read_rate_limit(self, method: str, app_id: str) -> int | None:
        """Under the non-Marketplace limits, a call of a limited method that comes too
        soon: the seconds to wait (``Retry-After``), else None (and the call counts)."""
        if not self.non_marketplace or method not in NON_MARKETPLACE_METHODS:
            return None
        now = time.monotonic()
        last = self._last_read.get((app_id, method))
        if last is not None and now - last < NON_MARKETPLACE_WINDOW_S:
            return max(1, math.ceil(NON_MARKETPLACE_WINDOW_S - (now - last)))
        self._last_read[(app_id, method)] = now
        return None

    def clear_faults(self, method: str | None = None) -> None:
        """Forget the planned failures (of ``method`` only, when given)."""
        for key in [k for k in self.faults if method is None or k[0] == method]:
            del self.faults[key]

    def revoke_token(self, token: str) -> None:
        """From now on Slack answers ``token_revoked`` to calls made with ``token`` (a bot
        or app-level token), as after the app was uninstalled or the token revoked."""
        self.ws.revoked.add(token)

    def take_fault(self, method: str, app_id: str | None = None) -> tuple[str, int] | None:
        """Consume one planned failure of ``method`` for this app: (error, retry_after) or None."""
        for key in ((method, app_id), (method, None)):
            f = self.faults.get(key)
            if not f or f[0] <= 0:
                continue
            f[0] -= 1
            if f[0] <= 0:
                del self.faults[key]
            return str(f[1]), int(f[2])
        return None

    def record_call(self, call: ApiCall) -> None:
        if self.log_api_calls:
            self.api_calls.append(call)

    # ---- socket faults and figures ---------------------------------------------------------
    async def drop_sockets(self, app_id: str) -> int:
        return await self.hub.drop(self.app(app_id).app_id)

    async def send_disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        return await self.hub.disconnect(self.app(app_id).app_id, reason)

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self.hub.withhold_acks(self.app(app_id).app_id, n)

    async def inject_envelope(
        self, app_id: str, payload: Any, kind: str = "events_api", *, raw: bool = False
    ) -> None:
        """Deliver ``payload`` (any JSON value, shaped or not) as an envelope's payload,
        once, without redelivery. ``raw=True``: ``payload`` is already JSON text and goes
        into the envelope as is."""
        data = payload if raw else json.dumps(payload)
        await self.hub.deliver(
            Delivery(app_id=self.app(app_id).app_id, kind=kind, payload_json=data, retryable=False)
        )

    def zombify_sockets(self, app_id: str) -> int:
        """The app's open sockets silently stop receiving envelopes (pings still
        answered) until the client opens a new connection."""
        return self.hub.zombify(self.app(app_id).app_id)

    async def inject_frame(self, app_id: str, text: str) -> int:
        """Send a raw text frame (not an envelope) to every socket of the app."""
        return await self.hub.send_raw(self.app(app_id).app_id, text)

    def stats(self, app_id: str | None = None) -> Stats:
        return self.hub.stats(self.app(app_id).app_id if app_id else None)

    def connections(self, app_id: str) -> int:
        return self.hub.connections(self.app(app_id).app_id)

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        """Per acked envelope, the seconds from sending it to receiving its ack
        (one app, or all apps); ``clear=True`` starts a fresh measurement."""
        return self.hub.ack_latencies(self.app(app_id).app_id if app_id else None, clear)

    # ---- interactivity ---------------------------------------------------------------------
    async def click_button(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> JSON:
        """A user clicks a button on an app's message: the posting app alone gets the
        ``block_actions`` payload, once (Slack does not redeliver interactions)."""
        ch, msg, app = self._app_message(channel, message_ts)
        action = ev_mod.button_action(msg, action_id, value, self.ws.next_ts())
        return await self._clicked(self.ws.resolve_user(user_id), app, ch, msg, action)

    async def click_feedback(
        self, user_id: str, channel: str, message_ts: str, positive: bool = True
    ) -> JSON:
        """A user clicks 👍 (``positive``) or 👎 of the feedback buttons on an app's message
        (a ``feedback_buttons`` element in a ``context_actions`` block): a ``block_actions``
        payload whose action is ``type: feedback_buttons`` with that button's ``value``."""
        ch, msg, app = self._app_message(channel, message_ts)
        action = ev_mod.feedback_action(msg, positive, self.ws.next_ts())
        if action is None:
            raise EmulatorError("no_feedback_buttons")
        return await self._clicked(self.ws.resolve_user(user_id), app, ch, msg, action)

    def _app_message(self, channel: str, message_ts: str) -> tuple[Channel, JSON, App]:
        ch = self.channel(channel)
        msg = ch.by_ts.get(message_ts)
        if msg is None:
            raise EmulatorError("message_not_found")
        app = self.ws.apps.get(msg.get("app_id") or "")
        if app is None:
            raise EmulatorError("not_an_app_message")
        return ch, msg, app

    async def _clicked(self, user: User, app: App, ch: Channel, msg: JSON, action: JSON) -> JSON:
        response_url = f"{self.base_url}/_emulator/response_url/{secrets.token_hex(8)}"
        payload = ev_mod.block_actions_payload(self.ws, user, app, ch, msg, action, response_url)
        await self._interact(app, payload)
        return payload

    async def _interact(self, app: App, payload: JSON) -> None:
        await self.hub.deliver(
            Delivery(app_id=app.app_id, kind="interactive", payload_json=json.dumps(payload), retryable=False)
        )

    # ---- agent sessions, the Home tab, agent_view (``surface.py``; docs/emulator.md) ---------------
    def set_session_status(
        self,
        app: App,
        channel: str,
        thread_ts: str,
        status: str,
        title: str | None = None,
        initiator: str | None = None,
    ) -> Session:
        """``agents.sessions.setStatus``: the thread's session (made by its first status,
        titled then) now has ``status``."""
        ch = self.channel(channel)
        root = self._thread_parent(ch, thread_ts)
        if initiator is not None and initiator not in ch.member_set:
            raise EmulatorError("invalid_arguments")
        key = (ch.conv.id, str(root["ts"]))
        session = self.surface.sessions.get(key)
        if session is None:
            session = Session(app.app_id, status, title or "", initiator)
            self.surface.sessions[key] = session
        elif session.app_id != app.app_id:
            raise EmulatorError("invalid_arguments")
        session.status = status
        session.statuses.append(status)
        return session

    def rename_session(self, app: App, channel: str, thread_ts: str, title: str) -> Session:
        """``agents.sessions.rename``: a session's new title."""
        session = self.surface.sessions.get((channel, thread_ts))
        if session is None or session.app_id != app.app_id:
            raise EmulatorError("session_not_found")
        session.title = title
        return session

    def session(self, channel: str, thread_ts: str) -> JSON | None:
        """The thread's agent session: {app_id, status, title, initiator, statuses} (every
        status set, oldest first), or None."""
        found = self.surface.sessions.get((channel, thread_ts))
        if found is None:
            return None
        return {
            "app_id": found.app_id,
            "status": found.status,
            "title": found.title,
            "initiator": found.initiator,
            "statuses": list(found.statuses),
        }

    async def click_stop(self, user_id: str, channel: str, thread_ts: str) -> JSON:
        """A person clicks the Stop button of the thread's session, shown only while it is
        ``processing`` (``session_not_processing`` otherwise): Slack stops the app's streams in
        the thread and sends it ``agent_session_stopped`` (channel, thread_ts, user, event_ts,
        ``streaming_message_ts``: the streams it stopped). The status stays: the app moves it.
        The event."""
        user = self.ws.resolve_user(user_id)
        session = self.surface.sessions.get((channel, thread_ts))
        if session is None or session.status != "processing":
            raise EmulatorError("session_not_processing")
        app = self.ws.apps[session.app_id]
        ch = self.channel(channel)
        stopped = []
        for (c, ts), stream in list(self.surface.streams.items()):
            msg = ch.by_ts.get(ts)
            if c == channel and stream.app_id == app.app_id and msg and msg.get("thread_ts") == thread_ts:
                del self.surface.streams[(c, ts)]
                stopped.append(ts)
        event: JSON = {
            "type": "agent_session_stopped",
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user.id,
            "event_ts": self.ws.next_ts(),
            "streaming_message_ts": sorted(stopped),
        }
        await self._app_event(app, event)
        return event

    def publish_view(self, app: App, user_id: str, view: JSON, hash_: str | None = None) -> JSON:
        """``views.publish``: the user's Home tab of the app is now ``view``."""
        if user_id not in self.ws.users or self.ws.users[user_id].is_bot:
            raise EmulatorError("invalid_arguments")
        key = (app.app_id, user_id)
        current = self.surface.home_views.get(key)
        if hash_ is not None and current is not None and current["hash"] != hash_:
            raise EmulatorError("hash_conflict")
        view_id = current["id"] if current else self.ws.new_id("V")
        published: JSON = {
            "id": view_id,
            "team_id": self.ws.team_id,
            "type": "home",
            "close": None,
            "submit": None,
            "blocks": list(view.get("blocks") or []),
            "private_metadata": str(view.get("private_metadata") or ""),
            "callback_id": str(view.get("callback_id") or ""),
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "clear_on_close": False,
            "notify_on_close": False,
            "root_view_id": view_id,
            "previous_view_id": None,
            "app_id": app.app_id,
            "external_id": str(view.get("external_id") or ""),
            "app_installed_team_id": self.ws.team_id,
            "bot_id": app.bot_id,
        }
        self.surface.home_views[key] = published
        return dict(published)

    def home_view(self, app_ref: str, user_id: str) -> JSON | None:
        """What the user's Home tab of the app shows: the view last published, or None."""
        found = self.surface.home_views.get((self.app(app_ref).app_id, self.ws.resolve_user(user_id).id))
        return dict(found) if found is not None else None

    async def open_app_home(self, user_id: str, app_ref: str, tab: str = "home") -> JSON:
        """A person opens the app's Home (``tab="home"``) or Messages (``"messages"``, an
        ``agent_view`` app's DM) tab: ``app_home_opened`` (user, channel: their DM with the app,
        tab, event_ts; ``view`` when a Home view was published). The event."""
        if tab not in ("home", "messages"):
            raise ValueError("tab must be 'home' or 'messages'")
        user, app = self.ws.resolve_user(user_id), self.app(app_ref)
        im = self.ws.create_conversation([app.bot_user_id, user.id], kind="im")
        event: JSON = {
            "type": "app_home_opened",
            "user": user.id,
            "channel": im.id,
            "tab": tab,
            "event_ts": self.ws.next_ts(),
        }
        view = self.surface.home_views.get((app.app_id, user.id))
        if tab == "home" and view is not None:
            event["view"] = dict(view)
        await self._app_event(app, event)
        return event

    async def change_app_context(self, app_ref: str, channel: str | None = None) -> JSON:
        """What a person views beside an ``agent_view`` app changed: ``app_context_changed``
        with ``context.entities`` (the channel, as Slack's ``slack#/types/channel_id``), or an
        empty ``context`` for none. Slack's event names no user. The event."""
        app = self.app(app_ref)
        context: JSON = {}
        if channel is not None:
            cid = self.channel(channel).conv.id
            context = {
                "entities": [{"type": "slack#/types/channel_id", "value": cid, "team_id": self.ws.team_id}]
            }
        event: JSON = {"type": "app_context_changed", "context": context}
        await self._app_event(app, event)
        return event

    async def click_home_button(
        self, user_id: str, app_ref: str, action_id: str, value: str | None = None
    ) -> JSON:
        """A person clicks the button ``action_id`` in their Home view of the app: a
        ``block_actions`` payload with ``container.type: view`` and the ``view``. The payload."""
        user, app = self.ws.resolve_user(user_id), self.app(app_ref)
        view = self.surface.home_views.get((app.app_id, user.id))
        if view is None:
            raise EmulatorError("view_not_found")
        action = ev_mod.button_action(view, action_id, value, self.ws.next_ts())
        payload = ev_mod.view_actions_payload(self.ws, user, app, view, action)
        await self._interact(app, payload)
        return payload

    async def _app_event(self, app: App, event: JSON) -> None:
        """An event for one app, when it subscribes to its type."""
        if event["type"] not in app.events:
            return
        payload = ev_mod.callback_json(
            self.ws, app, json.dumps(event), self.ws.next_event_id(), int(time.time())
        )
        await self.hub.deliver(Delivery(app_id=app.app_id, kind="events_api", payload_json=payload))


def _add_reply(ch: Channel, parent: JSON, msg: JSON) -> None:
    """File a reply under its root and keep the root's thread summary current."""
    reps = ch.replies.setdefault(parent["ts"], [])
    reps.append(msg)
    parent["thread_ts"] = parent["ts"]
    parent["reply_count"] = len(reps)
    users = parent.setdefault("reply_users", [])
    if msg["user"] not in users:
        users.append(msg["user"])
    parent["reply_users_count"] = len(users)
    parent["latest_reply"] = msg["ts"]
