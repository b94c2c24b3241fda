"""The Socket Mode edge alone: acks per second and CPU per envelope of three clients that
only read, decode and ack, on one emulator (subprocess) at a time, alternating, in one run.

- ``bolt``: bare slack-bolt apps (``AsyncApp`` + ``AsyncSocketModeHandler``, no-op listeners),
  the yardstick of ``fleet_bench.py``;
- ``sdk``: slack-sdk's own aiohttp Socket Mode client, a listener that acks every envelope
  (what the fleet's edge was built on);
- ``adapter``: ``nanoslack.slack.adapter.SocketModeClient``, a consumer that decodes every
  frame (orjson) and acks the batch (what the fleet's edge is now).

    .venv/bin/python bench/socket_bench.py [--messages 3000] [--rounds 3] [--apps 10]

Prints one JSON line per round and kind, then the medians and their ratios to bolt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import orjson
from _common import connect_bare_bolt_apps, drop_proxies, proc_cpu, start_emulator, stop_process, wait_until
from slack_sdk.socket_mode.aiohttp import SocketModeClient as SdkClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.slack.adapter import Frames, SocketModeClient

Closer = Callable[[], Awaitable[None]]


class SdkSocket(Protocol):
    """What the bench uses of slack-sdk's Socket Mode client: its ``connect`` and ``close``
    are unannotated, so their calls are typed here (the client is one by its shape)."""

    async def connect(self) -> None: ...

    async def close(self) -> None: ...


async def _stats(session: aiohttp.ClientSession, base: str) -> dict[str, int]:
    async with session.get(base + "stats") as r:
        return dict(await r.json())


async def connect_sdk(info: dict[str, Any]) -> list[Closer]:
    closers: list[Closer] = []
    for app in info["apps"]:
        client = SdkClient(app_token=app["app_token"], web_client=AsyncWebClient(base_url=info["api_url"]))

        async def ack(c: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
            await c.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

        client.socket_mode_request_listeners.append(ack)
        socket: SdkSocket = client
        await socket.connect()
        closers.append(socket.close)
    return closers


async def connect_adapter(info: dict[str, Any]) -> list[Closer]:
    closers: list[Closer] = []
    for app in info["apps"]:
        web = AsyncWebClient(base_url=info["api_url"])
        token = app["app_token"]

        async def open_url(web: AsyncWebClient = web, token: str = token) -> str:
            return str((await web.apps_connections_open(app_token=token))["url"])

        client = SocketModeClient(open_url, instance=app["name"])

        async def consume(frames: Frames, client: SocketModeClient = client) -> None:
            acks = []
            for raw, _ in frames:
                message = orjson.loads(raw)
                if "envelope_id" in message:
                    acks.append('{"envelope_id":"' + message["envelope_id"] + '"}')
            await client.send(acks)

        await client.connect(consume)
        closers.append(client.close)
    return closers


async def connect_bolt(info: dict[str, Any]) -> list[Closer]:
    handlers = await connect_bare_bolt_apps(info, events=("message", "app_mention"))
    return [h.close_async for h in handlers]


KINDS: dict[str, Callable[[dict[str, Any]], Awaitable[list[Closer]]]] = {
    "bolt": connect_bolt,
    "sdk": connect_sdk,
    "adapter": connect_adapter,
}


async def phase(kind: str, n_apps: int, n_messages: int) -> dict[str, Any]:
    proc, info = start_emulator(n_apps)
    base = info["base_url"].rstrip("/") + "/_emulator/"
    closers: list[Closer] = []
    async with aiohttp.ClientSession() as session:
        try:
            closers = await KINDS[kind](info)

            async def connected() -> bool:
                return (await _stats(session, base))["connections"] >= n_apps

            await wait_until(connected, within=20, what=f"{kind} connected")
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            bots = [a["bot_user_id"] for a in info["apps"]]

            async def post(n: int, word: str) -> int:
                texts = [f"<@{bots[i % len(bots)]}> {word} {i}" for i in range(n)]
                async with session.post(
                    base + "bulk_post", json={"user_id": alice, "channel": room, "texts": texts}
                ) as r:
                    r.raise_for_status()
                return n * (n_apps + 1)

            async def acked(n: int) -> bool:
                return (await _stats(session, base))["acked"] >= n

            warm = await post(20, "warm")
            await wait_until(lambda: acked(warm), within=30, what="warm-up")
            start = (await _stats(session, base))["acked"]
            wall0, cpu0, emu0 = time.perf_counter(), time.process_time(), proc_cpu(proc.pid)
            envelopes = await post(n_messages, "bench")
            await wait_until(lambda: acked(start + envelopes), within=300, interval=0.02, what="acked")
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            emu = proc_cpu(proc.pid) - emu0
            stats = await _stats(session, base)
            return {
                "kind": kind,
                "acks_per_s": round(envelopes / wall),
                "cpu_us_per_envelope": round(cpu / envelopes * 1e6, 1),
                "emulator_cpu_us_per_envelope": round(emu / envelopes * 1e6, 1),
                "redelivered": stats["redelivered"],
            }
        finally:
            for close in closers:
                await close()
            stop_process(proc)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    drop_proxies()
    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in args.kinds}
    load0 = os.getloadavg()
    for i in range(args.rounds):
        for kind in args.kinds:
            result = await phase(kind, args.apps, args.messages)
            rounds[kind].append(result)
            print(json.dumps({"round": i + 1, **result}), file=sys.stderr, flush=True)
    medians = {k: statistics.median(r["acks_per_s"] for r in rs) for k, rs in rounds.items()}
    cpu = {k: statistics.median(r["cpu_us_per_envelope"] for r in rs) for k, rs in rounds.items()}
    return {
        "apps": args.apps,
        "messages": args.messages,
        "rounds": args.rounds,
        "acks_per_s_median": medians,
        "cpu_us_per_envelope_median": cpu,
        "ratio_to_bolt": {k: round(v / medians["bolt"], 2) for k, v in medians.items()}
        if "bolt" in medians
        else {},
        "load_average": [load0, os.getloadavg()],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--apps", type=int, default=10)
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    print(json.dumps(asyncio.run(run(p.parse_args()))))


if __name__ == "__main__":
    main()
