"""Socket Mode plumbing around bolt: every envelope gets an answer.

bolt's own Socket Mode handler acks only when dispatch returns 200. A payload
that crashes bolt before our intake middleware runs (``"event": -1``, a user id
that is a number) would then never be acked, and Slack would retry it until it
switched our subscriptions off. So the envelope handler is ours:

- 200 from dispatch → ack (the normal path; the intake acks after the inbox write);
- ``RETRY_STATUS`` from dispatch → no ack on purpose: our inbox could not take
  the event, Slack's retry will bring it back;
- anything else, or an exception → ack and log the drop.

Envelopes slack-sdk cannot even turn into a request (no payload, no type) are
acked by a raw message listener.

Message events do not go through bolt at all (``EnvelopePump``): bolt spends
most of its ≈ 200 µs per envelope building a request, a context and a web client
and walking its middleware chain, for an answer our intake decides alone. The
pump replaces slack-sdk's reader of the client's queue, which started one task
per envelope with no bound: it takes what is queued in arrival order, records
the batch's events in one commit, then acks them (the batch's acks as WebSocket
frames in one socket write). The queue is bounded, so when
the fleet falls behind the socket reader waits, the socket's buffers fill, and
what is not acked is Slack's to retry: nothing piles up in memory. A store that
cannot take the batch holds the pump the same way: the batch stays unacked and is
recorded as soon as the store answers again (``nanoslack.store.outage``). Interactive
payloads (approval clicks), disconnects and anything unusual still take the
bolt path, in order.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiohttp._websocket.helpers import websocket_mask
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import AsyncSingleTeamAuthorization
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.slack.intake import RETRY_STATUS, Intake
from nanoslack.store.outage import StoreOutage, until_stored

log = get_logger(__name__)
# Envelopes read off a socket but not yet recorded, per instance: the backpressure
# bound. One batch is at most this many (one commit).
MAX_QUEUED = 256
# Recorded and acked messages waiting for the pipeline worker, per instance: past
# this the pump stops reading, so a burst waits in the socket, not in memory.
MAX_BACKLOG = 2048
BACKLOG_POLL = 0.005
_monotonic = time.monotonic

# Slack's envelope ids are uuids: an ack for one needs no JSON encoder.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]+")

_PACK_HEADER = struct.Struct("!BB").pack
_PACK_MASK = struct.Struct("!L").pack

Record = Callable[[Sequence[Inbound]], list[bool]]
# The recorded messages for the core, each with whether it is to be checked first.
Deliver = Callable[[list[tuple[Inbound, bool]]], None]
T = TypeVar("T")


def install_envelope_handler(
    client: AsyncBaseSocketModeClient, app: AsyncApp, instance: str, tally: Tally | None = None
) -> None:
    tally = tally or Tally()

    async def handle(client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        try:
            resp = await run_async_bolt_app(app, req)
        except Exception as exc:
            await _ack_dropped(client, req.envelope_id, instance, f"dispatch failed: {type(exc).__name__}")
            tally.acked += 1
            return
        if resp.status == 200:
            await send_async_response(client, req, resp, start)
            tally.acked += 1  # clicks and oddities: the latency histogram is the pump's
        elif resp.status != RETRY_STATUS:
            await _ack_dropped(
                client, req.envelope_id, instance, f"bolt could not process it (status {resp.status})"
            )
            tally.acked += 1

    async def ack_unusable(
        client: AsyncBaseSocketModeClient, message: dict[str, Any], _raw: str | None
    ) -> None:
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if isinstance(envelope_id, str) and not _is_request(message):
            await _ack_dropped(client, envelope_id, instance, "envelope without a usable type or payload")
            tally.acked += 1

    client.socket_mode_request_listeners[:] = [handle]  # replaces bolt's own handler
    client.message_listeners.append(ack_unusable)


def _is_request(message: dict[str, Any]) -> bool:
    """Whether slack-sdk can build a ``SocketModeRequest`` (its constructor raises
    on a payload that is neither an object nor a JSON string of one)."""
    if not all(key in message for key in ("type", "envelope_id", "payload")):
        return False
    payload = message["payload"]
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return False
    return isinstance(payload, dict)


async def _ack_dropped(
    client: AsyncBaseSocketModeClient, envelope_id: str, instance: str, reason: str
) -> None:
    log.info("envelope dropped", instance=instance, envelope_id=envelope_id, reason=reason)
    await client.send_socket_mode_response(SocketModeResponse(envelope_id=envelope_id))


class ArrivalQueue(asyncio.Queue[str | None]):
    """The socket reader's queue, remembering when each frame arrived (for the ack
    latency histogram) at the cost of one clock read per frame."""

    _queue: collections.deque[str | None]  # asyncio.Queue's own store, made in _init

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self._arrivals: collections.deque[float] = collections.deque()
        self.last_arrival = 0.0

    # asyncio.Queue's own hooks, written out: they run for every frame.
    def _put(self, item: str | None) -> None:
        self._queue.append(item)
        self._arrivals.append(_monotonic())

    def _get(self) -> str | None:
        self.last_arrival = self._arrivals.popleft()
        return self._queue.popleft()


# An event envelope on its way: its id, its ``event_callback`` body, when it arrived.
_Event = tuple[str, dict[str, Any], float]


class EnvelopePump:
    """Reads a Socket Mode client's queue in batches (see the module docstring).

    Runs on the sockets' loop (the fleet's, or ``SocketThread``'s): ``record`` is the core's
    synchronous inbox write (the store's lock makes it safe from this thread) and
    returns before any envelope of the batch is acked; ``deliver`` hands the fresh
    messages to the core's loop, in order.
    """

    def __init__(
        self,
        client: AsyncBaseSocketModeClient,
        intake: Intake,
        *,
        record: Record,
        deliver: Deliver,
        backlog: Callable[[], int],
        instance: str,
        tally: Tally | None = None,
    ) -> None:
        self._client = client
        self._intake = intake
        self._record = record
        self._deliver = deliver
        self._backlog = backlog
        self._instance = instance
        self._tally = tally or Tally()
        self.queue = ArrivalQueue(maxsize=MAX_QUEUED)
        # A store that cannot record the batch (restarting, full, read-only): the batch
        # is held, unacked, and recorded once it can be; the socket waits meanwhile, and
        # Slack's redeliveries of the same events are duplicates by then.
        self._outage = StoreOutage("inbox", instance=instance)

    def install(self) -> None:
        client = self._client
        client.message_queue = self.queue
        # slack-sdk's process_messages() loop calls this once per iteration.
        setattr(client, "process_message", self.process_message)  # noqa: B010

    async def process_message(self) -> None:
        queue = self.queue
        raws = [(await queue.get(), queue.last_arrival)]
        while not queue.empty():
            raws.append((queue.get_nowait(), queue.last_arrival))
        events: list[_Event] = []
        tally = self._tally
        for raw, arrived in raws:
            if raw is None:
                continue
            message = _loads(raw)
            body = _event_callback(message)
            if body is not None:
                events.append((message["envelope_id"], body, arrived))
                continue
            if "envelope_id" in message:
                tally.received += 1
            if events:  # what came before goes first
                await self._events(events)
                events = []
            await self._client.run_message_listeners(message, raw)
        if events:
            await self._events(events)
        while self._backlog() > MAX_BACKLOG:  # noqa: ASYNC110 — only under overload; the worker has no signal to spare
            await asyncio.sleep(BACKLOG_POLL)

    async def _events(self, events: list[_Event]) -> None:
        intake = self._intake
        intake.touch()
        self._tally.received += len(events)
        screened: list[tuple[str, Inbound | None, float]] = []
        for envelope_id, body, arrived in events:
            try:
                screened.append((envelope_id, intake.screen(body), arrived))
            except Exception as exc:  # screen is total; this guards the envelope, not the design
                log.info(
                    "envelope dropped",
                    instance=self._instance,
                    envelope_id=envelope_id,
                    reason=f"intake failed: {type(exc).__name__}",
                )
                screened.append((envelope_id, None, arrived))
        msgs = [msg for _, msg, _ in screened if msg is not None]
        tries = self._outage.retries
        try:
            fresh = await until_stored(lambda: self._record(msgs), self._outage) if msgs else []
        except Exception as exc:
            # No ack for what was to be recorded: Slack's retry brings it back.
            log.error(
                "inbox write failed", instance=self._instance, count=len(msgs), error=type(exc).__name__
            )
            await self._ack([(envelope_id, arrived) for envelope_id, msg, arrived in screened if msg is None])
            return
        if msgs:
            self._deliver(intake.accepted(msgs, fresh, retried=self._outage.retries > tries))
        await self._ack([(envelope_id, arrived) for envelope_id, _, arrived in screened])

    async def _ack(self, envelopes: list[tuple[str, float]]) -> None:
        if not envelopes:
            return
        client = self._client
        if not _write_frames(client, [_ack_frame(envelope_id).encode() for envelope_id, _ in envelopes]):
            for envelope_id, _ in envelopes:
                await client.send_message(_ack_frame(envelope_id))
        self._tally.acks(arrived for _, arrived in envelopes)


def _write_frames(client: AsyncBaseSocketModeClient, payloads: list[bytes]) -> bool:
    """A batch's acks as WebSocket text frames in one write to the socket: one system
    call instead of one per envelope, and one read for Slack's side. aiohttp sends a
    frame per call and has no batch API, so this builds client frames (RFC 6455: FIN,
    text opcode, a fresh random mask each) on the connection aiohttp holds; anything
    unexpected there (compression, a closing transport, another aiohttp) and it
    returns False, and the acks go one by one through slack-sdk."""
    try:
        writer = client.current_session._writer  # type: ignore[attr-defined]
        transport = writer.transport
        if writer.compress or not writer.use_mask or transport.is_closing():
            return False
        random_bits = writer.get_random_bits
    except AttributeError:
        return False
    out = bytearray()
    for payload in payloads:
        if len(payload) >= 126:  # acks are ~55 bytes; longer frames take the library
            return False
        mask = _PACK_MASK(random_bits())
        masked = bytearray(payload)
        websocket_mask(mask, masked)
        out += _PACK_HEADER(0x81, 0x80 | len(payload))
        out += mask
        out += masked
    transport.write(bytes(out))
    return True


def _ack_frame(envelope_id: str) -> str:
    """``{"envelope_id": …}`` without a JSON encoder for Slack's ids (uuid-shaped); an
    id that would need escaping takes the encoder."""
    if _PLAIN_ID.fullmatch(envelope_id):
        return '{"envelope_id":"' + envelope_id + '"}'
    return json.dumps({"envelope_id": envelope_id})


def _loads(raw: str) -> dict[str, Any]:
    """What slack-sdk's reader made of a frame: an object, or {} for anything else."""
    if not raw.startswith("{"):
        return {}
    try:
        message = _decode(raw)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def _decode(raw: str) -> Any:
    """orjson (≈ 2.5× the standard decoder on an envelope); what it refuses and the
    standard library reads (a lone surrogate escape, NaN, a huge integer) still reads."""
    try:
        return orjson.loads(raw)
    except ValueError:
        return json.loads(raw)


def _event_callback(message: dict[str, Any]) -> dict[str, Any] | None:
    """The ``event_callback`` body of an ``events_api`` envelope, else None."""
    if message.get("type") != "events_api" or not isinstance(message.get("envelope_id"), str):
        return None
    payload = message.get("payload")
    if isinstance(payload, str):
        try:
            payload = _decode(payload)
        except ValueError:
            return None
    if isinstance(payload, dict) and payload.get("type") == "event_callback":
        return payload
    return None


class SocketThread:
    """The fleet's sockets on an event loop of their own, in one thread (off by default:
    ``SocketOptions.own_thread``).

    What crosses over: the inbox write (synchronous, under the store's lock, before the
    ack), recorded messages to the core (one ``call_soon_threadsafe`` per batch, in
    order) and an owner's click (run on the fleet's loop, awaited here). It bounds how
    long a callback on the fleet's loop can hold an ack back, but under the GIL each
    of the pump's many short blocking calls hands the interpreter to the busy fleet
    thread and waits up to the switch interval to get it back: measured, the one-loop
    pump with short slices of agent work acks faster (the bench).
    """

    def __init__(self, name: str = "nanoslack-sockets") -> None:
        self._name = name
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            if self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the socket loop and wait for it from the caller's loop."""
        self.start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what is left on the socket loop, then end the thread."""
        thread = self._thread
        if thread is None:
            self.loop.close()
            return
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
        thread.join(timeout)
        self._thread = None
        if not thread.is_alive():
            self.loop.close()


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2.0)


@dataclass(frozen=True)
class SocketOptions:
    ping_interval: float = 10.0
    # Reconnect when no envelope arrived for this long: the known Socket Mode
    # failure (events stop after an idle reconnect while pings still succeed)
    # cannot be seen any other way. A fresh connection is cheap.
    idle_reconnect: float = 300.0
    watchdog_interval: float = 5.0
    # The sockets on a loop of their own (``SocketThread``) instead of the fleet's loop.
    # Off: measured slower on CPython 3.11 (BENCHMARKS.md), because every
    # socket write and SQLite call releases the GIL and the pump thread then waits up
    # to the switch interval (5 ms) to get it back from a busy fleet loop; with 256
    # acks a batch that is over a second. Kept for ``bench/fleet_bench.py
    # --sockets-thread`` and for an interpreter without the GIL.
    own_thread: bool = False


class SocketWatchdog:
    """Reconnects a socket that is down or that brought no envelope for too long."""

    def __init__(self, client: AsyncBaseSocketModeClient, options: SocketOptions, instance: str) -> None:
        self._client = client
        self._options = options
        self._instance = instance
        self.last_envelope = time.monotonic()
        self.reconnects = 0

    def touch(self) -> None:
        self.last_envelope = time.monotonic()

    async def run(self) -> None:
        opts = self._options
        while True:
            await asyncio.sleep(opts.watchdog_interval)
            idle = time.monotonic() - self.last_envelope
            connected = await self._client.is_connected()
            if connected and idle < opts.idle_reconnect:
                continue
            reason = "socket not connected" if not connected else "no envelope for too long"
            # An idle refresh is routine (the only cure for a silently dead session);
            # a dropped socket the client did not restore by itself is not.
            level = log.info if connected else log.warning
            level("socket watchdog reconnecting", instance=self._instance, reason=reason, idle=round(idle, 1))
            try:
                await self._client.connect_to_new_endpoint(force=True)
                self.reconnects += 1
                self.touch()
            except Exception as exc:  # keep watching; the next round tries again
                log.warning(
                    "socket watchdog reconnect failed", instance=self._instance, error=type(exc).__name__
                )


def seed_bolt_authorization(app: AsyncApp, auth_test: AsyncSlackResponse) -> None:
    """Give bolt the ``auth.test`` answer we already have.

    bolt caches it only once its own first call returns, so every envelope of a
    burst that arrives before that (a restart with events queued) calls
    ``auth.test`` itself, each on a fresh HTTP session: measured 11,000 calls and
    +450 MB for 21 instances. ``auth_test_result`` is the middleware's cache; the
    list holding the middleware is private to bolt, hence the defensive lookup
    (``test_restart_with_queued_events_calls_auth_test_once`` guards it).
    """
    middlewares = getattr(app, "_async_middleware_list", [])
    for middleware in middlewares:
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = auth_test
            return
    log.warning("bolt authorization cache not seeded", reason="middleware not found")
