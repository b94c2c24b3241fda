"""What writing a batch's acks one frame at a time costs, against one write per batch.

aiohttp has no public call that writes several WebSocket frames at once, so the edge
sends each ack with ``send_str`` (one ``send`` system call each). This bench puts a
number on it, on 127.0.0.1, CPU time of the writing process only:

- ``aiohttp``: ``send_str`` per ack to an aiohttp WebSocket server (what the edge does);
- ``write_each``: the same frames' bytes, one ``transport.write`` each, on a plain
  asyncio connection (the system call alone);
- ``write_batch``: one ``transport.write`` of the whole batch (what a batched send would
  cost).

    .venv/bin/python bench/ack_write_bench.py --acks 50000 --batch 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid

import aiohttp
from aiohttp import web


def _acks(n: int) -> list[str]:
    return ['{"envelope_id":"' + str(uuid.uuid4()) + '"}' for _ in range(n)]


def _frame(text: str) -> bytes:
    """A masked client text frame (RFC 6455), as a client must send it."""
    payload = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


async def _aiohttp_sends(acks: list[str], batch: int) -> float:
    received = 0
    done = asyncio.Event()

    async def handler(request: web.Request) -> web.WebSocketResponse:
        nonlocal received
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            received += 1
            if received == len(acks):
                done.set()
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession() as session, session.ws_connect(f"http://127.0.0.1:{port}/") as ws:
        cpu = time.process_time()
        for start in range(0, len(acks), batch):
            for text in acks[start : start + batch]:
                await ws.send_str(text)
            await asyncio.sleep(0)  # the server reads between batches, as Slack would
        spent = time.process_time() - cpu
        await asyncio.wait_for(done.wait(), 60)
    await runner.cleanup()
    return spent


async def _raw_writes(frames: list[bytes], batch: int, *, joined: bool) -> float:
    got = 0
    total = sum(len(f) for f in frames)
    done, ended = asyncio.Event(), asyncio.Event()

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal got
        while chunk := await reader.read(1 << 16):
            got += len(chunk)
            if got >= total:
                done.set()
        writer.close()
        ended.set()

    server = await asyncio.start_server(sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    cpu = time.process_time()
    for start in range(0, len(frames), batch):
        chunk = frames[start : start + batch]
        if joined:
            writer.write(b"".join(chunk))
        else:
            for frame in chunk:
                writer.write(frame)
        await writer.drain()
        await asyncio.sleep(0)
    spent = time.process_time() - cpu
    await asyncio.wait_for(done.wait(), 60)
    writer.close()
    await writer.wait_closed()
    await asyncio.wait_for(ended.wait(), 60)
    server.close()
    await server.wait_closed()
    return spent


async def run(n: int, batch: int) -> dict[str, object]:
    acks = _acks(n)
    frames = [_frame(a) for a in acks]
    out: dict[str, object] = {"acks": n, "batch": batch, "load": os.getloadavg()}
    for name, spent in (
        ("aiohttp_send_str_us_per_ack", await _aiohttp_sends(acks, batch)),
        ("write_each_us_per_ack", await _raw_writes(frames, batch, joined=False)),
        ("write_batch_us_per_ack", await _raw_writes(frames, batch, joined=True)),
    ):
        out[name] = round(spent / n * 1e6, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--acks", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.acks, args.batch))))


if __name__ == "__main__":
    main()
