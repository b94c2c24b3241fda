"""A restart that finds a burst queued (docs/architecture.md: ≤ 100 MB over idle, nothing lost).

The emulator (a subprocess) holds ``--apps`` apps in one MPIM with a human.
``nanoslack run`` starts (a subprocess, silent script agents), connects, settles:
its RSS is the idle figure; it is stopped (SIGTERM). While no socket is open the
human posts ``--envelopes / --apps`` messages: the emulator queues one envelope
per app and message and delivers them all when the fleet comes back. The fleet
is started again; the bench polls its RSS and the store until every envelope's
inbox row is finished, then reports idle RSS, peak RSS (VmHWM) and its excess
over idle, time to all connected, time to drain (from the restart), envelopes
redelivered by the emulator, and ``lost`` (queued envelopes with no finished
inbox row: must be 0).

    .venv/bin/python bench/burst.py --apps 20 --envelopes 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import drop_proxies, proc_rss_mb, start_emulator, stop_process, wait_until
from fleet_bench import Driver, silent_agent, write_fleet_env

from nanoslack.fleetproc import FleetProcess
from nanoslack.store import Store, sqlite_url

TARGET_EXTRA_MB = 100.0


def finished_rows(db: Path) -> int:
    if not db.exists():
        return 0
    with Store.open(sqlite_url(str(db))) as store:
        counts = store.inbox.counts()
    return counts.get("done", 0) + counts.get("dropped", 0)


async def connected(drv: Driver, n: int) -> bool:
    return (await drv.stats())["connections"] >= n


async def disconnected(drv: Driver) -> bool:
    return (await drv.stats())["connections"] == 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    drop_proxies()
    n_apps = args.apps
    n_messages = args.envelopes // n_apps
    proc, info = start_emulator(n_apps)
    drv = Driver(info["base_url"])
    out: dict[str, Any] = {"apps": n_apps, "messages": n_messages, "envelopes": n_messages * n_apps}
    try:
        with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
            alice, room = info["users"][0]["id"], info["conversations"][0]["id"]
            db = Path(tmp) / "nanoslack.db"
            env = Path(tmp) / ".env"
            write_fleet_env(
                env, info, info["apps"], db, SLACK_OWNER=alice, LOG_LEVEL="warning", **silent_agent(tmp)
            )
            child = FleetProcess.start(env, log_file=Path(tmp) / "fleet.log")
            await wait_until(lambda: connected(drv, n_apps), within=60, what="first run connected")
            await asyncio.sleep(args.settle)
            out["idle_rss_mb"] = round(proc_rss_mb(child.pid), 1)
            await child.stop(30)
            await wait_until(lambda: disconnected(drv), within=30, what="first run gone")

            texts = [f"burst {i}" for i in range(n_messages)]  # no mention: room context
            for i in range(0, len(texts), 500):
                await drv.bulk_post(alice, room, texts[i : i + 500])
            before = finished_rows(db)

            t0 = time.perf_counter()
            child = FleetProcess.start(env, log_file=Path(tmp) / "fleet.log")
            peak = 0.0
            try:
                deadline = t0 + args.timeout
                while True:
                    rss = proc_rss_mb(child.pid, "VmHWM")
                    peak = max(peak, rss)
                    if "all_connected_s" not in out and await connected(drv, n_apps):
                        out["all_connected_s"] = round(time.perf_counter() - t0, 3)
                    done = finished_rows(db) - before
                    if done >= out["envelopes"]:
                        break
                    if not child.running:
                        raise RuntimeError(f"nanoslack run exited with {child.returncode}\n{child.tail()}")
                    if time.perf_counter() > deadline:
                        break
                    await asyncio.sleep(0.05)
                out["drain_s"] = round(time.perf_counter() - t0, 3)
                await asyncio.sleep(args.settle)
                out["rss_after_mb"] = round(proc_rss_mb(child.pid), 1)
                peak = max(peak, proc_rss_mb(child.pid, "VmHWM"))
            finally:
                await child.stop(30)
            finished = finished_rows(db) - before
            stats = await drv.stats()
            out["peak_rss_mb"] = round(peak, 1)
            out["peak_over_idle_mb"] = round(peak - out["idle_rss_mb"], 1)
            out["envelopes_per_s"] = round(out["envelopes"] / out["drain_s"])
            out["finished_rows"] = finished
            out["lost"] = max(0, out["envelopes"] - finished)
            out["redelivered"] = stats.get("redelivered")
            out["target_extra_mb"] = TARGET_EXTRA_MB
            out["target_met"] = out["lost"] == 0 and out["peak_over_idle_mb"] <= TARGET_EXTRA_MB
    finally:
        await drv.close()
        stop_process(proc)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--apps", type=int, default=20)
    p.add_argument("--envelopes", type=int, default=20_000)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
