"""What routines cost when there is nothing to do, and what they leave in the store (docs/routines.md).

1. **Idle cost.** A ``nanoslack run`` child against the emulator: ``--instances`` × ``--per``
   routines (default 5 × 10 = 50), each ``every = "10s"`` with a gate that exits 1 (nothing
   to do), the ``openai`` back end pointed at a local model server that counts requests, for
   ``--minutes`` (default 10). Prints the due times recorded, the model requests (must be 0)
   and the fleet's CPU per due time, its gate processes included and apart.
2. **The clock alone.** One instance's ``RoutineClock`` on a SQLite store, 50 routines, a
   simulated clock stepped one due time after another: CPU µs per due time (claiming its row,
   the ``skipped``/``paused`` path, no turn).
3. **Store growth.** 10,000 finished ``routine_runs`` rows into a SQLite store: bytes per 1,000.

    .venv/bin/python bench/routines_bench.py --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - puts the repository on sys.path
from _common import drop_proxies

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.halts import Halts
from nanoslack.logs import configure_logging
from nanoslack.routines.clock import RoutineClock, RunQueue
from nanoslack.routines.spec import load
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from nanoslack.testing.llm_server import LLMServer, backend_env, openai_text


def _cpu(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its waited-for children's) from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _routines_file(folder: Path, channel: str, per: int, every: str, gate: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    gate_line = ""
    if gate is not None:
        script = folder / "nothing.sh"
        script.write_text("#!/bin/sh\nexit 1\n")
        script.chmod(0o755)
        gate_line = 'gate = "./nothing.sh"\n'
    body = "".join(
        f'[[routine]]\nname = "r{i}"\nevery = "{every}"\nchannel = "{channel}"\n'
        f'prompt = "Anything?"\n{gate_line}\n'
        for i in range(per)
    )
    path = folder / "routines.toml"
    path.write_text(body)
    return path


async def idle_cost(minutes: float, instances: int, per: int, *, routines: bool = True) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="nanoslack-routines-bench-"))
    async with Emulator(ack_timeout=1.0) as emu, LLMServer() as llm:
        llm.openai.default = openai_text()
        alice = emu.add_user("alice")
        apps = [emu.add_app(f"bot{i}") for i in range(instances)]
        room = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps)]).id
        for app in apps:
            if routines:
                _routines_file(tmp / "teammates" / app.name, room, per, "10s", gate="exit 1")
            else:
                (tmp / "teammates" / app.name).mkdir(parents=True)
        db = tmp / "data" / "nanoslack.db"
        env_file = write_fleet_env(
            tmp / ".env",
            emu,
            apps,
            db,
            SLACK_A2A_ROOMS=room,
            SLACK_OWNER=alice.id,
            NANOSLACK_TEAMMATES=str(tmp / "teammates"),
            **backend_env("openai", llm, "sk-bench"),
        )
        Store.open(sqlite_url(str(db))).close()
        fleet = FleetProcess.start(env_file)
        try:
            want = instances * per if routines else 0
            await emu.wait_for(lambda: scalar(db, "SELECT count(*) FROM routines") == want, timeout=60)
            await emu.wait_for(lambda: all(emu.connections(a.app_id) >= 1 for a in apps), timeout=60)
            await asyncio.sleep(2.0)  # past start-up
            rows0 = scalar(db, "SELECT count(*) FROM routine_runs")
            own0, kids0 = _cpu(fleet.pid)
            t0 = time.monotonic()
            await asyncio.sleep(minutes * 60)
            own1, kids1 = _cpu(fleet.pid)
            elapsed = time.monotonic() - t0
            rows1 = scalar(db, "SELECT count(*) FROM routine_runs")
            grouped = sql(db, "SELECT status || '/' || reason, count(*) FROM routine_runs GROUP BY 1")
            statuses = {str(s): int(n) for s, n in grouped}
        finally:
            await fleet.stop()
        due = rows1 - rows0
        return {
            "routines": instances * per,
            "seconds": round(elapsed, 1),
            "due_times": due,
            "statuses": statuses,
            "model_requests": len(llm.openai.requests),
            "fleet_cpu_s": round(own1 - own0, 3),
            "gate_cpu_s": round(kids1 - kids0, 3),
            "fleet_us_per_due_time": round((own1 - own0) / max(due, 1) * 1e6),
            "with_gates_us_per_due_time": round((own1 - own0 + kids1 - kids0) / max(due, 1) * 1e6),
            "fleet_cpu_share": round((own1 - own0) / elapsed, 4),
        }


async def clock_alone(due_times: int, per: int = 50, *, log_level: str = "info") -> dict[str, object]:
    configure_logging(log_level, "json")
    tmp = Path(tempfile.mkdtemp(prefix="nanoslack-routines-clock-"))
    store = Store.open(sqlite_url(str(tmp / "bench.db")))
    path = _routines_file(tmp / "teammates" / "dana", "C0ROOM", per, "10s", gate=None)
    for i in range(per):
        store.routines.define("dana", [(f"r{i}", "every 10s", "C0ROOM", None) for i in range(per)])
    sim = [1_800_000_000.0]

    async def loader():  # type: ignore[no-untyped-def]
        return load(path, "dana")

    clock = RoutineClock(
        store, "dana", path=path, load=loader, queue=RunQueue(), halts=Halts(store), clock=lambda: sim[0]
    )
    await clock.tick(sim[0])
    for i in range(per):
        store.routines.set_paused("dana", f"r{i}", True)  # the skipped path: no turn, just the row
    steps = due_times // per
    start = time.process_time()
    for _ in range(steps):
        sim[0] += 10.0
        await clock.tick(sim[0])
    cpu = time.process_time() - start
    rows = store.routines.counts("dana")
    store.close()
    return {"due_times": steps * per, "rows": rows, "us_per_due_time": round(cpu / (steps * per) * 1e6, 1)}


def store_growth(rows: int = 10_000) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="nanoslack-routines-store-"))
    db = tmp / "growth.db"
    store = Store.open(sqlite_url(str(db)))
    before = _used_bytes(store)
    for i in range(rows):
        store.routines.claim("dana", f"r{i % 50}", 1_800_000_000.0 + (i // 50) * 10.0, "skipped", "gate")
    after = _used_bytes(store)
    store.close()
    return {"rows": rows, "bytes_per_1000_runs": round((after - before) / rows * 1000)}


def _used_bytes(store: Store) -> int:
    with store.transaction() as conn:
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)
        free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
        size = int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0)
    return (pages - free) * size


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--per", type=int, default=10)
    parser.add_argument("--clock-due-times", type=int, default=20_000)
    args = parser.parse_args()
    drop_proxies()
    quiet = await clock_alone(args.clock_due_times, log_level="warning")
    logged = await clock_alone(args.clock_due_times, log_level="info")
    configure_logging("warning", "json")
    baseline = await idle_cost(args.minutes, args.instances, args.per, routines=False)
    gated = await idle_cost(args.minutes, args.instances, args.per)
    extra = float(gated["fleet_cpu_s"]) - float(baseline["fleet_cpu_s"])  # type: ignore[arg-type]
    due = max(int(gated["due_times"]), 1)  # type: ignore[call-overload]
    out = {
        "clock_alone_no_log": quiet,
        "clock_alone_info_log": logged,
        "store_growth": store_growth(),
        "idle_fleet_without_routines": baseline,
        "idle_cost": gated,
        "marginal_fleet_us_per_due_time": round(extra / due * 1e6),
        "marginal_with_gates_us_per_due_time": round((extra + float(gated["gate_cpu_s"])) / due * 1e6),  # type: ignore[arg-type]
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
