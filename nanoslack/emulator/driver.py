"""The Emulator: owns state, server and socket hub; the Python driver API."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

from . import events as ev_mod
from .socket import Delivery, SocketHub
from .state import ApiCall, App, Channel, Conversation, Stats, User, Workspace, rich_text_blocks

JSON = dict[str, Any]
T = TypeVar("T")


def _poll(
    predicate: Callable[[], Any],
    deadline: float,
    timeout: float,
    message: str | None,
    stats: Callable[[], Stats],
) -> Any:
    """One look at a ``wait_for`` condition: its truthy value, or None to keep
    waiting; past the deadline a TimeoutError that shows the socket counters."""
    value = predicate()
    if value:
        return value
    if time.monotonic() >= deadline:
        what = message or f"condition {getattr(predicate, '__name__', predicate)!r} not met"
        raise TimeoutError(f"{what} within {timeout}s; stats={asdict(stats())}")
    return None


class EmulatorError(Exception):
    """A Slack-style error raised by the emulator's internals (mapped to ok:false)."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class Emulator:
    """A stateful, wire-compatible Slack workspace on 127.0.0.1 (async driver API)."""

    def __init__(
        self,
        ack_timeout: float = 3.0,
        max_retries: int = 3,
        deliver_own_posts: bool = True,
        mpim_prefix: str = "C",
        team_id: str = "T0EMULATOR",
        team_name: str = "nanoslack-emu",
        log_api_calls: bool = True,
    ) -> None:
        self.ws = Workspace(team_id=team_id, team_name=team_name, mpim_prefix=mpim_prefix)
        self.hub = SocketHub(ack_timeout=ack_timeout, max_retries=max_retries)
        self.deliver_own_posts = deliver_own_posts
        self.log_api_calls = log_api_calls
        self.api_calls: list[ApiCall] = []
        # (method, app_id or None for any app) -> [remaining, error, retry_after]
        self.faults: dict[tuple[str, str | None], list[Any]] = {}
        self.response_url_posts: list[JSON] = []
        self.port: int = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> Emulator:
        from .server import build_app

        app = build_app(self)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=512)
        await self._site.start()
        server = self._site._server  # noqa: SLF001
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])
        self.hub.start()
        return self

    async def stop(self) -> None:
        await self.hub.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Emulator:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @staticmethod
    def in_thread(**kwargs: Any) -> ThreadedEmulator:
        return ThreadedEmulator(**kwargs)

    # ---- workspace -------------------------------------------------------------------------
    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User:
        return self.ws.add_user(name, real_name=real_name, id=id)

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
    ) -> App:
        app = self.ws.add_app(
            name,
            app_id=app_id,
            bot_id=bot_id,
            bot_user_id=bot_user_id,
            bot_token=bot_token,
            app_token=app_token,
            events=events,
        )
        self.hub.app(app.app_id)
        return app

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation:
        return self.ws.create_conversation(members, kind=kind, name=name, id=id)

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

    # ---- posting ---------------------------------------------------------------------------
    def channel(self, channel: str) -> Channel:
        ch = self.ws.channels.get(channel)
        if ch is None:
            raise EmulatorError("channel_not_found")
        return ch

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
        ch = self.channel(channel)
        if author.id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        parent: JSON | None = None
        if thread_ts:
            parent = ch.by_ts.get(thread_ts)
            if parent is None:
                raise EmulatorError("thread_not_found")
            if parent.get("thread_ts") and parent["thread_ts"] != parent["ts"]:
                parent = ch.by_ts[parent["thread_ts"]]
        w = self.ws
        ts = w.next_ts()
        msg: JSON = {"user": author.id, "type": "message", "ts": ts}
        app: App | None = None
        if author.is_bot:
            app = w.apps_by_bot_user[author.id]
            msg["bot_id"] = app.bot_id
            msg["app_id"] = app.app_id
        msg["text"] = text
        msg["team"] = w.team_id
        if app is not None:
            msg["bot_profile"] = ev_mod.bot_profile(w, app)
        if human:
            msg["client_msg_id"] = secrets.token_hex(16)
            msg["blocks"] = blocks if blocks is not None else rich_text_blocks(text)
        elif blocks is not None:
            msg["blocks"] = blocks
        if parent is not None:
            msg["thread_ts"] = parent["ts"]
            msg["parent_user_id"] = parent["user"]
        if metadata:
            msg["metadata"] = metadata
        if extra:
            msg.update(extra)
        ch.by_ts[ts] = msg
        if parent is not None:
            reps = ch.replies.setdefault(parent["ts"], [])
            reps.append(msg)
            parent["thread_ts"] = parent["ts"]
            parent["reply_count"] = len(reps)
            users = parent.setdefault("reply_users", [])
            if author.id not in users:
                users.append(author.id)
            parent["reply_users_count"] = len(users)
            parent["latest_reply"] = ts
        else:
            ch.top.append(msg)
        await self.emit(ch, ev_mod.message_event(w, ch, msg), app)
        return msg

    async def emit(
        self, ch: Channel, event: JSON, poster_app: App | None, subscription: str | None = None
    ) -> None:
        targets = ev_mod.fan_out(self.ws, ch, event, poster_app, self.deliver_own_posts, subscription)
        if not targets:
            return
        event_time = int(time.time())
        cache: dict[int, str] = {}
        for app, _etype, e in targets:
            ej = cache.get(id(e))
            if ej is None:
                ej = cache[id(e)] = json.dumps(e, separators=(",", ":"))
            payload = ev_mod.callback_json(self.ws, app, ej, self.ws.next_event_id(), event_time)
            await self.hub.deliver(Delivery(app_id=app.app_id, kind="events_api", payload_json=payload))

    async def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        user = self.ws.resolve_user(user_id)
        msg = await self.post_message(user, channel, text, thread_ts=thread_ts, human=not user.is_bot)
        return str(msg["ts"])

    async def bulk_post(self, user_id: str, channel: str, texts: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(texts):
            out.append(await self.post_as_user(user_id, channel, t))
            if i % 20 == 19:
                await asyncio.sleep(0)
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
        ch = self.channel(channel)
        if app.bot_user_id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        msg = ch.by_ts.get(ts)
        if msg is None:
            raise EmulatorError("message_not_found")
        if msg.get("user") != app.bot_user_id:
            raise EmulatorError("cant_update_message")
        previous = dict(msg)
        if text is not None:
            msg["text"] = text
        if blocks is not None:
            msg["blocks"] = blocks
        if metadata:
            msg["metadata"] = metadata
        msg["edited"] = {"user": app.bot_user_id, "ts": self.ws.next_ts()}
        strip = ("reply_users", "reply_users_count", "latest_reply")
        event: JSON = {
            "type": "message",
            "subtype": "message_changed",
            "message": {k: v for k, v in msg.items() if k not in strip},
            "previous_message": {k: v for k, v in previous.items() if k not in strip},
            "channel": ch.conv.id,
            "hidden": True,
            "ts": self.ws.next_ts(),
            "event_ts": "",
            "channel_type": ev_mod.CHANNEL_TYPE[ch.conv.kind],
        }
        event["event_ts"] = event["ts"]
        await self.emit_no_mentions(ch, event, app)
        return msg

    async def emit_no_mentions(self, ch: Channel, event: JSON, poster: App | None) -> None:
        await self.emit(ch, event, poster, subscription=ev_mod.SUBSCRIPTION[ch.conv.kind])

    async def add_reaction(self, user: User, channel: str, ts: str, name: str) -> None:
        ch = self.channel(channel)
        if user.id not in ch.member_set:
            raise EmulatorError("not_in_channel")
        msg = ch.by_ts.get(ts)
        if msg is None:
            raise EmulatorError("message_not_found")
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
        event: JSON = {
            "type": "reaction_added",
            "user": user.id,
            "reaction": name,
            "item_user": msg.get("user"),
            "item": {"type": "message", "channel": channel, "ts": ts},
            "event_ts": self.ws.next_ts(),
        }
        await self.emit(ch, event, None, subscription="reaction_added")

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

    # ---- faults ----------------------------------------------------------------------------
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

    def take_fault(self, method: str, app_id: str | None = None) -> tuple[str, int] | None:
        for key in ((method, app_id), (method, None)):
            f = self.faults.get(key)
            if not f or f[0] <= 0:
                continue
            f[0] -= 1
            if f[0] <= 0:
                del self.faults[key]
            return str(f[1]), int(f[2])
        return None

    async def drop_sockets(self, app_id: str) -> int:
        return await self.hub.drop(self.app(app_id).app_id)

    async def send_disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        return await self.hub.disconnect(self.app(app_id).app_id, reason)

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self.hub.withhold_acks(self.app(app_id).app_id, n)

    async def inject_envelope(
        self, app_id: str, payload: Any, kind: str = "events_api", *, raw: bool = False
    ) -> None:
        """Fault injection: deliver ``payload`` (any JSON value, shaped or not) as an
        envelope's payload, once, without redelivery. ``raw=True``: ``payload`` is
        already JSON text and goes into the envelope as is."""
        data = payload if raw else json.dumps(payload)
        await self.hub.deliver(
            Delivery(app_id=self.app(app_id).app_id, kind=kind, payload_json=data, retryable=False)
        )

    def zombify_sockets(self, app_id: str) -> int:
        """Fault injection: the app's open sockets silently stop receiving envelopes
        (pings still answered) until the client opens a new connection."""
        return self.hub.zombify(self.app(app_id).app_id)

    async def inject_frame(self, app_id: str, text: str) -> int:
        """Fault injection: send a raw text frame (not an envelope) to every socket of the app."""
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
        user = self.ws.resolve_user(user_id)
        ch = self.channel(channel)
        msg = ch.by_ts.get(message_ts)
        if msg is None:
            raise EmulatorError("message_not_found")
        app = self.ws.apps.get(msg.get("app_id") or "")
        if app is None:
            raise EmulatorError("not_an_app_message")
        block_id, text, found_value = "emu_block", action_id, value
        for block in msg.get("blocks") or []:
            for el in block.get("elements") or []:
                if isinstance(el, dict) and el.get("action_id") == action_id:
                    block_id = block.get("block_id", block_id)
                    t = el.get("text")
                    text = t.get("text", text) if isinstance(t, dict) else text
                    if value is None:
                        found_value = el.get("value")
            acc = block.get("accessory")
            if isinstance(acc, dict) and acc.get("action_id") == action_id:
                block_id = block.get("block_id", block_id)
                if value is None:
                    found_value = acc.get("value")
        action_ts = self.ws.next_ts()
        action: JSON = {
            "action_id": action_id,
            "block_id": block_id,
            "text": {"type": "plain_text", "text": text, "emoji": True},
            "type": "button",
            "action_ts": action_ts,
        }
        if found_value is not None:
            action["value"] = found_value
        payload: JSON = {
            "type": "block_actions",
            "user": {"id": user.id, "username": user.name, "name": user.name, "team_id": self.ws.team_id},
            "api_app_id": app.app_id,
            "token": app.verification_token,
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**12)}.{secrets.token_hex(16)}",
            "team": {"id": self.ws.team_id, "domain": self.ws.domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": ch.conv.name or ch.conv.id},
            "message": dict(msg),
            "state": {"values": {}},
            "response_url": f"{self.base_url}/_emulator/response_url/{secrets.token_hex(8)}",
            "actions": [action],
        }
        await self.hub.deliver(
            Delivery(app_id=app.app_id, kind="interactive", payload_json=json.dumps(payload), retryable=False)
        )
        return payload

    # ---- waiting ---------------------------------------------------------------------------
    async def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 5.0,  # noqa: ASYNC109
        interval: float = 0.01,
        message: str | None = None,
    ) -> Any:
        deadline = time.monotonic() + timeout
        # Polling is the point: the predicate is arbitrary test state, nothing to await.
        while (r := _poll(predicate, deadline, timeout, message, self.stats)) is None:  # noqa: ASYNC110
            await asyncio.sleep(interval)
        return r


class ThreadedEmulator:
    """The Emulator on its own event loop in a daemon thread; every driver method is sync."""

    def __init__(self, port: int = 0, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._port = port
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="slack-emulator", daemon=True)
        self.emu: Emulator | None = None

    # lifecycle
    def start(self) -> ThreadedEmulator:
        self._thread.start()

        async def _mk() -> Emulator:
            return await Emulator(**self._kwargs).start(self._port)

        self.emu = asyncio.run_coroutine_threadsafe(_mk(), self.loop).result(10)
        return self

    def stop(self) -> None:
        if self.emu is not None:
            asyncio.run_coroutine_threadsafe(self.emu.stop(), self.loop).result(10)
            self.emu = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()

    def __enter__(self) -> ThreadedEmulator:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def _e(self) -> Emulator:
        assert self.emu is not None, "emulator not started"
        return self.emu

    def _call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def _acall(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    @property
    def port(self) -> int:
        return self._e.port

    @property
    def api_url(self) -> str:
        return self._e.api_url

    @property
    def base_url(self) -> str:
        return self._e.base_url

    @property
    def api_calls(self) -> list[ApiCall]:
        return self._call(lambda: list(self._e.api_calls))

    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User:
        return self._call(lambda: self._e.add_user(name, real_name=real_name, id=id))

    def add_app(self, name: str, **kw: Any) -> App:
        return self._call(lambda: self._e.add_app(name, **kw))

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation:
        return self._call(lambda: self._e.create_conversation(members, kind=kind, name=name, id=id))

    def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        return self._acall(self._e.post_as_user(user_id, channel, text, thread_ts))

    def bulk_post(self, user_id: str, channel: str, texts: list[str]) -> list[str]:
        return self._acall(self._e.bulk_post(user_id, channel, texts))

    def conversation_messages(self, channel: str) -> list[JSON]:
        return self._call(lambda: self._e.conversation_messages(channel))

    def all_messages(self, channel: str) -> list[JSON]:
        return self._call(lambda: self._e.all_messages(channel))

    def fail_next(
        self,
        method: str,
        n: int = 1,
        error: str = "ratelimited",
        retry_after: int = 1,
        app_id: str | None = None,
    ) -> None:
        self._call(lambda: self._e.fail_next(method, n, error, retry_after, app_id))

    def drop_sockets(self, app_id: str) -> int:
        return self._acall(self._e.drop_sockets(app_id))

    def send_disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        return self._acall(self._e.send_disconnect(app_id, reason))

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self._call(lambda: self._e.withhold_acks(app_id, n))

    def stats(self, app_id: str | None = None) -> Stats:
        return self._call(lambda: self._e.stats(app_id))

    def connections(self, app_id: str) -> int:
        return self._call(lambda: self._e.connections(app_id))

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        return self._call(lambda: self._e.ack_latencies(app_id, clear))

    def click_button(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> JSON:
        return self._acall(self._e.click_button(user_id, channel, message_ts, action_id, value))

    def users(self) -> list[User]:
        return self._call(self._e.users)

    def apps(self) -> list[App]:
        return self._call(self._e.apps)

    def conversations(self) -> list[Conversation]:
        return self._call(self._e.conversations)

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 5.0,
        interval: float = 0.01,
        message: str | None = None,
    ) -> Any:
        deadline = time.monotonic() + timeout
        while (r := _poll(predicate, deadline, timeout, message, self.stats)) is None:
            time.sleep(interval)
        return r
