"""Socket Mode: connections, envelopes, ack tracking, redelivery, queueing."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from .state import Stats

_ACK_RE = re.compile(r'\{"envelope_id":\s*"([0-9a-f-]{36})"\}\Z')
log = logging.getLogger("nanoslack.emulator.socket")
ACK_LATENCY_KEEP = 200_000  # per app


@dataclass
class Delivery:
    """One event (or interactive payload) to deliver to one app, possibly several times."""

    app_id: str
    kind: str  # "events_api" | "interactive"
    payload_json: str
    attempt: int = 0
    retryable: bool = True


@dataclass
class Conn:
    ws: web.WebSocketResponse
    request: web.Request
    app_id: str
    conn_id: int
    open: bool = True
    # Fault: the socket stays open and answers pings, but envelopes sent to it
    # vanish (the "events stop after an idle reconnect" failure of Socket Mode).
    zombie: bool = False


@dataclass
class AppSockets:
    conns: list[Conn] = field(default_factory=list)
    rr: int = 0
    queue: collections.deque[Delivery] = field(default_factory=collections.deque)
    # envelope_id -> (deadline, delivery, sent_at); insertion order == deadline order
    pending: dict[str, tuple[float, Delivery, float]] = field(default_factory=dict)
    # seconds from sending an envelope to receiving its ack, most recent last
    ack_latencies: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=ACK_LATENCY_KEEP)
    )
    withhold: int | None = 0  # None: withhold all
    stats: Stats = field(default_factory=Stats)


class SocketHub:
    def __init__(self, ack_timeout: float, max_retries: int) -> None:
        self.ack_timeout = ack_timeout
        self.max_retries = max_retries
        self.apps: dict[str, AppSockets] = {}
        self.tickets: dict[str, str] = {}
        self._conn_ids = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None
        self.dropped: int = 0  # deliveries abandoned after max retries

    def app(self, app_id: str) -> AppSockets:
        s = self.apps.get(app_id)
        if s is None:
            s = self.apps[app_id] = AppSockets()
        return s

    def new_ticket(self, app_id: str) -> str:
        t = secrets.token_hex(16)
        self.tickets[t] = app_id
        return t

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        for s in self.apps.values():
            for c in list(s.conns):
                c.open = False
                await c.ws.close()
            s.conns.clear()

    # ---- sending ---------------------------------------------------------------------------
    @staticmethod
    def _envelope(env_id: str, d: Delivery) -> str:
        if d.kind == "events_api":
            return (
                '{"envelope_id":"'
                + env_id
                + '","type":"events_api","payload":'
                + d.payload_json
                + ',"accepts_response_payload":false,"retry_attempt":'
                + str(d.attempt)
                + ',"retry_reason":"'
                + ("timeout" if d.attempt else "")
                + '"}'
            )
        return (
            '{"envelope_id":"'
            + env_id
            + '","type":"'
            + d.kind
            + '","payload":'
            + d.payload_json
            + ',"accepts_response_payload":false}'
        )

    async def deliver(self, d: Delivery) -> None:
        s = self.app(d.app_id)
        if not s.conns:
            s.queue.append(d)
            s.stats.queued = len(s.queue)
            return
        await self._send(s, d)

    async def _send(self, s: AppSockets, d: Delivery) -> None:
        while s.conns:
            s.rr = (s.rr + 1) % len(s.conns)
            conn = s.conns[s.rr]
            env_id = str(uuid.uuid4())
            data = self._envelope(env_id, d)
            now = time.monotonic()
            s.pending[env_id] = (now + self.ack_timeout, d, now)
            s.stats.delivered += 1
            if d.attempt:
                s.stats.redelivered += 1
            if conn.zombie:
                return  # "sent", never arrives; the ack timeout will redeliver it
            try:
                await conn.ws.send_str(data)
                return
            except (ConnectionError, RuntimeError) as e:  # socket went away mid-send
                log.debug("send failed on conn %s: %s", conn.conn_id, e)
                s.pending.pop(env_id, None)
                s.stats.delivered -= 1
                if d.attempt:
                    s.stats.redelivered -= 1
                self._remove(conn)
        s.queue.append(d)
        s.stats.queued = len(s.queue)

    def _remove(self, conn: Conn) -> None:
        conn.open = False
        s = self.app(conn.app_id)
        if conn in s.conns:
            s.conns.remove(conn)
        s.stats.connections = len(s.conns)

    async def _flush_queue(self, s: AppSockets) -> None:
        while s.queue and s.conns:
            d = s.queue.popleft()
            s.stats.queued = len(s.queue)
            await self._send(s, d)

    def on_ack(self, app_id: str, env_id: str) -> None:
        s = self.app(app_id)
        if env_id not in s.pending:
            return
        if s.withhold is None:
            return
        if s.withhold > 0:
            s.withhold -= 1
            return
        sent_at = s.pending.pop(env_id)[2]
        s.ack_latencies.append(time.monotonic() - sent_at)
        s.stats.acked += 1

    async def _sweep_loop(self) -> None:
        interval = max(0.02, min(0.25, self.ack_timeout / 10))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # pragma: no cover - keep the loop alive
                log.exception("sweep failed")

    async def sweep(self) -> None:
        now = time.monotonic()
        for s in list(self.apps.values()):
            expired: list[Delivery] = []
            while s.pending:
                env_id = next(iter(s.pending))
                deadline, d, _sent = s.pending[env_id]
                if deadline > now:
                    break
                del s.pending[env_id]
                expired.append(d)
            for d in expired:
                if not d.retryable or d.attempt >= self.max_retries:
                    self.dropped += 1
                    continue
                d.attempt += 1
                await self.deliver(d)

    # ---- connections -----------------------------------------------------------------------
    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        app_id = self.tickets.pop(ticket, None)
        if app_id is None:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        ws = web.WebSocketResponse(autoping=True, heartbeat=None, max_msg_size=0)
        await ws.prepare(request)
        s = self.app(app_id)
        conn = Conn(ws=ws, request=request, app_id=app_id, conn_id=next(self._conn_ids))
        s.conns.append(conn)
        s.stats.connections = len(s.conns)
        hello = {
            "type": "hello",
            "num_connections": len(s.conns),
            "connection_info": {"app_id": app_id},
            "debug_info": {
                "host": "nanoslack-emulator",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
        }
        try:
            await ws.send_str(json.dumps(hello))
            await self._flush_queue(s)
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data: str = msg.data
                    if '"envelope_id"' not in data:
                        continue  # "ping"-like text frames and anything else: ignored
                    fast = _ACK_RE.match(data)
                    if fast is not None:
                        self.on_ack(app_id, fast.group(1))
                        continue
                    try:
                        obj: Any = json.loads(data)
                    except ValueError:
                        continue
                    if isinstance(obj, dict) and isinstance(obj.get("envelope_id"), str):
                        self.on_ack(app_id, obj["envelope_id"])
                elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                    break
                # binary frames ignored
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._remove(conn)
        return ws

    def zombify(self, app_id: str) -> int:
        conns = self.app(app_id).conns
        for conn in conns:
            conn.zombie = True
        return len(conns)

    async def send_raw(self, app_id: str, text: str) -> int:
        sent = 0
        for conn in list(self.app(app_id).conns):
            try:
                await conn.ws.send_str(text)
                sent += 1
            except (ConnectionError, RuntimeError):
                self._remove(conn)
        return sent

    async def drop(self, app_id: str) -> int:
        """Abrupt close: kill the TCP connection without a close frame."""
        s = self.app(app_id)
        conns = list(s.conns)
        for c in conns:
            self._remove(c)
            transport = c.request.transport
            if transport is not None:
                transport.abort()
            else:
                await c.ws.close()
        return len(conns)

    async def disconnect(self, app_id: str, reason: str = "refresh_requested") -> int:
        s = self.app(app_id)
        msg = json.dumps(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "nanoslack-emulator"}}
        )
        n = 0
        for c in list(s.conns):
            try:
                await c.ws.send_str(msg)
                n += 1
            except (ConnectionError, RuntimeError):
                self._remove(c)
        return n

    def withhold_acks(self, app_id: str, n: int | None) -> None:
        self.app(app_id).withhold = n

    def stats(self, app_id: str | None = None) -> Stats:
        if app_id is not None:
            s = self.app(app_id)
            return Stats(s.stats.delivered, s.stats.acked, s.stats.redelivered, len(s.queue), len(s.conns))
        tot = Stats()
        for s in self.apps.values():
            tot.delivered += s.stats.delivered
            tot.acked += s.stats.acked
            tot.redelivered += s.stats.redelivered
            tot.queued += len(s.queue)
            tot.connections += len(s.conns)
        return tot

    def connections(self, app_id: str) -> int:
        return len(self.app(app_id).conns)

    def ack_latencies(self, app_id: str | None = None, clear: bool = False) -> list[float]:
        """Seconds between sending an envelope and receiving its ack (the last
        ``ACK_LATENCY_KEEP`` per app); ``clear`` empties what was returned."""
        apps = [self.app(app_id)] if app_id is not None else list(self.apps.values())
        out: list[float] = []
        for s in apps:
            out.extend(s.ack_latencies)
            if clear:
                s.ack_latencies.clear()
        return out
