"""How the fleet's cost grows with instances and with rooms (docs/architecture.md, BENCHMARKS.md).

Each configuration: the emulator in a subprocess, ``nanoslack run`` as a subprocess
(silent script agents, SQLite in a temp dir, log level warning). Reported per
configuration: time from process start to every instance connected, RSS once
settled (and per extra instance against the 1-instance run), and envelopes acked
per second for a burst of about ``--envelopes`` envelopes (human messages without
mentions, spread round-robin over the rooms; each is one envelope per instance).

    .venv/bin/python bench/scale.py                       # instances 1,10,50,100; rooms 1,10,100
    .venv/bin/python bench/scale.py --instances 1,10 --rooms 1
    .venv/bin/python bench/scale.py --instances 1,200 --rooms "" --envelopes 100000 --bare

``--bare``: each instances configuration's burst also goes to as many bare slack-bolt apps
(no-op listeners, in this process, on a fresh emulator), and the fleet's acks/s is given
as a ratio of theirs (``ratio_acks``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    bare_bolt_apps,
    bench_workspace,
    drop_proxies,
    proc_rss_mb,
    start_emulator,
    stop_process,
    wait_until,
)
from fleet_bench import Driver, silent_agent, write_fleet_env

from nanoslack.fleetproc import FleetProcess


async def _acked(drv: Driver) -> int:
    return int((await drv.stats())["acked"])


def _spec(n_apps: int, n_rooms: int) -> dict[str, Any]:
    spec = bench_workspace(n_apps, n_rooms)
    if n_apps == 1:  # an MPIM needs three members: one instance talks in an IM
        for conv in spec["conversations"]:
            conv["kind"] = "im"
    return spec


async def _burst(drv: Driver, info: dict[str, Any], n_apps: int, envelopes: int) -> tuple[int, float]:
    """Post about ``envelopes`` envelopes' worth of human messages over the rooms and wait
    until every one is acked: (envelopes, acks per second)."""
    alice = info["users"][0]["id"]
    rooms = [c["id"] for c in info["conversations"]]
    n_messages = max(1, envelopes // n_apps)
    base = await _acked(drv)
    texts = [f"scale {i}" for i in range(n_messages)]
    t1 = time.perf_counter()
    for r, room in enumerate(rooms):
        mine = texts[r :: len(rooms)]
        for i in range(0, len(mine), 500):
            await drv.bulk_post(alice, room, mine[i : i + 500])
    want = base + n_messages * n_apps

    async def all_acked() -> bool:
        return await _acked(drv) >= want

    await wait_until(all_acked, within=600, interval=0.02, what="all acked")
    return n_messages * n_apps, n_messages * n_apps / (time.perf_counter() - t1)


async def bare(n_apps: int, envelopes: int) -> dict[str, Any]:
    """The same burst to ``n_apps`` bare slack-bolt apps, for the ratio."""
    proc, info = start_emulator(n_apps, spec=_spec(n_apps, 1))
    drv = Driver(info["base_url"])
    try:
        t0 = time.perf_counter()
        async with bare_bolt_apps(info):
            await wait_until(
                lambda: _connections_at_least(drv, n_apps), within=120, interval=0.01, what="connected"
            )
            connected_s = time.perf_counter() - t0
            # one message per room first, as fleet_bench warms bolt: its lazy auth.test per
            # app and first dispatch (the fleet asks auth.test while it connects)
            await _burst(drv, info, n_apps, n_apps * len(info["conversations"]))
            n, rate = await _burst(drv, info, n_apps, envelopes)
        return {
            "instances": n_apps,
            "envelopes": n,
            "acks_per_s": round(rate),
            "connected_s": round(connected_s, 3),
        }
    finally:
        await drv.close()
        stop_process(proc)


async def one(n_apps: int, n_rooms: int, envelopes: int, settle: float) -> dict[str, Any]:
    proc, info = start_emulator(n_apps, spec=_spec(n_apps, n_rooms))
    drv = Driver(info["base_url"])
    out: dict[str, Any] = {"instances": n_apps, "rooms": n_rooms}
    try:
        with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
            alice = info["users"][0]["id"]
            env = Path(tmp) / ".env"
            db = Path(tmp) / "nanoslack.db"
            write_fleet_env(
                env, info, info["apps"], db, SLACK_OWNER=alice, LOG_LEVEL="warning", **silent_agent(tmp)
            )
            t0 = time.perf_counter()
            child = FleetProcess.start(env, log_file=Path(tmp) / "fleet.log")
            try:
                await wait_until(
                    lambda: _connections_at_least(drv, 1), within=120, interval=0.01, what="first connected"
                )
                t_first = time.perf_counter()
                out["first_connected_s"] = round(t_first - t0, 3)  # mostly Python's imports
                await wait_until(
                    lambda: _connections_at_least(drv, n_apps), within=120, interval=0.01, what="connected"
                )
                out["all_connected_s"] = round(time.perf_counter() - t0, 3)
                out["first_to_all_connected_s"] = round(time.perf_counter() - t_first, 3)
                await asyncio.sleep(settle)
                out["rss_mb"] = round(proc_rss_mb(child.pid), 1)
                out["envelopes"], rate = await _burst(drv, info, n_apps, envelopes)
                out["acks_per_s"] = round(rate)
                out["peak_rss_mb"] = round(proc_rss_mb(child.pid, "VmHWM"), 1)
            finally:
                t_stop = time.perf_counter()
                try:
                    await child.stop(120)
                except AssertionError as exc:  # the figures above still stand; say why it did not stop
                    out["stop_error"] = str(exc).splitlines()[0]
                out["stop_s"] = round(time.perf_counter() - t_stop, 3)
    finally:
        await drv.close()
        stop_process(proc)
    return out


async def _connections_at_least(drv: Driver, n: int) -> bool:
    return (await drv.stats())["connections"] >= n


async def run(args: argparse.Namespace) -> dict[str, Any]:
    drop_proxies()
    by_instances = []
    for n in [int(x) for x in args.instances.split(",")]:
        by_instances.append(await one(n, 1, args.envelopes, args.settle))
        if args.bare:
            theirs = await bare(n, args.envelopes)
            by_instances[-1]["bare_bolt"] = theirs
            by_instances[-1]["ratio_acks"] = round(by_instances[-1]["acks_per_s"] / theirs["acks_per_s"], 2)
        print(json.dumps(by_instances[-1]), flush=True)
    base = by_instances[0]
    for r in by_instances[1:]:
        r["rss_mb_per_extra_instance"] = round(
            (r["rss_mb"] - base["rss_mb"]) / (r["instances"] - base["instances"]), 2
        )
    by_rooms = []
    for n_rooms in [int(x) for x in args.rooms.split(",") if x]:  # --rooms "": no rooms series
        by_rooms.append(await one(args.room_instances, n_rooms, args.envelopes, args.settle))
        print(json.dumps(by_rooms[-1]), flush=True)
    return {"by_instances": by_instances, "by_rooms": by_rooms}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--instances", default="1,10,50,100")
    p.add_argument("--rooms", default="1,10,100")
    p.add_argument("--room-instances", type=int, default=10, help="instances for the rooms series")
    p.add_argument("--envelopes", type=int, default=20_000)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument(
        "--bare", action="store_true", help="the same bursts to bare slack-bolt apps, for the ratio"
    )
    print(json.dumps(asyncio.run(run(p.parse_args())), indent=1))


if __name__ == "__main__":
    main()
