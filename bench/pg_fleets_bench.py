"""Several ``nanoslack run`` processes on one PostgreSQL against bare bolt, one run.

Each round, on a fresh emulator (subprocess) with ``--apps`` apps in one MPIM with a human:
bare bolt (one slack-bolt ``AsyncApp`` + ``AsyncSocketModeHandler`` per app in this
process, no-op ``message`` listener), then ``--processes`` ``nanoslack run`` subprocesses
sharing the apps between them (silent script agents, log level warning), all on one fresh
PostgreSQL database. Both get ``--messages`` human messages without mentions (one envelope
per app each) after a warm-up; measured: envelopes acked per second (emulator ``stats``),
the ratio fleet/bare per round and its median.

PostgreSQL: ``--database-url postgresql+psycopg://…/postgres`` names a server (a database is
created per round beside it), or without it a throwaway server is started with ``initdb`` /
``pg_ctl`` (``tests/pg.py``, fsync off) on a free port.

    .venv/bin/python bench/pg_fleets_bench.py --apps 60 --processes 3 --messages 500 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    bare_bolt_apps,
    drop_proxies,
    proc_cpu,
    start_emulator,
    stop_process,
    wait_until,
)
from fleet_bench import Driver, silent_agent, write_fleet_env

from nanoslack.fleetproc import FleetProcess

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nanoslack.testing.pg import PgServer, find_bin_dir  # noqa: E402 — the repo root is on the path only now

WARMUP = 20


async def _acked(drv: Driver) -> int:
    return int((await drv.stats())["acked"])


async def _connections_at_least(drv: Driver, n: int) -> bool:
    return int((await drv.stats())["connections"]) >= n


async def _burst(drv: Driver, info: dict[str, Any], n_apps: int, n_messages: int) -> dict[str, Any]:
    """Warm-up, then ``n_messages`` posted at once; acks/s until the last is acked."""
    alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
    base = await _acked(drv)
    await drv.bulk_post(alice, room, [f"warm {i}" for i in range(WARMUP)])
    want = base + WARMUP * n_apps
    await wait_until(lambda: _acked_at_least(drv, want), within=120, interval=0.02, what="warm-up acked")
    want += n_messages * n_apps
    t0 = time.perf_counter()
    for i in range(0, n_messages, 500):
        await drv.bulk_post(alice, room, [f"bench {j}" for j in range(i, min(n_messages, i + 500))])
    await wait_until(lambda: _acked_at_least(drv, want), within=600, interval=0.02, what="all acked")
    wall = time.perf_counter() - t0
    stats = await drv.stats()
    return {
        "envelopes": n_messages * n_apps,
        "seconds": round(wall, 3),
        "acks_per_s": round(n_messages * n_apps / wall),
        "redelivered": stats["redelivered"],
    }


async def _acked_at_least(drv: Driver, n: int) -> bool:
    return await _acked(drv) >= n


async def phase_bare(n_apps: int, n_messages: int) -> dict[str, Any]:
    proc, info = start_emulator(n_apps)
    drv = Driver(info["base_url"])
    try:
        async with bare_bolt_apps(info):
            await wait_until(
                lambda: _connections_at_least(drv, n_apps), within=60, what="bare bolt connected"
            )
            return await _burst(drv, info, n_apps, n_messages)
    finally:
        await drv.close()
        stop_process(proc)


async def phase_fleets(n_apps: int, n_processes: int, n_messages: int, db_url: str) -> dict[str, Any]:
    proc, info = start_emulator(n_apps)
    drv = Driver(info["base_url"])
    children: list[FleetProcess] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pg-fleets-") as tmp:
            alice = info["users"][0]["id"]
            for p in range(n_processes):
                folder = Path(tmp) / f"p{p}"
                folder.mkdir()
                env = folder / ".env"
                apps = info["apps"][p::n_processes]
                write_fleet_env(
                    env, info, apps, folder / "unused.db", DATABASE_URL=db_url, SLACK_OWNER=alice,
                    LOG_LEVEL="warning", **silent_agent(folder),
                )  # fmt: skip
                children.append(FleetProcess.start(env, log_file=folder / "fleet.log"))
            await wait_until(lambda: _connections_at_least(drv, n_apps), within=180, what="fleets connected")
            result = await _burst(drv, info, n_apps, n_messages)
            result["cpu_s_per_process"] = [round(proc_cpu(c.pid), 2) for c in children]
            return result
    finally:
        for child in children:
            try:
                await child.stop(120)
            except AssertionError as exc:
                print(f"a fleet did not stop cleanly: {str(exc).splitlines()[0]}", file=sys.stderr)
        await drv.close()
        stop_process(proc)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    drop_proxies()
    server: PgServer | None = None
    if args.database_url:
        admin_url = args.database_url
    else:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise SystemExit("no PostgreSQL binaries found: give --database-url")
        server = PgServer(bin_dir).start()
        admin_url = server.url("postgres")
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            bare = await phase_bare(args.apps, args.messages)
            db_url = _fresh_database(server, admin_url, i)
            fleets = await phase_fleets(args.apps, args.processes, args.messages, db_url)
            rounds.append(
                {
                    "bare": bare,
                    "fleets": fleets,
                    "ratio_acks": round(fleets["acks_per_s"] / bare["acks_per_s"], 3),
                    "load_average": os.getloadavg(),
                }
            )
            print(json.dumps({"round": i + 1, **rounds[-1]}), file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    return {
        "apps": args.apps,
        "processes": args.processes,
        "messages": args.messages,
        "rounds": rounds,
        "ratio_acks": statistics.median(r["ratio_acks"] for r in rounds),
        "target_ratio_acks": 1.0,
    }


def _fresh_database(server: PgServer | None, admin_url: str, i: int) -> str:
    if server is not None:
        return server.fresh_database()
    import psycopg

    name = f"nanoslack_pg_fleets_{os.getpid()}_{i}"
    plain = admin_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--apps", type=int, default=60)
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--messages", type=int, default=500, help="human messages per phase (× apps envelopes)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--database-url", metavar="URL", help="a PostgreSQL server's URL (postgres database)")
    r = asyncio.run(run(p.parse_args()))
    print(json.dumps(r))
    print(f"acks fleets/bare: median {r['ratio_acks']} (rounds {[x['ratio_acks'] for x in r['rounds']]})")


if __name__ == "__main__":
    main()
