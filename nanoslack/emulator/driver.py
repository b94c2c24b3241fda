"""The Python drivers tests use: ``Emulator`` (async) and ``ThreadedEmulator`` (sync).

Both are thin: the workspace's behaviour lives in the engine, serving it in the server.
A driver starts and stops them, forwards its calls to the engine and waits on conditions.
The two expose the same methods with the same parameters (tests/emulator checks it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from types import TracebackType
from typing import Any, TypeVar

from .engine import Engine
from .server import Server
from .state import ApiCall, App, Conversation, Stats, User

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
        self.engine = Engine(
            ack_timeout=ack_timeout,
            max_retries=max_retries,
            deliver_own_posts=deliver_own_posts,
            mpim_prefix=mpim_prefix,
            team_id=team_id,
            team_name=team_name,
            log_api_calls=log_api_calls,
        )
        self._server = Server(self.engine)

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, port: int = 0) -> Emulator:
        await self._server.start(port)
        self.engine.start()
        return self

    async def stop(self) -> None:
        await self.engine.stop()
        await self._server.stop()

    async def __aenter__(self) -> Emulator:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @staticmethod
    def in_thread(**kwargs: Any) -> ThreadedEmulator:
        """The same driver, sync, on its own event loop (``port=`` picks the port)."""
        return ThreadedEmulator(**kwargs)

    @property
    def port(self) -> int:
        return self.engine.port

    @property
    def api_url(self) -> str:
        return self.engine.api_url

    @property
    def base_url(self) -> str:
        return self.engine.base_url

    @property
    def api_calls(self) -> list[ApiCall]:
        """The Web API calls so far, oldest first (the live log)."""
        return self.engine.api_calls

    # ---- workspace -------------------------------------------------------------------------
    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User:
        return self.engine.add_user(name, real_name=real_name, id=id)

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
        return self.engine.add_app(
            name,
            app_id=app_id,
            bot_id=bot_id,
            bot_user_id=bot_user_id,
            bot_token=bot_token,
            app_token=app_token,
            events=events,
        )

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation:
        return self.engine.create_conversation(members, kind=kind, name=name, id=id)

    def users(self) -> list[User]:
        return self.engine.users()

    def apps(self) -> list[App]:
        return self.engine.apps()

    def conversations(self) -> list[Conversation]:
        return self.engine.conversations()

    def app(self, ref: str) -> App:
        """An app by app_id, name, bot_id or bot user id."""
        return self.engine.app(ref)

    # ---- users act -------------------------------------------------------------------------
    async def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        return await self.engine.post_as_user(user_id, channel, text, thread_ts)

    async def bulk_post(self, user_id: str, channel: str, texts: list[str]) -> list[str]:
        return await self.engine.bulk_post(user_id, channel, texts)

    async def click_button(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> JSON:
        return await self.engine.click_button(user_id, channel, message_ts, action_id, value)

    async def react(self, user_id: str, channel: str, ts: str, reaction: str) -> None:
        await self.engine.react(user_id, channel, ts, reaction)

    # ---- reading ---------------------------------------------------------------------------
    def conversation_messages(self, channel: str) -> list[JSON]:
        return self.engine.conversation_messages(channel)

    def all_messages(self, channel: str) -> list[JSON]:
        return self.engine.all_messages(channel)

    def stats(self, app_id: str | None = None) -> Stats:
        return self.engine.stats(app_id)

    def connections(self, app_id: str) -> int:
        return self.engine.connections(app_id)

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        return self.engine.ack_latencies(app_id, clear)

    # ---- faults ----------------------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        n: int = 1,
        error: str = "ratelimited",
        retry_after: int = 1,
        app_id: str | None = None,
    ) -> None:
        self.engine.fail_next(method, n, error, retry_after, app_id)

    async def drop_sockets(self, app_id: str) -> int:
        return await self.engine.drop_sockets(app_id)

    async def send_disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        return await self.engine.send_disconnect(app_id, reason)

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self.engine.withhold_acks(app_id, n)

    async def inject_envelope(
        self, app_id: str, payload: Any, kind: str = "events_api", *, raw: bool = False
    ) -> None:
        await self.engine.inject_envelope(app_id, payload, kind, raw=raw)

    def zombify_sockets(self, app_id: str) -> int:
        return self.engine.zombify_sockets(app_id)

    async def inject_frame(self, app_id: str, text: str) -> int:
        return await self.engine.inject_frame(app_id, text)

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

    # ---- lifecycle -------------------------------------------------------------------------
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
        """Run ``fn`` on the emulator's loop: the engine is not thread-safe."""

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
        """The Web API calls so far, oldest first (a copy)."""
        return self._call(lambda: list(self._e.api_calls))

    # ---- workspace -------------------------------------------------------------------------
    def add_user(self, name: str, real_name: str | None = None, id: str | None = None) -> User:
        return self._call(lambda: self._e.add_user(name, real_name=real_name, id=id))

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
        return self._call(
            lambda: self._e.add_app(
                name,
                app_id=app_id,
                bot_id=bot_id,
                bot_user_id=bot_user_id,
                bot_token=bot_token,
                app_token=app_token,
                events=events,
            )
        )

    def create_conversation(
        self, members: list[str], kind: str = "mpim", name: str | None = None, id: str | None = None
    ) -> Conversation:
        return self._call(lambda: self._e.create_conversation(members, kind=kind, name=name, id=id))

    def users(self) -> list[User]:
        return self._call(self._e.users)

    def apps(self) -> list[App]:
        return self._call(self._e.apps)

    def conversations(self) -> list[Conversation]:
        return self._call(self._e.conversations)

    def app(self, ref: str) -> App:
        return self._call(lambda: self._e.app(ref))

    # ---- users act -------------------------------------------------------------------------
    def post_as_user(self, user_id: str, channel: str, text: str, thread_ts: str | None = None) -> str:
        return self._acall(self._e.post_as_user(user_id, channel, text, thread_ts))

    def bulk_post(self, user_id: str, channel: str, texts: list[str]) -> list[str]:
        return self._acall(self._e.bulk_post(user_id, channel, texts))

    def click_button(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> JSON:
        return self._acall(self._e.click_button(user_id, channel, message_ts, action_id, value))

    def react(self, user_id: str, channel: str, ts: str, reaction: str) -> None:
        self._acall(self._e.react(user_id, channel, ts, reaction))

    # ---- reading ---------------------------------------------------------------------------
    def conversation_messages(self, channel: str) -> list[JSON]:
        return self._call(lambda: self._e.conversation_messages(channel))

    def all_messages(self, channel: str) -> list[JSON]:
        return self._call(lambda: self._e.all_messages(channel))

    def stats(self, app_id: str | None = None) -> Stats:
        return self._call(lambda: self._e.stats(app_id))

    def connections(self, app_id: str) -> int:
        return self._call(lambda: self._e.connections(app_id))

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        return self._call(lambda: self._e.ack_latencies(app_id, clear))

    # ---- faults ----------------------------------------------------------------------------
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

    def inject_envelope(
        self, app_id: str, payload: Any, kind: str = "events_api", *, raw: bool = False
    ) -> None:
        self._acall(self._e.inject_envelope(app_id, payload, kind, raw=raw))

    def zombify_sockets(self, app_id: str) -> int:
        return self._call(lambda: self._e.zombify_sockets(app_id))

    def inject_frame(self, app_id: str, text: str) -> int:
        return self._acall(self._e.inject_frame(app_id, text))

    # ---- waiting ---------------------------------------------------------------------------
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
