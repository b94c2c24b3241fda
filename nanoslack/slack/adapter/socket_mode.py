"""One app's Socket Mode connection on aiohttp's public WebSocket client.

Three tasks per connection, on the caller's loop:

- the reader takes frames off the WebSocket into a bounded list. When the list is
  full it stops reading: the socket's buffers fill and Slack waits, nothing piles up
  in memory. It answers the server's pings and hands the connection over when it ends;
- the pump hands the consumer everything read since its last call, in arrival order,
  and waits for it: the consumer records and acks a batch while the reader reads the
  next one;
- the monitor pings the server, and replaces the connection when it stays silent
  while we are reading (a dead TCP connection shows no other sign) or when no
  envelope came for ``idle_reconnect`` seconds (the known Socket Mode failure: events
  stop after an idle reconnect while pings still succeed).

The heartbeat is ours, not aiohttp's: aiohttp's closes a connection whose pong is not
read in time, and a reader stopped on purpose does not read it. Ours counts silence
only while the reader waits for a frame.

A connection that ends (dropped, closed by the server, heartbeat missed) is replaced
with backoff; on a ``disconnect`` frame (``refresh_requested``, ``warning``, …) the reader
opens the new connection before it closes the old one, and what it read before goes
to the consumer as usual. Every connection comes from a fresh ``apps.connections.open``
(``open_url``): Slack's URLs are single-use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import WSMsgType
from slack_sdk.proxy_env_variable_loader import load_http_proxy_from_env

from nanoslack.logs import get_logger
from nanoslack.shutdown import cancel
from nanoslack.slack.retry import Backoff, Failure, classify

log = get_logger(__name__)
_monotonic = time.monotonic

# A frame's text and when it was read (``time.monotonic``), in arrival order.
Frames = list[tuple[str, float]]
OnFrames = Callable[[Frames], Awaitable[None]]
# ``apps.connections.open``: a fresh WebSocket URL.
OpenUrl = Callable[[], Awaitable[str]]

# Frames read but not yet handed to the consumer, by default: past this the reader stops
# (the backpressure bound; one batch is at most this many, one commit).
MAX_QUEUED = 256
_ENDED = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
# How Slack's envelopes begin: such a frame is no ``disconnect`` and needs no look.
_ENVELOPE = '{"envelope_id"'


@dataclass(frozen=True)
class SocketOptions:
    # How often the server is pinged; silence while reading for ``pongs_missed`` of these
    # means the connection is dead.
    ping_interval: float = 10.0
    # Reconnect when no envelope arrived for this long: the known Socket Mode
    # failure (events stop after an idle reconnect while pings still succeed)
    # cannot be seen any other way. A fresh connection is cheap.
    idle_reconnect: float = 300.0
    # How often the monitor looks at the connection.
    watchdog_interval: float = 5.0
    pongs_missed: int = 3
    max_queued: int = MAX_QUEUED
    # Reconnects (and the fleet's connects at start) through Slack's blips: 1 s doubling to
    # 60 s, jittered (nanoslack/slack/retry.py).
    backoff_first: float = 1.0
    backoff_cap: float = 60.0
    # A close handshake the server does not answer is given up after this long.
    close_timeout: float = 2.0


class SocketModeClient:
    def __init__(self, open_url: OpenUrl, *, instance: str, options: SocketOptions | None = None) -> None:
        self._open_url = open_url
        self._instance = instance
        self._options = options or SocketOptions()
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._frames: Frames = []
        self._has_frames = asyncio.Event()
        self._has_room = asyncio.Event()
        self._has_room.set()
        # The reader waits in ``receive`` (not paused); since when nothing arrived.
        self._reading = False
        self._quiet_since = _monotonic()
        self._last_text = _monotonic()
        self._last_ping = 0.0
        # The consumer has a batch (recording and acking it).
        self._pumping = False
        # New connections after the first, and of those the monitor's (a missed
        # heartbeat or an idle socket).
        self.reconnects = 0
        self.watchdog_reconnects = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def connect(self, on_frames: OnFrames) -> None:
        """Open the first connection (raises when it cannot), then serve it and its
        successors until ``close``; ``on_frames`` gets what is read, batch by batch."""
        self._session = aiohttp.ClientSession()
        self._ws = await self._open()
        self._tasks = [
            asyncio.create_task(self._read_forever(), name=f"{self._instance}-socket-reader"),
            asyncio.create_task(self._pump(on_frames), name=f"{self._instance}-socket-pump"),
            asyncio.create_task(self._monitor(), name=f"{self._instance}-socket-monitor"),
        ]

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            await cancel(task)
        self._tasks = []
        ws, self._ws = self._ws, None
        if ws is not None:
            await _close(ws)
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def connected(self) -> bool:
        ws = self._ws
        return ws is not None and not ws.closed

    def has_work(self) -> bool:
        """Envelopes read and not yet acked: what else runs on the loop may wait for them."""
        return self._pumping or bool(self._frames)

    # -- writing -----------------------------------------------------------------------------

    async def send(self, texts: list[str]) -> bool:
        """Text frames on the current connection, in order; False when it is gone (what
        was not sent is Slack's to deliver again)."""
        ws = self._ws
        if ws is None or ws.closed:
            return False
        try:
            for text in texts:
                await ws.send_str(text)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            return False
        return True

    # -- connections -------------------------------------------------------------------------

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        assert self._session is not None
        url = await self._open_url()
        opts = self._options
        ws = await self._session.ws_connect(
            url,
            autoping=False,  # pongs are ours to see: they are the heartbeat
            heartbeat=None,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=opts.close_timeout),
            # HTTPS_PROXY as slack-sdk reads it for its Web API calls (no thread per connect,
            # which aiohttp's trust_env would take for its proxy and netrc lookups)
            proxy=load_http_proxy_from_env(),
        )
        self._quiet_since = self._last_text = _monotonic()
        return ws

    async def _replace(self, old: aiohttp.ClientWebSocketResponse | None, reason: str) -> Failure | None:
        """Open a connection in place of ``old``; None once ``old`` is replaced (by this
        call or by another one meanwhile), else why it could not be."""
        async with self._lock:
            if self._ws is not old or self._closing:
                return None
            try:
                new = await self._open()
            except Exception as exc:
                return classify(exc)
            self._ws = new
            self.reconnects += 1
        self._has_room.set()  # a reader paused on the old connection moves on to this one
        log.info("socket reconnected", instance=self._instance, reason=reason)
        if old is not None:
            await _close(old)
        return None

    async def _reconnect(self, old: aiohttp.ClientWebSocketResponse | None, reason: str) -> None:
        """Replace ``old`` through Slack's blips, with backoff, for as long as the process
        runs (nanoslack/slack/retry.py); a token error ends the connection for good."""
        opts = self._options
        backoff = Backoff(opts.backoff_first, opts.backoff_cap)
        while (failure := await self._replace(old, reason)) is not None:
            if not failure.passes:
                log.error(
                    "instance skipped: socket reconnect failed", instance=self._instance, error=failure.error
                )
                await self._give_up(old)
                return
            delay = backoff.delay(failure.retry_after)
            log.warning(
                "instance waiting for Slack",
                instance=self._instance,
                error=failure.error,
                next_try_in_s=round(delay, 1),
                reason=reason,
            )
            await asyncio.sleep(delay)

    async def _give_up(self, old: aiohttp.ClientWebSocketResponse | None) -> None:
        """No connection any more (the reader stops; ``connected`` is False, so ``/readyz`` says so)."""
        async with self._lock:
            if self._ws is old:
                self._ws = None
        if old is not None:
            await _close(old)

    # -- reading -----------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        while not self._closing:
            ws = self._ws
            if ws is None:
                return
            await self._read(ws)
            if ws is self._ws and not self._closing:
                await self._reconnect(ws, "socket closed")

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Frames of ``ws`` until it ends or is replaced."""
        max_queued = self._options.max_queued
        has_frames, has_room = self._has_frames, self._has_room
        while True:
            if len(self._frames) >= max_queued:
                has_room.clear()
                await has_room.wait()
                if ws is not self._ws:
                    return
            self._quiet_since = _monotonic()
            self._reading = True
            try:
                msg = await ws.receive()
            finally:
                self._reading = False
            kind = msg.type
            if kind is WSMsgType.TEXT:
                self._last_text = now = _monotonic()
                text: str = msg.data
                self._frames.append((text, now))
                has_frames.set()
                if not text.startswith(_ENVELOPE) and (reason := _disconnect_reason(text)) is not None:
                    await self._reconnect(ws, f"disconnect: {reason}")
                    return
            elif kind is WSMsgType.PING:
                with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
                    await ws.pong(msg.data)
            elif kind in _ENDED:
                return
            # PONG: its arrival was the point; BINARY: Slack sends none

    async def _pump(self, on_frames: OnFrames) -> None:
        has_frames, has_room = self._has_frames, self._has_room
        while True:
            await has_frames.wait()
            frames, self._frames = self._frames, []
            has_frames.clear()
            has_room.set()
            self._pumping = True
            try:
                await on_frames(frames)
            except Exception as exc:  # the consumer acks only what it handled: Slack retries the rest
                log.error("socket batch failed", instance=self._instance, error=type(exc).__name__)
            finally:
                self._pumping = False

    # -- watching ----------------------------------------------------------------------------

    async def _monitor(self) -> None:
        opts = self._options
        while True:
            await asyncio.sleep(opts.watchdog_interval)
            ws = self._ws
            if ws is None or ws.closed:
                continue  # the reader is reconnecting
            reason = await self._why_replace()
            if reason is not None:
                log.warning(
                    "socket watchdog reconnecting",
                    instance=self._instance,
                    reason=reason,
                    idle=round(_monotonic() - self._last_text, 1),
                )
                self.watchdog_reconnects += 1
                await self._reconnect(ws, reason)
                continue
            now = _monotonic()
            if now - self._last_ping >= opts.ping_interval:
                self._last_ping = now
                with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
                    await ws.ping(b"nanoslack")

    async def _why_replace(self) -> str | None:
        """Why the connection is to be replaced now, or None. Only while the reader
        waits for a frame: a paused reader hears nothing, on purpose."""
        opts = self._options
        silent = opts.ping_interval * opts.pongs_missed
        for _ in range(3):
            if not self._reading:
                return None
            now = _monotonic()
            if now - self._quiet_since > silent:
                reason = "no pong"
            elif now - self._last_text > opts.idle_reconnect:
                reason = "no envelope for too long"
            else:
                return None
            # A loop that was busy may not have read what already arrived: let it.
            await asyncio.sleep(0)
        return reason


def _disconnect_reason(text: str) -> str | None:
    """The reason of a ``{"type": "disconnect", …}`` frame, None for any other frame."""
    if '"disconnect"' not in text:
        return None
    try:
        message = orjson.loads(text)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("type") == "disconnect":
        return str(message.get("reason"))
    return None


async def _close(ws: aiohttp.ClientWebSocketResponse) -> None:
    with contextlib.suppress(Exception):
        await ws.close()
