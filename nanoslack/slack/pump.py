"""The envelope pump: what every Socket Mode frame an instance reads comes to.

The connection itself is ``nanoslack.slack.adapter`` (ours, on aiohttp's public
WebSocket client); it hands the pump everything it read since the last batch, in
arrival order. The pump answers every envelope:

- ``events_api`` envelopes with an ``event_callback``: the batch's events are screened
  (``Intake.screen``) and handed to the instance's inbox in one call (``Inbox.take``:
  recorded in one commit and queued for the core), then acked, the batch's acks written
  one after the other before anything else runs. A store that cannot take the batch
  holds the pump: the batch stays unacked and is recorded as soon as the store
  answers again (``nanoslack.store.outage``); meanwhile the reader's bounded list
  fills and it stops reading, so what waits, waits in the socket;
- interactive payloads (owners' clicks, votes) and any other envelope with a usable
  payload go to ``Intake.interactive``: acked, unless our side could not take it
  (then Slack's retry brings it back);
- an envelope without a usable type or payload is acked and logged as dropped: Slack
  would otherwise retry it until it switched our subscriptions off;
- ``hello``, ``disconnect`` (the client opens a new connection itself) and frames that
  are no envelope are ignored.

While the core is more than ``MAX_BACKLOG`` messages behind (``Inbox.backlog``), the
pump waits before it takes the next batch: a burst waits in the socket, not in memory.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from nanoslack.inbound import Inbound
from nanoslack.logs import get_logger
from nanoslack.metrics import Tally
from nanoslack.slack.adapter import Frames, SocketModeClient
from nanoslack.slack.adapter.socket_mode import MAX_QUEUED
from nanoslack.slack.intake import Intake
from nanoslack.store.outage import StoreOutage, until_stored

__all__ = ["MAX_BACKLOG", "MAX_QUEUED", "EnvelopePump"]

log = get_logger(__name__)
# Recorded and acked messages waiting for the pipeline worker, per instance: past
# this the pump stops taking batches, so a burst waits in the socket, not in memory.
MAX_BACKLOG = 2048
BACKLOG_POLL = 0.005

# Slack's envelope ids are uuids: an ack for one needs no JSON encoder.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]+")


class Inbox(Protocol):
    """Where the pump hands each batch (the instance's core: ``nanoslack.worker.BatchWorker``)."""

    def take(self, msgs: Sequence[Inbound], *, retried: bool = False) -> list[bool]:
        """Record ``msgs`` durably in one commit and queue the new ones for the core;
        raises when the store cannot (then nothing is acked). ``retried``: an earlier
        attempt at this write failed, maybe after its commit."""
        ...

    def backlog(self) -> int:
        """Recorded messages not processed yet."""
        ...


# An event envelope on its way: its id, its ``event_callback`` body, when it arrived.
_Event = tuple[str, dict[str, Any], float]


class EnvelopePump:
    def __init__(
        self,
        client: SocketModeClient,
        intake: Intake,
        inbox: Inbox,
        *,
        instance: str,
        tally: Tally | None = None,
    ) -> None:
        self._client = client
        self._intake = intake
        self._inbox = inbox
        self._instance = instance
        self._tally = tally or Tally()
        # A store that cannot record the batch (restarting, full, read-only): the batch
        # is held, unacked, and recorded once it can be; the socket waits meanwhile, and
        # Slack's redeliveries of the same events are duplicates by then.
        self._outage = StoreOutage("inbox", instance=instance)

    async def on_frames(self, frames: Frames) -> None:
        events: list[_Event] = []
        debug = log.debug  # a no-op unless LOG_LEVEL=debug: then every frame, tokens masked
        instance = self._instance
        for raw, arrived in frames:
            debug("socket frame", instance=instance, frame=raw)
            message = _loads(raw)
            body = _event_callback(message)
            if body is not None:
                events.append((message["envelope_id"], body, arrived))
                continue
            if events:  # what came before goes first
                await self._events(events)
                events = []
            await self._other(message, arrived)
        if events:
            await self._events(events)
        while self._inbox.backlog() > MAX_BACKLOG:  # noqa: ASYNC110 — only under overload; the worker has no signal to spare
            await asyncio.sleep(BACKLOG_POLL)

    async def _events(self, events: list[_Event]) -> None:
        intake = self._intake
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
        outage, take = self._outage, self._inbox.take
        tries = outage.retries
        try:
            if msgs:
                await until_stored(lambda: take(msgs, retried=outage.retries > tries), outage)
        except Exception as exc:
            # No ack for what was to be recorded: Slack's retry brings it back.
            log.error(
                "inbox write failed", instance=self._instance, count=len(msgs), error=type(exc).__name__
            )
            await self._ack([(envelope_id, arrived) for envelope_id, msg, arrived in screened if msg is None])
            return
        await self._ack([(envelope_id, arrived) for envelope_id, _, arrived in screened])

    async def _other(self, message: dict[str, Any], arrived: float) -> None:
        envelope_id = message.get("envelope_id")
        kind = message.get("type")
        if not isinstance(envelope_id, str):
            return  # hello, disconnect (the client's), frames that are no envelope: nothing to answer
        self._tally.received += 1
        payload = _payload(message)
        if payload is None or not isinstance(kind, str):
            log.info(
                "envelope dropped",
                instance=self._instance,
                envelope_id=envelope_id,
                reason="envelope without a usable type or payload",
            )
        elif not await self._intake.interactive(payload):
            return  # our side could not take it: no ack, Slack's retry brings it back
        await self._ack([(envelope_id, arrived)])

    async def _ack(self, envelopes: list[tuple[str, float]]) -> None:
        if envelopes and await self._client.send([_ack_frame(envelope_id) for envelope_id, _ in envelopes]):
            self._tally.acks(arrived for _, arrived in envelopes)


def _ack_frame(envelope_id: str) -> str:
    """``{"envelope_id": …}`` without a JSON encoder for Slack's ids (uuid-shaped); an
    id that would need escaping takes the encoder."""
    if _PLAIN_ID.fullmatch(envelope_id):
        return '{"envelope_id":"' + envelope_id + '"}'
    return json.dumps({"envelope_id": envelope_id})


def _loads(raw: str) -> dict[str, Any]:
    """A frame as an object, or {} for anything else."""
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


def _payload(message: dict[str, Any]) -> dict[str, Any] | None:
    """An envelope's payload as an object (Slack sends one; a JSON string of one is
    read too), else None."""
    payload = message.get("payload")
    if isinstance(payload, str):
        try:
            payload = _decode(payload)
        except ValueError:
            return None
    return payload if isinstance(payload, dict) else None


def _event_callback(message: dict[str, Any]) -> dict[str, Any] | None:
    """The ``event_callback`` body of an ``events_api`` envelope, else None."""
    if message.get("type") != "events_api" or not isinstance(message.get("envelope_id"), str):
        return None
    payload = _payload(message)
    if payload is not None and payload.get("type") == "event_callback":
        return payload
    return None
