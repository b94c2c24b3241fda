"""Pipeline throughput without sockets (docs/architecture.md: ≥ 10,000 events/s on one core).

Feeds Slack ``event_callback`` payloads through exactly what an instance runs
after the socket: parse → self filter → durable inbox → guard (A2A policy, hop
ledger) → router → gate, on a SQLite file on disk. Prints one JSON line.

    .venv/bin/python bench/pipeline_bench.py --events 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from nanoslack import heap
from nanoslack.asks import OwnerAsks
from nanoslack.config import A2AConfig
from nanoslack.core import build_pipeline
from nanoslack.halts import Halts
from nanoslack.inbound import Drop, Identity
from nanoslack.logs import configure_logging
from nanoslack.rounds import RoundsFeature
from nanoslack.services import Services
from nanoslack.slack.parse import is_self, parse_event
from nanoslack.store import Store

ROOM, OWNER, BOT_USER, SIBLING_BOT = "C0BENCH", "U0OWNER", "U0DANA", "B0ELI"


def payload(i: int) -> dict[str, Any]:
    """Mostly human mentions in one thread; every 10th a sibling bot's message."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": ROOM,
        "channel_type": "mpim",
        "text": f"<@{BOT_USER}> message {i}",
        "ts": f"1700000000.{i:06d}",
    }
    if i % 10 == 9:
        event.update(bot_id=SIBLING_BOT, user="U0ELI", bot_profile={"name": "eli"})
    else:
        event["user"] = OWNER
    return {"type": "event_callback", "team_id": "T0", "event": event, "event_id": f"Ev{i}"}


async def run(n: int, db: Path, batch: int) -> dict[str, Any]:
    store = Store.open(f"sqlite:///{db}")
    ident = Identity(instance="dana", team_id="T0", bot_user_id=BOT_USER, bot_id="B0DANA")
    config = A2AConfig(frozenset({ROOM}), 10**9)
    # The parts the instance's core shares with its pipeline; of the room features, the one
    # that takes part in routing (the core passes all of them).
    services = Services(
        store, Path("teammates"), siblings=dict, limiter=asyncio.Semaphore(1), a2a_config=lambda: config
    )
    pipeline = build_pipeline(
        ident,
        services,
        asks=OwnerAsks(store, instance=ident.instance, owners=(OWNER,)),
        halts=Halts(store),
        features=[RoundsFeature(store, instance=ident.instance, chief=None)],
    )
    bodies = [payload(i) for i in range(n)]
    # As the fleet runs (``Fleet.start``, ``Fleet.run``): SQLite's checkpoints on their
    # thread, the collector settled once the process is built.
    store.checkpoints.start()
    restore_heap = heap.settle()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    statuses: dict[str, int] = {}
    # As the fleet runs it: the intake records a burst in one commit (group
    # commit), the worker drains what is queued and processes it as one batch.
    for start in range(0, n, batch):
        msgs = []
        for body in bodies[start : start + batch]:
            msg = parse_event(body, instance="dana", team_id="T0")
            assert not isinstance(msg, Drop)
            if not is_self(msg, bot_user_id=ident.bot_user_id, bot_id=ident.bot_id):
                msgs.append(msg)
        fresh = [m for m, new in zip(msgs, pipeline.accept_many(msgs), strict=True) if new]
        for outcome in await pipeline.process_many(fresh):
            statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    restore_heap()
    store.close()
    return {
        "events": n,
        "batch": batch,
        "seconds": round(wall, 3),
        "events_per_s": round(n / wall),
        "cpu_us_per_event": round(cpu / n * 1e6, 1),
        "outcomes": statuses,
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64, help="messages per commit (1: one by one)")
    args = parser.parse_args()
    configure_logging("warning")  # as a production fleet would run under load
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(run(args.events, Path(tmp) / "bench.db", max(1, args.batch)))
    print(json.dumps(result))
    rate, cpu = result["events_per_s"], result["cpu_us_per_event"]
    print(f"pipeline (batch {result['batch']}): {rate} events/s ({cpu} µs CPU/event) — target ≥ 10000")


if __name__ == "__main__":
    main()
