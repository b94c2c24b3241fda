"""The fleet end to end through the emulator (docs/architecture.md), ratios measured in one run.

1. Throughput. The emulator runs in a subprocess (its own core); 10 apps share one MPIM with a
   human. Phase A: 10 bare slack-bolt apps (no-op ``message`` and ``app_mention`` listeners) in
   this process. Phase B: the nanoslack ``Fleet`` in this process (10 instances from a temp .env,
   SQLite file in a temp dir, the human is ``SLACK_OWNER``), on a fresh emulator. Both get N
   human messages, each mentioning one app round-robin (so every message is 10 ``message``
   envelopes + 1 ``app_mention`` twin). Measured: envelopes acked per second, messages fully
   processed per second (every instance's inbox row finished), CPU µs per envelope.
2. Ack latency. The fleet of phase B stays connected; the bench posts at a steady rate
   (default 100 messages/s = 1,100 envelopes/s) in 10 ms slices for ~10 s and reads the
   emulator's per-envelope send → ack latencies. The same for the bare bolt apps, as reference.
3. Memory and connect time. ``python -m nanoslack run`` as a subprocess with 1 and with 21
   instances: RSS (VmRSS) once all are connected, per extra instance = (RSS21 - RSS1) / 20;
   time from process start to the first connection and to 20 / all connections.

Prints one JSON object (all figures and the targets) and a short summary.

    .venv/bin/python bench/fleet_bench.py [--messages 5000] [--rate 100] [--rate-seconds 10]
        [--skip-memory] [--skip-latency] [--skip-bare-latency] [--profile-fleet FILE]
        [--database-url postgresql+psycopg://…] [--metrics]

``--database-url`` runs the fleet phases on that database instead of a temp SQLite file
(docs/operations.md); give it an empty database: its nanoslack tables are emptied first.
``--metrics`` serves the fleet's ``/metrics`` (``NANOSLACK_METRICS_ADDR``, docs/operations.md) and
scrapes it every second while the fleet phase is measured, as Prometheus would (more often).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    bare_bolt_apps,
    bench_workspace,
    drop_proxies,
    percentile,
    proc_cpu,
    proc_rss_mb,
    start_emulator,
    stop_process,
    wait_until,
)

from nanoslack import eventloop, heap
from nanoslack.config import Settings, env_suffix, load_settings
from nanoslack.fleetproc import FleetProcess
from nanoslack.inbound import Inbound
from nanoslack.logs import configure_logging
from nanoslack.ops.envfile import write_env
from nanoslack.pipeline import Outcome
from nanoslack.slack.adapter import SocketOptions
from nanoslack.slack.fleet import Fleet
from nanoslack.store import Store

TARGET_RATIO_ACKS = 3.0  # the median of the rounds
TARGET_RATIO_ACKS_EVERY_ROUND = 2.0
TARGET_RATIO_PROCESSING = 2.5
TARGET_P99_MS = 50.0  # steady and while the burst's turns drain
TARGET_REPLY_P50_MS = 50.0
TARGET_REPLY_P99_MS = 250.0
TARGET_MB_PER_INSTANCE = 8.0
TARGET_CONNECT_20_S = 3.0
N_APPS = 10
WARMUP = 20
MEM_TRAFFIC_RATE = 50.0  # messages/s after connecting, for the RSS after traffic


class Driver:
    """The emulator's HTTP driver API, async (aiohttp), so polling and pacing run on the
    bench's own loop without threads competing for the GIL."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/") + "/_emulator/"
        self.session = aiohttp.ClientSession(trust_env=False)

    async def close(self) -> None:
        await self.session.close()

    async def get(self, path: str, **query: str) -> Any:
        async with self.session.get(self.base + path, params=query) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(self.base + path, json=body) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def stats(self) -> dict[str, int]:
        s: dict[str, int] = await self.get("stats")
        return s

    async def bulk_post(self, user: str, channel: str, texts: list[str]) -> None:
        await self.post("bulk_post", {"user_id": user, "channel": channel, "texts": texts})

    async def ack_latencies(self, clear: bool = False) -> list[float]:
        r = await self.get("ack_latencies", **({"clear": "1"} if clear else {}))
        return [float(x) for x in r["latencies"]]


def workload(info: dict[str, Any], n: int, start: int = 0, word: str = "bench") -> list[str]:
    """Human messages, each mentioning one app round-robin (→ an ``app_mention`` twin)."""
    bots = [a["bot_user_id"] for a in info["apps"]]
    return [f"<@{bots[i % len(bots)]}> {word} {i}" for i in range(start, start + n)]


def envelopes_for(n_messages: int, n_apps: int) -> int:
    return n_messages * (n_apps + 1)  # a message per app + the mentioned app's app_mention


def write_fleet_env(
    path: Path, info: dict[str, Any], apps: list[dict[str, Any]], db: Path, **extra: str
) -> None:
    values = {"SLACK_API_URL": info["api_url"], "NANOSLACK_DB": str(db)}
    values["SLACK_INSTANCES"] = ",".join(a["name"] for a in apps)
    for a in apps:
        suf = env_suffix(a["name"])
        values |= {f"SLACK_BOT_TOKEN_{suf}": a["bot_token"], f"SLACK_APP_TOKEN_{suf}": a["app_token"]}
    write_env(path, values | extra, replace=True)


def silent_agent(tmp: str | Path) -> dict[str, str]:
    """``run`` refuses an instance without a back end: a script agent with no rules
    answers nothing, without a subprocess or a network call."""
    rules = Path(tmp) / "silent.json"
    rules.write_text('{"rules": [], "default": null}')
    return {"NANOSLACK_AGENT": "script", "NANOSLACK_AGENT_SCRIPT": str(rules)}


class Timer:
    """Wall, own-process CPU and emulator CPU over one measured stretch."""

    def __init__(self, emu_pid: int) -> None:
        self.emu_pid = emu_pid
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.emu0 = proc_cpu(emu_pid)

    def lap(self) -> tuple[float, float, float]:
        return (
            time.perf_counter() - self.wall0,
            time.process_time() - self.cpu0,
            proc_cpu(self.emu_pid) - self.emu0,
        )


def acked_at_least(drv: Driver, n: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return (await drv.stats())["acked"] >= n

    return probe


# ---- 1a: bare bolt ---------------------------------------------------------------------------


async def phase_bare(n_messages: int, latency: tuple[float, float] | None) -> dict[str, Any]:
    proc, info = start_emulator(N_APPS)
    drv = Driver(info["base_url"])
    try:
        async with bare_bolt_apps(info, events=("message", "app_mention")):
            return await _bare_round(drv, info, proc.pid, n_messages, latency)
    finally:
        await drv.close()
        stop_process(proc)


async def _bare_round(
    drv: Driver, info: dict[str, Any], pid: int, n_messages: int, latency: tuple[float, float] | None
) -> dict[str, Any]:
    await wait_until(lambda: _connections_at_least(drv, N_APPS), within=20, what="bare bolt apps connected")
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    # warm-up: bolt's lazy auth.test, first-dispatch imports
    await drv.bulk_post(alice, room, workload(info, WARMUP, word="warm"))
    await wait_until(acked_at_least(drv, envelopes_for(WARMUP, N_APPS)), within=30, what="warm-up")
    base = await drv.stats()
    expected = base["acked"] + envelopes_for(n_messages, N_APPS)
    texts = workload(info, n_messages)
    timer = Timer(pid)
    post = asyncio.create_task(drv.bulk_post(alice, room, texts))
    await wait_until(acked_at_least(drv, expected), within=300, interval=0.02, what="all envelopes acked")
    wall, cpu, emu_cpu = timer.lap()
    await post
    s = await drv.stats()
    envelopes = envelopes_for(n_messages, N_APPS)
    result: dict[str, Any] = {
        "seconds": round(wall, 3),
        "envelopes_acked_per_s": round(envelopes / wall),
        "messages_per_s": round(n_messages / wall),
        "cpu_us_per_envelope": round(cpu / envelopes * 1e6, 1),
        "emulator_cpu_us_per_envelope": round(emu_cpu / envelopes * 1e6, 1),
        "redelivered": s["redelivered"] - base["redelivered"],
    }
    if latency is not None:
        result["latency"] = await steady_latency(drv, info, *latency, processed=None, label="bare bolt")
    return result


async def _connections_at_least(drv: Driver, n: int) -> bool:
    return (await drv.stats())["connections"] >= n


# ---- 1b + 2: the fleet -------------------------------------------------------------------------


class Outcomes:
    """``on_outcome`` observer: counts finished messages, wakes a waiter at a target."""

    def __init__(self) -> None:
        self.count = 0
        self.statuses: dict[str, int] = {}
        self._target = 0
        self._event: asyncio.Event | None = None

    def __call__(self, msg: Inbound, outcome: Outcome) -> None:
        self.count += 1
        self.statuses[outcome.status] = self.statuses.get(outcome.status, 0) + 1
        if self._event is not None and self.count >= self._target:
            self._event.set()

    async def wait(self, target: int, within: float) -> None:
        if self.count >= target:
            return
        self._target, self._event = target, asyncio.Event()
        try:
            await asyncio.wait_for(self._event.wait(), within)
        except TimeoutError:
            raise TimeoutError(f"processed {self.count} of {target} within {within}s") from None
        finally:
            self._event = None


async def phase_fleet(
    n_messages: int,
    latency: tuple[float, float] | None,
    profile: cProfile.Profile | None,
    database_url: str | None = None,
    metrics: bool = False,
    socket: SocketOptions | None = None,
) -> dict[str, Any]:
    proc, info = start_emulator(N_APPS)
    drv = Driver(info["base_url"])
    fleet: Fleet | None = None
    restore_heap: Callable[[], None] | None = None
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        try:
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            db = Path(tmp) / "nanoslack.db"
            env = Path(tmp) / ".env"
            on_url = {"DATABASE_URL": database_url} if database_url else {}
            if metrics:
                on_url["NANOSLACK_METRICS_ADDR"] = "127.0.0.1:0"
            write_fleet_env(
                env,
                info,
                info["apps"],
                db,
                SLACK_OWNER=alice,
                LOG_LEVEL="warning",
                **silent_agent(tmp),
                **on_url,
            )
            settings = load_settings(env, environ={})
            if database_url:
                empty_tables(database_url)
            outcomes = Outcomes()
            fleet = Fleet(settings, socket=socket or SocketOptions(), on_outcome=outcomes)
            started = await fleet.start()
            assert len(started) == N_APPS, started
            # as ``Fleet.run`` does once started; put back after the phase, so bare bolt's
            # next round runs on the collector it ships with
            restore_heap = heap.settle()
            await wait_until(lambda: _connections_at_least(drv, N_APPS), within=20, what="fleet connected")
            await drv.bulk_post(alice, room, workload(info, WARMUP, word="warm"))
            await wait_until(acked_at_least(drv, envelopes_for(WARMUP, N_APPS)), within=30, what="warm")
            await outcomes.wait(WARMUP * N_APPS, within=30)
            base, done0 = await drv.stats(), outcomes.count
            expected = base["acked"] + envelopes_for(n_messages, N_APPS)
            texts = workload(info, n_messages)
            if profile is not None:
                profile.enable()
            timer = Timer(proc.pid)
            scraper = asyncio.create_task(scrape_forever(fleet)) if metrics else None
            post = asyncio.create_task(drv.bulk_post(alice, room, texts))
            await wait_until(
                acked_at_least(drv, expected), within=300, interval=0.02, what="all envelopes acked"
            )
            ack_wall, ack_cpu, ack_emu = timer.lap()
            await outcomes.wait(done0 + n_messages * N_APPS, within=300)
            wall, cpu, emu_cpu = timer.lap()
            if profile is not None:
                profile.disable()
            scrapes = await _stop_scraping(scraper)
            await post
            s = await drv.stats()
            envelopes = envelopes_for(n_messages, N_APPS)
            rows = _inbox_rows(settings.db_url)
            result: dict[str, Any] = {
                "ack_seconds": round(ack_wall, 3),
                "envelopes_acked_per_s": round(envelopes / ack_wall),
                "processed_seconds": round(wall, 3),
                "messages_processed_per_s": round(n_messages / wall),
                "inbox_rows_finished_per_s": round(n_messages * N_APPS / wall),
                "cpu_us_per_envelope": round(cpu / envelopes * 1e6, 1),
                "cpu_us_per_envelope_until_acked": round(ack_cpu / envelopes * 1e6, 1),
                "emulator_cpu_us_per_envelope": round(emu_cpu / envelopes * 1e6, 1),
                "redelivered": s["redelivered"] - base["redelivered"],
                "outcomes": dict(outcomes.statuses),
                "inbox_rows": rows,
                "group_commits": sum(t.inbox_commits for t in fleet.metrics.tallies.values()),
                "group_commit_records": sum(t.inbox_records for t in fleet.metrics.tallies.values()),
                # New connections during the phase: the watchdog's (a heartbeat missed, an
                # idle socket) must stay 0 under backpressure.
                "reconnects": sum(rt.reconnects for rt in fleet.instances.values()),
                "watchdog_reconnects": sum(
                    getattr(rt, "watchdog_reconnects", rt.reconnects) for rt in fleet.instances.values()
                ),
            }
            if metrics:
                result["metrics_scrapes"] = scrapes
            if latency is not None:
                # The burst above left one turn per mention queued (5,000 at the default
                # size): first the acks while those turns drain, then, once they are
                # done, the steady state with agents answering what arrives.
                url = settings.db_url
                t_turns = time.perf_counter()
                result["turns_queued_at_latency_start"] = _pending(url)
                result["latency_while_turns_drain"] = await steady_latency(
                    drv, info, *latency, processed=outcomes, label="fleet, 5,000 turns draining"
                )
                result["turns_queued_at_latency_end"] = _pending(url)
                await wait_until(lambda: _no_pending(url), within=300, what="turn backlog drained")
                result["turn_backlog_drain_s"] = round(time.perf_counter() - t_turns, 3)
                result["latency"] = await steady_latency(
                    drv, info, *latency, processed=outcomes, label="fleet, steady"
                )
            return result
        finally:
            if fleet is not None:
                await fleet.stop()
            if restore_heap is not None:
                restore_heap()
            await drv.close()
            stop_process(proc)


async def scrape_forever(fleet: Fleet, every: float = 1.0) -> int:
    """GET /metrics every ``every`` seconds until cancelled; how many scrapes were answered."""
    assert fleet.health_server is not None
    url = fleet.health_server.url + "metrics"
    done = 0
    async with aiohttp.ClientSession() as http:
        try:
            while True:
                async with http.get(url) as resp:
                    await resp.read()
                    done += resp.status == 200
                await asyncio.sleep(every)
        except asyncio.CancelledError:
            return done


async def _stop_scraping(scraper: asyncio.Task[int] | None) -> int:
    if scraper is None:
        return 0
    scraper.cancel()
    return await scraper


def _inbox_rows(url: str) -> dict[str, int]:
    with Store.open(url) as store:
        return store.inbox.counts()


def empty_tables(url: str) -> None:
    """A run must not find a previous run's rows (inbox keys, groups, leases)."""
    with Store.open(url) as store:
        store.empty()


def _pending(url: str) -> int:
    """Messages waiting for a turn: what the turn backlog is."""
    with Store.open(url) as store:
        return store.messages.pending_count()


async def _no_pending(url: str) -> bool:
    return _pending(url) == 0


# Latency samples (ms) by phase, for the charts; not in the printed JSON.
SAMPLES: dict[str, list[float]] = {}


async def steady_latency(
    drv: Driver,
    info: dict[str, Any],
    rate: float,
    seconds: float,
    *,
    processed: Outcomes | None,
    label: str = "fleet",
) -> dict[str, Any]:
    """Post ``rate`` messages/s for ``seconds`` in 10 ms slices, then read the ack latencies."""
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    await drv.ack_latencies(clear=True)
    base = await drv.stats()
    done0 = processed.count if processed is not None else 0
    slice_s = 0.010
    total = int(rate * seconds)
    posted, late_slices = 0, 0
    t0 = time.perf_counter()
    while posted < total:
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        if due > posted:
            await drv.bulk_post(alice, room, workload(info, due - posted, start=posted, word="steady"))
            posted = due
        next_slice = t0 + (int((time.perf_counter() - t0) / slice_s) + 1) * slice_s
        pause = next_slice - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        else:
            late_slices += 1
    post_wall = time.perf_counter() - t0
    expected = base["acked"] + envelopes_for(total, N_APPS)
    await wait_until(acked_at_least(drv, expected), within=60, interval=0.01, what="steady acks")
    acked_wall = time.perf_counter() - t0
    backlog = None
    if processed is not None:
        await processed.wait(done0 + total * N_APPS, within=60)
        backlog = round(time.perf_counter() - t0 - post_wall, 3)
    lat = sorted(await drv.ack_latencies(clear=True))
    ms = [x * 1000 for x in lat]
    SAMPLES[label] = ms
    return {
        "messages_per_s": round(total / post_wall, 1),
        "envelopes_per_s": round(envelopes_for(total, N_APPS) / post_wall),
        "seconds": round(post_wall, 2),
        "all_acked_after_s": round(acked_wall, 2),
        "processed_backlog_after_posting_s": backlog,
        "late_slices": late_slices,
        "samples": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "p999_ms": round(percentile(ms, 99.9), 2),
        "max_ms": round(ms[-1], 2) if ms else None,
    }


# ---- 2b: reply latency ----------------------------------------------------------------------


def replying_agent(tmp: str | Path) -> dict[str, str]:
    """A script agent that answers every turn with one line: a turn, a transcript, an
    outbox row and a post per mention, without a subprocess or a model."""
    rules = Path(tmp) / "reply.json"
    rules.write_text('{"rules": [], "default": "on it"}')
    return {"NANOSLACK_AGENT": "script", "NANOSLACK_AGENT_SCRIPT": str(rules)}


def unpaced_fleet_settings(
    tmp: str | Path, info: dict[str, Any], agent: dict[str, str], **extra: str
) -> Settings:
    """The settings of a fleet of every app of the emulator ``info``, written to ``tmp``'s
    ``.env``: owned by its first user, logging warnings only, posting unpaced
    (``NANOSLACK_POST_RATE=0``), on the agent ``agent`` (``replying_agent``, ``silent_agent``),
    with ``extra``."""
    write_fleet_env(
        Path(tmp) / ".env",
        info,
        info["apps"],
        Path(tmp) / "nanoslack.db",
        SLACK_OWNER=info["users"][0]["id"],
        LOG_LEVEL="warning",
        NANOSLACK_POST_RATE="0",
        **agent,
        **extra,
    )
    return load_settings(Path(tmp) / ".env", environ={})


async def phase_replies(
    rate: float, seconds: float, database_url: str | None, socket: SocketOptions
) -> dict[str, Any]:
    """A human's post → the first bot reply in its thread, as Slack (the emulator) saw
    both: the difference of the two messages' ts, minted by the emulator's clock.
    Posting is unpaced (``NANOSLACK_POST_RATE=0``): Slack's 1 post/s per channel would
    otherwise set the figure for 100 mentions/s in one room; this is what the fleet adds."""
    proc, info = start_emulator(N_APPS)
    drv = Driver(info["base_url"])
    fleet: Fleet | None = None
    restore_heap: Callable[[], None] | None = None
    with tempfile.TemporaryDirectory(prefix="fleet-replies-") as tmp:
        try:
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            on_url = {"DATABASE_URL": database_url} if database_url else {}
            settings = unpaced_fleet_settings(tmp, info, replying_agent(tmp), **on_url)
            if database_url:
                empty_tables(database_url)
            fleet = Fleet(settings, socket=socket)
            await fleet.start()
            restore_heap = heap.settle()  # as Fleet.run does
            await wait_until(lambda: _connections_at_least(drv, N_APPS), within=20, what="fleet connected")
            warm = workload(info, WARMUP, word="warm")
            await drv.bulk_post(alice, room, warm)
            await wait_until(lambda: _replied(drv, room, WARMUP), within=60, what="warm-up replies")
            total = int(rate * seconds)
            t0 = time.perf_counter()
            posted = 0
            while posted < total:
                due = min(total, int((time.perf_counter() - t0) * rate) + 1)
                if due > posted:
                    await drv.bulk_post(alice, room, workload(info, due - posted, start=posted, word="reply"))
                    posted = due
                await asyncio.sleep(
                    max(0.0, t0 + (int((time.perf_counter() - t0) / 0.01) + 1) * 0.01 - time.perf_counter())
                )
            post_wall = time.perf_counter() - t0
            # Seldom: each poll is the whole room as JSON, in this process, beside the fleet.
            await wait_until(
                lambda: _replied(drv, room, WARMUP + total), within=120, interval=0.5, what="every reply"
            )
            latencies = await _reply_latencies(drv, room, skip=WARMUP)
        finally:
            if fleet is not None:
                await fleet.stop()
            if restore_heap is not None:
                restore_heap()
            await drv.close()
            stop_process(proc)
    ms = sorted(x * 1000 for x in latencies)
    SAMPLES["reply"] = ms
    return {
        "mentions_per_s": round(total / post_wall, 1),
        "seconds": round(post_wall, 2),
        "samples": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(ms[-1], 2) if ms else None,
    }


async def _thread_replies(drv: Driver, room: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The human's top-level messages in order, and the first bot reply's ts per thread."""
    msgs = await drv.get("messages", channel=room, flat="1")
    humans = [m for m in msgs if not m.get("bot_id") and m.get("thread_ts") in (None, m["ts"])]
    first: dict[str, float] = {}
    for m in msgs:
        parent = m.get("thread_ts")
        if m.get("bot_id") and parent and parent != m["ts"]:
            first[parent] = min(first.get(parent, float("inf")), float(m["ts"]))
    return humans, first


async def _replied(drv: Driver, room: str, n: int) -> bool:
    humans, first = await _thread_replies(drv, room)
    return len(humans) >= n and all(h["ts"] in first for h in humans[:n])


async def _reply_latencies(drv: Driver, room: str, *, skip: int) -> list[float]:
    humans, first = await _thread_replies(drv, room)
    return [first[h["ts"]] - float(h["ts"]) for h in humans[skip:]]


# ---- 3: memory and connect time ---------------------------------------------------------------


async def phase_memory(counts: tuple[int, ...], settle: float, traffic: int) -> dict[str, Any]:
    n_max = max(counts)
    proc, info = start_emulator(n_max, spec=bench_workspace(n_max, n_rooms=0))
    drv = Driver(info["base_url"])
    runs: dict[str, Any] = {}
    try:
        for n in counts:
            runs[str(n)] = await _one_fleet_process(drv, info, n, settle, traffic)
    finally:
        await drv.close()
        stop_process(proc)
    lo, hi = runs[str(min(counts))], runs[str(max(counts))]
    extra = max(counts) - min(counts)
    out: dict[str, Any] = {
        "runs": runs,
        "rss_mb_per_extra_instance": round((hi["rss_mb"] - lo["rss_mb"]) / extra, 2),
        "connect_20_s": hi.get("connected_20_s"),
    }
    if traffic:
        out["rss_mb_per_extra_instance_after_traffic"] = round(
            (hi["rss_mb_after_traffic"] - lo["rss_mb_after_traffic"]) / extra, 2
        )
    out["target_mb_per_instance"] = TARGET_MB_PER_INSTANCE
    out["target_connect_20_s"] = TARGET_CONNECT_20_S
    return out


async def _one_fleet_process(
    drv: Driver, info: dict[str, Any], n: int, settle: float, traffic: int
) -> dict[str, Any]:
    await wait_until(lambda: _connections_below(drv, 1), within=20, what="no fleet connected")
    apps = info["apps"][:n]
    alice = info["users"][0]["id"]
    # A room of its own per run: no envelope queued for an app of another run.
    members = [alice] + [a["bot_user_id"] for a in apps]
    room = await drv.post("conversations", {"members": members, "kind": "mpim" if n > 1 else "im"})
    with tempfile.TemporaryDirectory(prefix="fleet-mem-") as tmp:
        env = Path(tmp) / ".env"
        db = Path(tmp) / "nanoslack.db"
        write_fleet_env(env, info, apps, db, SLACK_OWNER=alice, LOG_LEVEL="warning", **silent_agent(tmp))
        t0 = time.perf_counter()
        child = FleetProcess.start(env, log_file=Path(tmp) / "fleet.log")
        marks: dict[str, float] = {}
        out: dict[str, Any] = {"instances": n}
        try:
            deadline = t0 + 30
            while True:
                conns = (await drv.stats())["connections"]
                now = time.perf_counter() - t0
                if conns >= 1 and "first" not in marks:
                    marks["first"] = now
                if conns >= 20 and "twenty" not in marks:
                    marks["twenty"] = now
                if conns >= n:
                    marks["all"] = now
                    break
                if not child.running:
                    raise RuntimeError(f"nanoslack run exited with {child.returncode}\n{child.tail()}")
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{conns} of {n} instances connected within 30 s")
                await asyncio.sleep(0.005)
            out["rss_mb_at_connect"] = round(proc_rss_mb(child.pid), 1)
            per_app = [(await drv.get("connections", app_id=a["app_id"]))["connections"] for a in apps]
            assert all(c >= 1 for c in per_app), per_app
            await asyncio.sleep(settle)
            out["rss_mb"] = round(proc_rss_mb(child.pid), 1)
            out["cpu_s_until_settled"] = round(proc_cpu(child.pid), 2)
            if traffic:
                await _paced_traffic(drv, apps, alice, room["id"], traffic)
                await asyncio.sleep(settle)
                out["rss_mb_after_traffic"] = round(proc_rss_mb(child.pid), 1)
            out["peak_rss_mb"] = round(proc_rss_mb(child.pid, "VmHWM"), 1)
        finally:
            await child.stop(15)
        out["first_connected_s"] = round(marks["first"], 3)
        out["all_connected_s"] = round(marks["all"], 3)
        if "twenty" in marks:
            out["connected_20_s"] = round(marks["twenty"], 3)
            out["first_to_20_s"] = round(marks["twenty"] - marks["first"], 3)
        out["exit_code"] = child.returncode
        return out


async def _paced_traffic(
    drv: Driver, apps: list[dict[str, Any]], user: str, room: str, n_messages: int
) -> None:
    """One warm-up message (bolt's first auth.test per instance), then ``n_messages``
    at a steady MEM_TRAFFIC_RATE messages/s, each mentioning one instance; waits for every ack."""
    n = len(apps)

    async def all_acked(want: int) -> bool:
        s = await drv.stats()
        return s["delivered"] >= want and s["acked"] == s["delivered"]

    base = (await drv.stats())["delivered"]
    await drv.bulk_post(user, room, ["warm-up"])
    await wait_until(lambda: all_acked(base + n), within=30, what="memory warm-up acked")
    t0 = time.perf_counter()
    for i in range(n_messages):
        await drv.bulk_post(user, room, [f"<@{apps[i % n]['bot_user_id']}> mem {i}"])
        pause = t0 + (i + 1) / MEM_TRAFFIC_RATE - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
    await wait_until(lambda: all_acked(base + n + n_messages * n), within=120, what="memory traffic acked")


async def _connections_below(drv: Driver, n: int) -> bool:
    return (await drv.stats())["connections"] < n


# ---- main ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    drop_proxies()
    configure_logging("warning")
    latency = None if args.skip_latency else (args.rate, args.rate_seconds)
    bare_latency = None if args.skip_bare_latency else latency
    profile = cProfile.Profile() if args.profile_fleet else None
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "machine": _machine(),
        "python": platform.python_version(),
        "apps": N_APPS,
        "messages": args.messages,
        "envelopes": envelopes_for(args.messages, N_APPS),
        "database": "sqlite" if not args.database_url else args.database_url.split(":", 1)[0],
        "metrics": args.metrics,
    }
    socket = SocketOptions()
    result["load_average_at_start"] = _loadavg()
    met: dict[str, bool] = {}
    if not args.skip_throughput:
        rounds = []
        for i in range(args.rounds):
            bare = await phase_bare(args.messages, bare_latency if i == 0 else None)
            fleet = await phase_fleet(
                args.messages,
                latency if i == 0 else None,
                profile if i == 0 else None,
                args.database_url,
                args.metrics,
                socket,
            )
            rounds.append(
                {
                    "bare_acks_per_s": bare["envelopes_acked_per_s"],
                    "fleet_acks_per_s": fleet["envelopes_acked_per_s"],
                    "bare_messages_per_s": bare["messages_per_s"],
                    "fleet_messages_processed_per_s": fleet["messages_processed_per_s"],
                    "bare_cpu_us_per_envelope": bare.get("cpu_us_per_envelope"),
                    "fleet_cpu_us_per_envelope": fleet["cpu_us_per_envelope"],
                    "ratio_acks": round(fleet["envelopes_acked_per_s"] / bare["envelopes_acked_per_s"], 3),
                    "ratio_processing": round(fleet["messages_processed_per_s"] / bare["messages_per_s"], 3),
                    # A redelivery means an ack went missing for the emulator's ack timeout
                    # (60 s): it stretches that phase, so it is printed with the round.
                    "bare_redelivered": bare["redelivered"],
                    "fleet_redelivered": fleet["redelivered"],
                    "fleet_watchdog_reconnects": fleet["watchdog_reconnects"],
                    # What a round leaves behind in this process: nothing may pile up.
                    "left_after_round": _leftovers(),
                    "load_average": _loadavg(),
                }
            )
            if i == 0:
                result["bare_bolt"] = bare
                result["fleet"] = fleet
            print(json.dumps({"round": i + 1, **rounds[-1]}), file=sys.stderr, flush=True)
        if profile is not None:
            profile.dump_stats(args.profile_fleet)
        result["rounds"] = rounds
        result["ratio_acks"] = statistics.median(r["ratio_acks"] for r in rounds)
        result["ratio_processing"] = statistics.median(r["ratio_processing"] for r in rounds)
        result["ratio_acks_lowest_round"] = min(r["ratio_acks"] for r in rounds)
        met["ratio_acks"] = result["ratio_acks"] >= TARGET_RATIO_ACKS
        met["ratio_acks_every_round"] = result["ratio_acks_lowest_round"] >= TARGET_RATIO_ACKS_EVERY_ROUND
        met["ratio_processing"] = result["ratio_processing"] >= TARGET_RATIO_PROCESSING
        if "latency" in result["fleet"]:
            met["ack_p99"] = result["fleet"]["latency"]["p99_ms"] <= TARGET_P99_MS
            draining = result["fleet"]["latency_while_turns_drain"]
            met["ack_p99_while_turns_drain"] = draining["p99_ms"] <= TARGET_P99_MS
    if not args.skip_replies:
        replies = await phase_replies(args.rate, args.rate_seconds, args.database_url, socket)
        result["reply_latency"] = replies
        met["reply_p50"] = replies["p50_ms"] <= TARGET_REPLY_P50_MS
        met["reply_p99"] = replies["p99_ms"] <= TARGET_REPLY_P99_MS
    result["targets"] = {
        "ratio_acks": TARGET_RATIO_ACKS,
        "ratio_acks_every_round": TARGET_RATIO_ACKS_EVERY_ROUND,
        "ratio_processing": TARGET_RATIO_PROCESSING,
        "ack_p99_ms": TARGET_P99_MS,
        "reply_p50_ms": TARGET_REPLY_P50_MS,
        "reply_p99_ms": TARGET_REPLY_P99_MS,
        "mb_per_extra_instance": TARGET_MB_PER_INSTANCE,
        "connect_20_s": TARGET_CONNECT_20_S,
    }
    if not args.skip_memory:
        mem = await phase_memory((1, 21), args.settle, args.mem_traffic)
        result["memory"] = mem
        met["mb_per_extra_instance"] = mem["rss_mb_per_extra_instance"] <= TARGET_MB_PER_INSTANCE
        if mem["connect_20_s"] is not None:
            met["connect_20_s"] = mem["connect_20_s"] <= TARGET_CONNECT_20_S
    result["targets_met"] = met
    result["load_average_at_end"] = _loadavg()
    return result


def _leftovers() -> dict[str, Any]:
    gc.collect()
    return {
        "tasks": len(asyncio.all_tasks()) - 1,  # this one
        # asyncio.to_thread's idle worker is the executor's, kept for reuse.
        "threads": sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()),
        "objects": len(gc.get_objects()),
        "rss_mb": round(proc_rss_mb(os.getpid())),
    }


def _machine() -> str:
    model = platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    return f"{os.cpu_count()} × {model}, {platform.system()}"


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def draw_charts(r: dict[str, Any], out: Path, command: str) -> list[str]:
    from charts import latency_chart, rounds_chart

    out.mkdir(parents=True, exist_ok=True)
    caption = (
        f"{r['date']}, {r['machine']}, Python {r['python']}, "
        f"{r['database']}, load average {r['load_average_at_start']} → {r['load_average_at_end']}; {command}"
    )
    paths = []
    if "rounds" in r:
        paths.append(str(rounds_chart(r, out / "fleet-rounds.png", caption)))
    if SAMPLES:
        paths.append(str(latency_chart(dict(SAMPLES), out / "latency.png", caption)))
    return paths


def summary(r: dict[str, Any]) -> str:
    lines = _throughput_lines(r) if "fleet" in r else []
    mem = r.get("memory")
    if mem:
        runs = mem["runs"]
        hi = runs[max(runs, key=int)]
        lines.append(
            f"memory: {mem['rss_mb_per_extra_instance']} MB per extra instance idle "
            f"(RSS {runs['1']['rss_mb']} → {hi['rss_mb']} MB), "
            f"{mem.get('rss_mb_per_extra_instance_after_traffic')} MB after traffic "
            f"(RSS {runs['1'].get('rss_mb_after_traffic')} → {hi.get('rss_mb_after_traffic')} MB); "
            f"target ≤ {TARGET_MB_PER_INSTANCE}"
        )
        lines.append(
            f"connect: 20 instances in {mem['connect_20_s']} s from process start (first connection at "
            f"{hi['first_connected_s']} s; 1 instance: {runs['1']['all_connected_s']} s; "
            f"target ≤ {TARGET_CONNECT_20_S})"
        )
    missed = [k for k, ok in r["targets_met"].items() if not ok]
    lines.append("targets: " + ("all met" if not missed else "missed: " + ", ".join(missed)))
    return "\n".join(lines)


def _throughput_lines(r: dict[str, Any]) -> list[str]:
    b, f = r["bare_bolt"], r["fleet"]
    lines = [
        f"throughput ({r['messages']} messages = {r['envelopes']} envelopes, {r['cpus']} CPUs):",
        f"  bare bolt  {b['envelopes_acked_per_s']:>6} acks/s  {b['cpu_us_per_envelope']:>6} µs CPU/env",
        f"  fleet      {f['envelopes_acked_per_s']:>6} acks/s  {f['cpu_us_per_envelope']:>6} µs CPU/env; "
        f"processed {f['messages_processed_per_s']} messages/s "
        f"({f['inbox_rows_finished_per_s']} inbox rows/s)",
        f"  ratio fleet/bare (median of {len(r['rounds'])} rounds): acks {r['ratio_acks']} "
        f"(target ≥ {TARGET_RATIO_ACKS}, every round ≥ {TARGET_RATIO_ACKS_EVERY_ROUND}: lowest "
        f"{r['ratio_acks_lowest_round']}), processing {r['ratio_processing']} "
        f"(target ≥ {TARGET_RATIO_PROCESSING})",
        "  rounds acks: " + ", ".join(str(x["ratio_acks"]) for x in r["rounds"]),
        "  rounds processing: " + ", ".join(str(x["ratio_processing"]) for x in r["rounds"]),
    ]
    for who, lat in (
        ("fleet while the burst's turns drain", f.get("latency_while_turns_drain")),
        ("fleet, steady", f.get("latency")),
        ("bare bolt", b.get("latency")),
    ):
        if lat:
            lines.append(
                f"ack latency {who} at {lat['envelopes_per_s']} envelopes/s: p50 {lat['p50_ms']} ms, "
                f"p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms"
                + (f" (target p99 ≤ {TARGET_P99_MS} ms)" if who != "bare bolt" else "")
            )
    rep = r.get("reply_latency")
    if rep:
        lines.append(
            f"reply latency at {rep['mentions_per_s']} mentions/s (unpaced): p50 {rep['p50_ms']} ms, "
            f"p99 {rep['p99_ms']} ms, max {rep['max_ms']} ms "
            f"(targets p50 ≤ {TARGET_REPLY_P50_MS}, p99 ≤ {TARGET_REPLY_P99_MS})"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=5000, help="human messages per throughput phase")
    p.add_argument("--rounds", type=int, default=5, help="bare/fleet rounds; the ratios are their medians")
    p.add_argument("--rate", type=float, default=100.0, help="steady messages/s for the latency phase")
    p.add_argument("--rate-seconds", type=float, default=10.0, help="length of the latency phase")
    p.add_argument("--settle", type=float, default=1.0, help="seconds after connecting before RSS")
    p.add_argument(
        "--mem-traffic", type=int, default=200, help="messages (50/s) after connecting, for RSS after traffic"
    )
    p.add_argument("--skip-throughput", action="store_true", help="also skips the latency phase")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-bare-latency", action="store_true", help="no reference latency for bare bolt")
    p.add_argument("--profile-fleet", metavar="FILE", help="cProfile the fleet phase's measured stretch")
    p.add_argument("--skip-replies", action="store_true", help="no reply-latency phase")
    p.add_argument("--charts", metavar="DIR", help="draw fleet-rounds.png and latency.png there")
    p.add_argument(
        "--database-url",
        metavar="URL",
        help="run the fleet phase on this (empty) database, e.g. postgresql+psycopg://…; default: SQLite",
    )
    p.add_argument("--metrics", action="store_true", help="serve /metrics and scrape it every second")
    args = p.parse_args()
    r = eventloop.run(run(args))  # both phases: bolt acks as fast on uvloop as on asyncio (BENCHMARKS.md)
    if args.charts:
        command = "bench/fleet_bench.py " + " ".join(sys.argv[1:])
        r["charts"] = draw_charts(r, Path(args.charts), command)
    print(json.dumps(r))
    print(summary(r))


if __name__ == "__main__":
    main()
