"""The Python drivers tests use: ``Emulator`` (async) and ``ThreadedEmulator`` (sync).

Both are thin: the workspace's behaviour lives in the engine, serving it in the server.
Every driver method is the engine's own (or, for users, apps and conversations, the
workspace state's), named once in ``Driver``, so its parameters are written once, there.
The two drivers differ only in how a call runs: the async driver calls the engine on its
own loop and hands back the engine's coroutines to await; the sync driver runs each call on
the emulator's thread and blocks for the result. mypy sees the engine's parameters on both
drivers, and on the sync one the awaited result (ParamSpec).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Generator
from dataclasses import asdict
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, overload

from .engine import Engine, Options
from .server import Server
from .state import ApiCall, Workspace

JSON = dict[str, Any]
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")  # the part of the engine a method belongs to: the engine or its workspace state
Looks = Generator[float, None, R]  # a wait written once: it yields the seconds to pause between looks


def _of_engine(engine: Engine) -> Engine:
    return engine


def _of_state(engine: Engine) -> Workspace:
    return engine.ws


def _method(impl: Callable[..., Any], fn: Callable[..., Any], **sig: Any) -> Callable[..., Any]:
    """``impl`` under ``fn``'s name, docstring and signature (what help() and the tests read)."""
    functools.update_wrapper(impl, fn, assigned=("__module__", "__name__", "__doc__"))
    impl.__qualname__ = f"Driver.{fn.__name__}"
    impl.__signature__ = inspect.signature(fn).replace(**sig)  # type: ignore[attr-defined]
    return impl


class _Plain(Generic[S, P, R]):
    """A driver method that is a plain engine method: both drivers answer its result;
    the sync driver runs it on the emulator's loop (the engine is not thread-safe)."""

    def __init__(self, fn: Callable[Concatenate[S, P], R], part: Callable[[Engine], S]) -> None:
        def call(driver: Driver, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return driver._on_loop(lambda: fn(part(driver.engine), *args, **kwargs))

        self._call = _method(call, fn)

    @overload
    def __get__(self, driver: None, owner: type) -> Callable[..., R]: ...
    @overload
    def __get__(self, driver: Driver, owner: type) -> Callable[P, R]: ...
    def __get__(self, driver: Driver | None, owner: type) -> Callable[..., R]:
        return self._call if driver is None else types.MethodType(self._call, driver)


class _Twin(Generic[P, R]):
    """A driver method in two builds from one definition: ``awaitable`` for the async
    driver, ``blocking`` for the sync one."""

    def __init__(self, awaitable: Callable[..., Any], blocking: Callable[..., Any]) -> None:
        self._async, self._sync = awaitable, blocking

    @overload
    def __get__(self, driver: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, driver: Emulator, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __get__(self, driver: ThreadedEmulator, owner: type) -> Callable[P, R]: ...
    def __get__(self, driver: Driver | None, owner: type) -> Callable[..., Any]:
        call = self._sync if issubclass(owner, ThreadedEmulator) else self._async
        return call if driver is None else types.MethodType(call, driver)


class _Awaited(_Twin[P, R]):
    """A driver method that is an engine coroutine: awaitable on the async driver,
    blocking until it is done on the sync one."""

    def __init__(self, fn: Callable[Concatenate[Engine, P], Coroutine[Any, Any, R]]) -> None:
        async def awaitable(driver: Emulator, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await fn(driver.engine, *args, **kwargs)

        def blocking(driver: ThreadedEmulator, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return driver._block(fn(driver.engine, *args, **kwargs))

        super().__init__(_method(awaitable, fn), _method(blocking, fn))


class _Polling(_Twin[P, R]):
    """A driver method written once as a generator of pauses (``Looks``): the async
    driver sleeps them with asyncio, the sync one with time.sleep."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Looks[R]]) -> None:
        async def awaitable(driver: Emulator, /, *args: P.args, **kwargs: P.kwargs) -> R:
            looks = fn(driver, *args, **kwargs)
            try:
                # Polling is the point: the predicate is arbitrary test state, nothing to await.
                while True:  # noqa: ASYNC110
                    await asyncio.sleep(next(looks))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

        def blocking(driver: ThreadedEmulator, /, *args: P.args, **kwargs: P.kwargs) -> R:
            looks = fn(driver, *args, **kwargs)
            try:
                while True:
                    time.sleep(next(looks))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

        # what a caller gets is the generator's return value, not the generator
        super().__init__(
            _method(awaitable, fn, return_annotation="Any"), _method(blocking, fn, return_annotation="Any")
        )


class Driver(ABC):
    """Both drivers' methods and properties, each written once."""

    _engine: Engine | None = None

    @abstractmethod
    def _on_loop(self, call: Callable[[], R]) -> R:
        """Run ``call`` where the engine lives, and answer its result."""

    @property
    def engine(self) -> Engine:
        """The workspace itself (not thread-safe: touch it only on the emulator's loop)."""
        assert self._engine is not None, "emulator not started"
        return self._engine

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
        """The Web API calls so far, oldest first (a copy)."""
        return self._on_loop(lambda: list(self.engine.api_calls))

    # ---- workspace -------------------------------------------------------------------------
    add_user = _Plain(Workspace.add_user, _of_state)
    add_app = _Plain(Workspace.add_app, _of_state)
    create_conversation = _Plain(Workspace.create_conversation, _of_state)
    users = _Plain(Engine.users, _of_engine)
    apps = _Plain(Engine.apps, _of_engine)
    conversations = _Plain(Engine.conversations, _of_engine)
    app = _Plain(Engine.app, _of_engine)

    # ---- users act -------------------------------------------------------------------------
    post_as_user = _Awaited(Engine.post_as_user)
    bulk_post = _Awaited(Engine.bulk_post)
    click_button = _Awaited(Engine.click_button)
    react = _Awaited(Engine.react)
    edit_as_user = _Awaited(Engine.edit_as_user)
    delete_as_user = _Awaited(Engine.delete_as_user)
    share_file = _Awaited(Engine.share_file)

    # ---- files -----------------------------------------------------------------------------
    set_file_fault = _Plain(Engine.set_file_fault, _of_engine)
    file_content = _Plain(Engine.file_content, _of_engine)

    # ---- reading ---------------------------------------------------------------------------
    conversation_messages = _Plain(Engine.conversation_messages, _of_engine)
    all_messages = _Plain(Engine.all_messages, _of_engine)
    stats = _Plain(Engine.stats, _of_engine)
    connections = _Plain(Engine.connections, _of_engine)
    ack_latencies = _Plain(Engine.ack_latencies, _of_engine)

    # ---- the agent surface -------------------------------------------------------------
    open_assistant_thread = _Awaited(Engine.open_assistant_thread)
    change_assistant_context = _Awaited(Engine.change_assistant_context)
    status_of = _Plain(Engine.status_of, _of_engine)
    statuses_sent = _Plain(Engine.statuses_sent, _of_engine)
    stream_calls = _Plain(Engine.stream_calls, _of_engine)
    is_streaming = _Plain(Engine.is_streaming, _of_engine)
    stream_tasks = _Plain(Engine.stream_tasks, _of_engine)
    suggested_prompts = _Plain(Engine.suggested_prompts, _of_engine)
    thread_title = _Plain(Engine.thread_title, _of_engine)
    session = _Plain(Engine.session, _of_engine)
    click_stop = _Awaited(Engine.click_stop)
    home_view = _Plain(Engine.home_view, _of_engine)
    open_app_home = _Awaited(Engine.open_app_home)
    change_app_context = _Awaited(Engine.change_app_context)
    click_feedback = _Awaited(Engine.click_feedback)
    click_home_button = _Awaited(Engine.click_home_button)

    # ---- faults ----------------------------------------------------------------------------
    fail_next = _Plain(Engine.fail_next, _of_engine)
    set_non_marketplace = _Plain(Engine.set_non_marketplace, _of_engine)
    clear_faults = _Plain(Engine.clear_faults, _of_engine)
    revoke_token = _Plain(Engine.revoke_token, _of_engine)
    drop_sockets = _Awaited(Engine.drop_sockets)
    send_disconnect = _Awaited(Engine.send_disconnect)
    withhold_acks = _Plain(Engine.withhold_acks, _of_engine)
    inject_envelope = _Awaited(Engine.inject_envelope)
    zombify_sockets = _Plain(Engine.zombify_sockets, _of_engine)
    inject_frame = _Awaited(Engine.inject_frame)

    # ---- waiting ---------------------------------------------------------------------------
    @_Polling
    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 5.0,
        interval: float = 0.01,
        message: str | None = None,
    ) -> Looks[Any]:
        """``predicate``'s first truthy value, looking every ``interval`` seconds; past
        ``timeout`` a TimeoutError that shows the socket counters. The predicate runs in
        the caller's thread (on the sync driver it may call the driver)."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() >= deadline:
                what = message or f"condition {getattr(predicate, '__name__', predicate)!r} not met"
                raise TimeoutError(f"{what} within {timeout}s; stats={asdict(self.stats())}")
            yield interval
        return value


class ThreadedEmulator(Driver):
    """The Emulator on its own event loop in a daemon thread; every driver method is sync."""

    def __init__(self, port: int = 0, **options: Unpack[Options]) -> None:
        self._options = options
        self._port = port
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="slack-emulator", daemon=True)
        self._emu: Emulator | None = None

    def start(self) -> ThreadedEmulator:
        self._thread.start()

        async def started() -> Emulator:
            return await Emulator(**self._options).start(self._port)

        self._emu = asyncio.run_coroutine_threadsafe(started(), self.loop).result(10)
        self._engine = self._emu.engine
        return self

    def stop(self) -> None:
        if self._emu is not None:
            asyncio.run_coroutine_threadsafe(self._emu.stop(), self.loop).result(10)
            self._emu = self._engine = None
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

    def _on_loop(self, call: Callable[[], R]) -> R:
        async def run() -> R:
            return call()

        return self._block(run())

    def _block(self, coro: Coroutine[Any, Any, R]) -> R:
        assert self._emu is not None, "emulator not started"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


class Emulator(Driver):
    """A stateful, wire-compatible Slack workspace on 127.0.0.1 (async driver API)."""

    # The same driver, sync, on its own event loop (``port=`` picks the port).
    in_thread = ThreadedEmulator

    def __init__(self, **options: Unpack[Options]) -> None:
        self._engine = Engine(**options)
        self._server = Server(self._engine)

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

    def _on_loop(self, call: Callable[[], R]) -> R:
        return call()  # the async driver is used on the emulator's loop already


def apply_workspace(emu: Driver, spec: JSON) -> None:
    """Create the users, apps and conversations of a workspace spec (call before clients connect)."""
    for u in spec.get("users", []):
        emu.add_user(u["name"], real_name=u.get("real_name"), id=u.get("id"))
    for a in spec.get("apps", []):
        kw = {
            k: a[k]
            for k in ("app_id", "bot_id", "bot_user_id", "bot_token", "app_token", "events")
            if a.get(k)
        }
        if a.get("scopes") is not None:  # [] is an app with no scope at all
            kw["scopes"] = list(a["scopes"])
        emu.add_app(a["name"], **kw)
    for c in spec.get("conversations", []):
        emu.create_conversation(
            list(c["members"]), kind=c.get("kind", "mpim"), name=c.get("name"), id=c.get("id")
        )
