"""What ``ask_agent`` costs (docs/agents.md "Asking a teammate"), as ratios in one run.

The real fleet (10 ``openai`` instances ``app0``…``app9`` in process, SQLite on disk) against
the emulator in a subprocess (its own core) and a local model server that answers at once.
``appN`` asks ``appN+1`` (``NANOSLACK_A2A_ALLOW`` names those pairs).

1. **Round trip.** ``--asks`` mentions of ``app0``, one after another: each turn asks ``app1``
   (which answers with ``send_message``) and ends silent; the first 5 are a warm-up. Per ask,
   from the store's steps: the ``ask_agent`` step's time minus the asked turn's own model
   calls' time (what the model server took, as the back end timed it) is what the ask itself
   costs (the asked turn's transcript, its row, its toolbox, its tool call, its recording).
   Target: p99 ≤ 50 ms.
2. **Acks with asks in flight.** ``--rounds`` times: plain messages in the room (no mention:
   every instance acks each, none runs a turn) at ``--rate``/s for ``--seconds``, and the
   emulator's send → ack latencies (p50/p99), first with nothing else going on (A), then with
   50 asks in flight across the 10 instances (B: 5 mentions of each ``appN``, each turn asks
   ``appN+1``, whose model call the server holds until the phase ends). Target: the medians'
   ratio B/A of ack p99 ≤ 1.10.

    .venv/bin/python bench/ask_bench.py --asks 200 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from _common import drop_proxies, percentile, serve_model, start_emulator, stop_process, wait_until
from aiohttp import web

from nanoslack.config import load_settings
from nanoslack.logs import configure_logging
from nanoslack.ops.envfile import write_env
from nanoslack.slack.fleet import Fleet

N_APPS = 10
IN_FLIGHT = 50
WARMUP = 5


class Model:
    """Chat Completions at once: a mention's turn asks the next app, then posts; an asked
    turn answers with ``send_message``, held while ``hold`` is set (phase B)."""

    def __init__(self) -> None:
        self.hold: asyncio.Event | None = None
        self.held = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        system = " ".join(str(m.get("content")) for m in messages if m["role"] == "system")
        me = int(system.split("You are app", 1)[1].split(".", 1)[0])
        last = messages[-1]
        prompt = str(last.get("content") or "") if last["role"] == "user" else ""
        if prompt.startswith("[Asked by"):
            if self.hold is not None:
                self.held += 1
                await self.hold.wait()
            return _reply(call=("send_message", {"text": f"app{me} says: all green"}))
        if prompt:
            return _reply(call=("ask_agent", {"to": f"app{(me + 1) % N_APPS}", "question": "status?"}))
        # The asking turn ends silent: a post in the room would be a message for every app
        # to ack and route, which the next phase would measure too.
        return _reply()


def _reply(call: tuple[str, dict[str, Any]] | None = None) -> web.Response:
    message: dict[str, Any] = {"role": "assistant", "content": None if call else ""}
    if call:
        fn = {"name": call[0], "arguments": json.dumps(call[1])}
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": fn}]
    usage = {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44}
    return web.json_response(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": usage,
        }
    )


class Driver:
    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/") + "/_emulator/"
        self.session = aiohttp.ClientSession(trust_env=False)

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(self.base + path, json=body) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def ack_latencies(self, clear: bool = False) -> list[float]:
        async with self.session.get(self.base + "ack_latencies", params={"clear": "1"} if clear else {}) as r:
            r.raise_for_status()
            return [float(x) for x in (await r.json())["latencies"]]

    async def stats(self) -> dict[str, int]:
        async with self.session.get(self.base + "stats") as resp:
            resp.raise_for_status()
            s: dict[str, int] = await resp.json()
            return s


def _p(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {q: round(percentile(ordered, n), 2) for q, n in (("p50", 50), ("p99", 99))}


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """The bench reads the fleet's SQLite file directly (read-only, beside the fleet's writes)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        return conn.execute(sql).fetchall()


async def _count(db: Path, sql: str) -> int:
    return int(_rows(db, sql)[0][0] or 0)


async def round_trips(drv: Driver, info: dict[str, Any], db: Path, asks: int) -> dict[str, Any]:
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    app0 = info["apps"][0]["bot_user_id"]
    done_sql = "SELECT count(*) FROM turns WHERE instance = 'app0' AND status IN ('done', 'silent')"
    await settled(drv, db)
    for i in range(asks):
        await drv.post("bulk_post", {"user_id": alice, "channel": room, "texts": [f"<@{app0}> q {i}"]})
        probe = functools.partial(_at_least, db, done_sql, i + 1)
        await wait_until(probe, within=60, interval=0.005, what="a turn")
    rows = _rows(
        db,
        "SELECT s.ms, (SELECT coalesce(sum(m.ms), 0) FROM turns a JOIN turn_steps m ON m.turn_id = a.id"
        "  WHERE a.thread_key = 'ask:' || t.id || ':1' AND m.kind = 'model')"
        " FROM turns t JOIN turn_steps s ON s.turn_id = t.id"
        " WHERE t.instance = 'app0' AND s.name = 'ask_agent' AND s.error IS NULL ORDER BY t.id",
    )
    rows = rows[WARMUP:]  # the first asks build what every later one reuses (schemas, clients)
    overhead = [float(ask) - float(model) for ask, model in rows]
    return {
        "asks": len(rows),
        "ask_step_ms": _p([float(r[0]) for r in rows]),
        "asked_model_ms": _p([float(r[1]) for r in rows]),
        "overhead_beyond_model_ms": _p(overhead),
        "overhead_worst_ms": [round(x, 1) for x in sorted(overhead)[-5:]],
    }


async def _at_least(db: Path, sql: str, n: int) -> bool:
    return await _count(db, sql) >= n


async def settled(drv: Driver, db: Path) -> None:
    """Nothing left over from the phase before: every envelope acked, every message and turn done."""
    busy = (
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running') = 0"
    )

    async def quiet() -> bool:
        stats = await drv.stats()
        return stats["acked"] >= stats["delivered"] and await _at_least(db, busy, 1)

    await wait_until(quiet, within=120, interval=0.05, what="a settled fleet")


async def ack_phase(drv: Driver, info: dict[str, Any], rate: float, seconds: float, word: str) -> list[float]:
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    await drv.ack_latencies(clear=True)
    base = (await drv.stats())["acked"]
    total, posted, t0 = int(rate * seconds), 0, time.perf_counter()
    while posted < total:
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        if due > posted:
            texts = [f"{word} note {i}" for i in range(posted, due)]
            await drv.post("bulk_post", {"user_id": alice, "channel": room, "texts": texts})
            posted = due
        await asyncio.sleep(0.01)
    expected = base + total * N_APPS

    async def acked() -> bool:
        return (await drv.stats())["acked"] >= expected

    await wait_until(acked, within=60, interval=0.01, what="acks")
    return [x * 1000 for x in await drv.ack_latencies(clear=True)]


async def with_asks_in_flight(
    drv: Driver, info: dict[str, Any], db: Path, model: Model, rate: float, seconds: float, r: int
) -> list[float]:
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    model.hold, model.held = asyncio.Event(), 0
    texts = [f"<@{info['apps'][i % N_APPS]['bot_user_id']}> round {r} q {i}" for i in range(IN_FLIGHT)]
    running = "SELECT count(*) FROM turns WHERE thread_key LIKE 'ask:%' AND status = 'running'"
    before = await _count(db, "SELECT count(*) FROM turns WHERE thread_key LIKE 'ask:%'")
    await drv.post("bulk_post", {"user_id": alice, "channel": room, "texts": texts})

    async def all_held() -> bool:
        return model.held >= IN_FLIGHT and await _count(db, running) >= IN_FLIGHT

    await wait_until(all_held, within=120, interval=0.05, what="50 asks in flight")
    ms = await ack_phase(drv, info, rate, seconds, f"b{r}")
    assert await _count(db, running) >= IN_FLIGHT, "an ask ended during the phase"
    model.hold.set()
    model.hold = None
    done = "SELECT count(*) FROM turns WHERE thread_key LIKE 'ask:%' AND status = 'done'"
    await wait_until(lambda: _at_least(db, done, before + IN_FLIGHT), within=120, what="asks answered")
    await settled(drv, db)
    return ms


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model = Model()
    runner, model_url = await serve_model(model.handle)

    proc, info = start_emulator(N_APPS)
    tmp = Path(tempfile.mkdtemp(prefix="ask-bench-"))
    db = tmp / "nanoslack.db"
    apps = info["apps"]
    for i in range(N_APPS):
        (tmp / "teammates" / f"app{i}").mkdir(parents=True)
        (tmp / "teammates" / f"app{i}" / "SOUL.md").write_text(f"You are app{i}.\n")
    values = {
        "SLACK_API_URL": info["api_url"],
        "NANOSLACK_DB": str(db),
        "SLACK_INSTANCES": ",".join(f"app{i}" for i in range(N_APPS)),
        "SLACK_OWNER": info["users"][0]["id"],
        "SLACK_A2A_ROOMS": info["conversations"][0]["id"],
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": "m",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "sk-bench-000000",
        "NANOSLACK_TEAMMATES": str(tmp / "teammates"),
        "NANOSLACK_A2A_ALLOW": ",".join(f"app{i}>app{(i + 1) % N_APPS}" for i in range(N_APPS)),
        "NANOSLACK_MAX_TURNS": str(IN_FLIGHT + 14),
        "NANOSLACK_WORKING_REACTION": "",
        "NANOSLACK_POST_RATE": "0",
        "LOG_LEVEL": "warning",
    }
    for i, a in enumerate(apps):
        values[f"SLACK_BOT_TOKEN_APP{i}"] = a["bot_token"]
        values[f"SLACK_APP_TOKEN_APP{i}"] = a["app_token"]
    write_env(tmp / ".env", values, replace=True)
    drv = Driver(info["base_url"])
    fleet = Fleet(load_settings(tmp / ".env", environ={}))
    await fleet.start()
    result: dict[str, Any] = {"load_avg": os.getloadavg(), "cpus": os.cpu_count()}
    try:
        result["round_trip"] = await round_trips(drv, info, db, args.asks)
        a_p99: list[float] = []
        b_p99: list[float] = []
        rounds = []
        for r in range(args.rounds):
            await settled(drv, db)
            a = await ack_phase(drv, info, args.rate, args.seconds, f"a{r}")
            b = await with_asks_in_flight(drv, info, db, model, args.rate, args.seconds, r)
            a_p99.append(_p(a)["p99"])
            b_p99.append(_p(b)["p99"])
            rounds.append(
                {"without_asks": _p(a), "with_50_asks_in_flight": _p(b), "samples": [len(a), len(b)]}
            )
        if not rounds:
            return result
        result["acks"] = {
            "rounds": rounds,
            "p99_median_without_ms": statistics.median(a_p99),
            "p99_median_with_ms": statistics.median(b_p99),
            "ratio_with_over_without": round(
                statistics.median(b_p99) / max(statistics.median(a_p99), 1e-9), 3
            ),
        }
        result["load_avg_end"] = os.getloadavg()
    finally:
        await fleet.stop()
        await drv.session.close()
        stop_process(proc)
        await runner.cleanup()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=200, help="round trips measured (phase 1)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B ack rounds (phase 2)")
    parser.add_argument("--rate", type=float, default=50.0, help="plain messages/s in the ack phases")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each ack phase")
    args = parser.parse_args()
    drop_proxies()
    configure_logging("warning", "console", stream=sys.stderr)
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
